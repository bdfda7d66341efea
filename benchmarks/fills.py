"""Fills on a 4096x4096 kernel against their Keras equivalents, and large given values."""

import keras
import numpy as np

import tfinit
from benchmarks._timing import compare

PAIRS = [
    ("XavierFill", lambda: tfinit.XavierFill(seed=1), "VarianceScaling(1, fan_in, uniform)",
     lambda: keras.initializers.VarianceScaling(1.0, "fan_in", "uniform", seed=1)),
    ("MSRAFill", lambda: tfinit.MSRAFill(seed=1), "VarianceScaling(2, fan_out, untruncated_normal)",
     lambda: keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal", seed=1)),
    ("GaussianFill", lambda: tfinit.GaussianFill(std=0.01, seed=1), "RandomNormal",
     lambda: keras.initializers.RandomNormal(stddev=0.01, seed=1)),
    ("UniformFill", lambda: tfinit.UniformFill(-0.1, 0.1, seed=1), "RandomUniform",
     lambda: keras.initializers.RandomUniform(-0.1, 0.1, seed=1)),
    ("ConstantFill", lambda: tfinit.ConstantFill(0.5), "Constant",
     lambda: keras.initializers.Constant(0.5)),
]


def run(quick):
    side = 1024 if quick else 4096
    shape = (side, side)
    repeats = 7 if quick else 15
    rows = []
    for ours_name, ours, base_name, base in PAIRS:
        ours_init, base_init = ours(), base()
        rows.append(
            compare(
                f"{ours_name} vs {base_name} {side}x{side}",
                lambda: ours_init(shape, "float32"),
                lambda: base_init(shape, "float32"),
                repeats,
            )
        )
    count = (4 if quick else 64) * 2**20
    array = np.random.default_rng(0).standard_normal(count, dtype=np.float32)
    given = tfinit.GivenTensorFill(array)
    rows.append(
        compare(
            f"GivenTensorFill -> Variable vs tf.Variable(array), {count // 2**20}M floats",
            lambda: keras.Variable(given, shape=(count,), dtype="float32"),
            lambda: _tf_variable(array),
            3 if quick else 7,
        )
    )
    return rows


def _tf_variable(array):
    import tensorflow as tf

    return tf.Variable(array)

"""The split master's test cases, shared by its TensorFlow and JAX test modules
(test_split_master.py, test_split_master_jax.py): the bit patterns, the model, the data and
the tie-aware comparison with the fp32-master run."""

import keras
import numpy as np

from tfinit import mixed_precision as mp

SPLIT = dict(mode="pseudo_fp16", compute_dtype="bfloat16", master="split")
FP32 = dict(mode="pseudo_fp16", compute_dtype="bfloat16", master="fp32")


def special_bits():
    """The fp32 bit patterns a split must keep exactly, or (ties above an even copy) by rule."""
    return np.array([
        0x00000000, 0x80000000,              # +0.0, -0.0
        0x7F800000, 0xFF800000,              # +inf, -inf
        0x00000001, 0x80000001, 0x007FFFFF,  # subnormals
        0x00008000, 0x00018000,              # subnormal ties (even, odd top half)
        0x3F808000, 0xBF808000,              # ties above an even copy (+, -): not exact
        0x3F818000, 0xBF818000,              # ties above an odd copy: exact
        0x3F807FFF, 0x3F808001,              # either side of a tie
        0x7F7FFFFF, 0x7F7F8000,              # the largest floats: their copy is inf
    ], np.uint32)


def layout_case(seed=0, n=200_000):
    """``special_bits`` then ``n`` random fp32 bit patterns (uint32)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([special_bits(), rng.integers(0, 2**32, n, dtype=np.uint64)
                           .astype(np.uint32)])


def model(master, seed=7, units=(24, 5)):
    """Dense(tanh), Dense on 10 inputs, seeded, in the split (``master="split"``) or the
    fp32-master scope."""
    keras.utils.set_random_seed(seed)
    with mp.scope(**(SPLIT if master == "split" else FP32)):
        return keras.Sequential([keras.Input((10,)),
                                 keras.layers.Dense(units[0], activation="tanh"),
                                 keras.layers.Dense(units[1])])


def data(n=48):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 10)).astype(np.float32), rng.normal(size=(n, 5)).astype(np.float32)


def assert_equal_up_to_ties(want, got, ulps=0):
    """``got`` (split masters) == ``want`` (fp32-master ones) bit for bit (or within ``ulps``),
    ties 1 ulp toward their copy; returns the number of ties."""
    ties = 0
    for w, g in zip(want, got, strict=True):
        w, g = w.view(np.uint32), g.view(np.uint32)
        tie = ((w & 0xFFFF) == 0x8000) & (((w >> 16) & 1) == 0)
        if ulps:
            apart = np.abs(g.astype(np.int64) - w.astype(np.int64))
            assert apart[~tie].max() <= ulps
        else:
            np.testing.assert_array_equal(g[~tie], w[~tie])
        np.testing.assert_array_equal(g[tie], w[tie] - 1)
        ties += int(tie.sum())
    return ties

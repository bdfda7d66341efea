"""Fills on a 4096x4096 kernel against their Keras equivalents, and large given values.

- Speed: each tfinit fill against its Keras equivalent (interleaved medians);
  ``GivenTensorFill`` and ``ExternalInitializer`` of a
  64M-element float32 array into a variable against ``tf.Variable(array)``.
- Memory: peak resident memory of loading that array into a variable, each way in a fresh
  process (``benchmarks._load_peak``), as copies of the array: ``copies`` is the peak growth
  over the memory held just before (the array already in memory) divided by its bytes.
  The variable itself is one copy; ``extra_copies`` is the rest (transient buffers).
"""

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import tfinit
from benchmarks import _load_peak
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

SIZES = {
    "smoke": dict(side=64, repeats=2, given_mi=1, given_repeats=2),
    "quick": dict(side=4096, repeats=7, given_mi=32, given_repeats=5),
    "full": dict(side=4096, repeats=15, given_mi=64, given_repeats=9),
}


def _host(tensor):
    # Values on the host: the work is done (and TF's async kernels finished) when timed.
    return keras.ops.convert_to_numpy(tensor[:1])


def run(mode):
    s = SIZES[mode]
    shape = (s["side"], s["side"])
    rows = []
    for ours_name, ours, base_name, base in PAIRS:
        ours_init, base_init = ours(), base()
        rows.append(compare(
            f"{ours_name} vs {base_name} {shape[0]}x{shape[1]}",
            lambda: _host(ours_init(shape, "float32")),
            lambda: _host(base_init(shape, "float32")),
            s["repeats"],
        ))
    count = s["given_mi"] * 2**20
    array = np.random.default_rng(0).standard_normal(count, dtype=np.float32)
    contenders = {
        "GivenTensorFill": lambda: keras.Variable(
            tfinit.GivenTensorFill(array), shape=(count,), dtype="float32"),
        "ExternalInitializer": lambda: _load_peak.METHODS["ExternalInitializer"](array),
    }
    for name, load in contenders.items():
        rows.append(compare(
            f"{name} -> variable vs tf.Variable(array), {s['given_mi']}M floats",
            lambda: _host(load()),
            lambda: _host(tf.Variable(array)),
            s["given_repeats"],
        ))
    return rows


def load_memory(mode, methods=None, mebi_floats=None):
    """Peak memory of loading a ``given_mi``M-float array, each method in its own process."""
    count = (mebi_floats or SIZES[mode]["given_mi"]) * 2**20
    if methods is None:
        methods = ["tf.Variable(array)", "GivenTensorFill", "ExternalInitializer"]
    rows = []
    for method in methods:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks._load_peak", method, str(count)],
            check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
        ).stdout
        m = json.loads(out.strip().splitlines()[-1])
        grown = m["peak_after"] - m["rss_before"]
        copies = grown / m["array_bytes"]
        rows.append({
            "name": f"load {count // 2**20}M floats: {method}",
            "array_mib": round(m["array_bytes"] / 2**20, 1),
            "peak_growth_mib": round(grown / 2**20, 1),
            "copies": round(copies, 3),
            "extra_copies": round(copies - 1, 3),
            # the peak before the load was higher: the growth is an upper bound
            "bound_only": not m["peak_reset"] and m["peak_after"] <= m["peak_before"],
        })
    return rows

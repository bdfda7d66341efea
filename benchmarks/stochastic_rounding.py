"""``master="stochastic"`` (bfloat16 weights, no master) against the other bfloat16 schemes.

One step's time of an MLP trained with Adam in a compiled step (``benchmarks.training``),
``master="stochastic"`` against ``master="fp32"`` and Keras ``mixed_bfloat16``: medians of
interleaved runs (``benchmarks._timing.compare``), and the bytes per parameter of the
variables each scheme holds between steps. Run: ``python -m benchmarks.stochastic_rounding``.
"""

import os

import numpy as np

from benchmarks import memory
from benchmarks._timing import compare
from benchmarks.training import Contender

SCHEMES = {
    "stochastic": dict(mode="pseudo_fp16", master="stochastic"),
    "fp32 master": dict(mode="pseudo_fp16", master="fp32"),
    "mixed_bfloat16 (Keras)": dict(mode="keras_mixed"),
}


def contender(scheme, width, batch=64):
    return Contender(kind="mlp", width=width, compute_dtype="bfloat16", batch=batch, seed=0,
                     **SCHEMES[scheme])


def bytes_per_param(scheme, width):
    """Bytes per parameter of every variable ``scheme`` creates (optimizer state included)."""
    made, created = memory.created_by(lambda: contender(scheme, width, batch=8))
    params = memory.parameter_count(made.model)
    return round(sum(memory.bytes_by_dtype(created).values()) / params, 2)


def time_row(width, batch=64, repeats=15, steps=5):
    made = {name: contender(name, width, batch) for name in SCHEMES}
    for c in made.values():
        if not np.isfinite(c.run()):
            raise RuntimeError("non-finite loss")
    row = compare(f"MLP width {width} bfloat16 Adam: stochastic vs fp32 master",
                  lambda: made["stochastic"].run(steps), lambda: made["fp32 master"].run(steps),
                  repeats, others={"mixed_bfloat16": lambda: made["mixed_bfloat16 (Keras)"]
                                   .run(steps)})
    for key in list(row):
        if key.endswith("_ms"):
            row[key] = round(row[key] / steps, 3)
    return row


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for scheme in SCHEMES:
        print(scheme, "bytes/param with Adam:", bytes_per_param(scheme, 256))
    for width in (256, 1024):
        print(time_row(width))

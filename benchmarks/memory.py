"""Persistent bytes per parameter, per precision mode, with Adam.

Counted from the variables that exist after one compiled Adam step: every ``tf.Variable``
created while the model and its optimizer were built and stepped (found by the garbage
collector, so masters and copies that no model attribute exposes are counted too), divided
by the number of model parameters. Expected: fp32 and Keras mixed 4 (weight) + 8 (Adam's
two slots) = 12; pseudo_fp16 and reverse add the 16-bit copy: 2 + 4 + 8 = 14.
"""

import gc

import numpy as np
import tensorflow as tf

from benchmarks.training import Contender

MODES = [
    ("fp32", "fp32", "float16"),
    ("mixed_float16 (Keras)", "keras_mixed", "float16"),
    ("mixed_bfloat16 (Keras)", "keras_mixed", "bfloat16"),
    ("pseudo_fp16 float16", "pseudo_fp16", "float16"),
    ("pseudo_fp16 bfloat16", "pseudo_fp16", "bfloat16"),
    ("reverse float16", "reverse", "float16"),
    ("reverse bfloat16", "reverse", "bfloat16"),
]


def _tf_variables():
    # type(o), not isinstance(o, ...): isinstance reads o.__class__, which some live objects
    # (numpy's NpzFile.f) answer with an AttributeError
    return {id(o): o for o in gc.get_objects() if issubclass(type(o), tf.Variable)}


def created_by(make):
    """``make()`` (a Contender), stepped once, and the tf.Variables its making created."""
    gc.collect()
    before = _tf_variables()
    contender = make()
    contender.run()
    gc.collect()
    return contender, [v for key, v in _tf_variables().items() if key not in before]


def bytes_by_dtype(variables):
    """Bytes of ``variables`` by dtype name."""
    by_dtype = {}
    for v in variables:
        # the size of what the variable holds now (a split pair's scratch: nothing)
        by_dtype[v.dtype.name] = by_dtype.get(v.dtype.name, 0) + int(tf.size(v)) * \
            v.dtype.size
    return by_dtype


def parameter_count(model):
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def measure(mode, compute_dtype, width):
    """Bytes by dtype of the variables a built-and-stepped MLP + optimizer holds."""
    contender, created = created_by(lambda: Contender(mode, "mlp", width, compute_dtype,
                                                      batch=8))
    params = parameter_count(contender.model)
    by_dtype = bytes_by_dtype(created)
    del contender
    return params, sum(by_dtype.values()), by_dtype, len(created)


def run(mode):
    width = 16 if mode == "smoke" else 256
    rows = []
    for name, contender_mode, compute_dtype in MODES:
        params, total, by_dtype, count = measure(contender_mode, compute_dtype, width)
        rows.append({
            "name": f"MLP width {width}, Adam: {name}",
            "params": params,
            "variables": count,
            "bytes_per_param": round(total / params, 3),
            **{f"{dtype}_bytes_per_param": round(b / params, 3)
               for dtype, b in sorted(by_dtype.items())},
        })
    return rows

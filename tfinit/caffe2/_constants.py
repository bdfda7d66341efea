"""Op inputs whose values are known when converting: a Reshape's new shape.

Caffe2's Reshape takes its new shape from its ``shape`` argument or from a second input
(never both). A second input that the init net fills (or an earlier op made as a constant,
Concat's ``split_info``) is an int vector known when the model is planned, so the reshape
is built like one with the argument; a shape computed at run time is refused.
"""

import math

import numpy as np

from tfinit.caffe2._op_args import Unsupported, ints


def keeps_first_axis(shape, dims):
    """Whether Caffe2's Reshape to ``shape`` keeps the first axis of a blob of ``dims`` (a
    Keras Reshape); not when a dim past the first is unknown (``N`` of a batch-major
    sequence converted time-major): then it is reshaped at run time."""
    if None in dims[1:]:
        return False
    if shape[0] == 0:
        return True
    target = [dims[k] if v == 0 else v for k, v in enumerate(shape) if k]
    return shape[0] == -1 and -1 not in shape[1:] and math.prod(target) == math.prod(dims[1:])


def reshape_target(b, op):
    """Reshape's new shape (Caffe2's ``0`` and ``-1`` kept): its ``shape`` argument, or its
    second input when ``b.params``/``b.constants`` hold it (an int vector)."""
    if len(op.inputs) < 2:
        if op.args.get("shape") is None:
            raise ValueError("Reshape needs a `shape` argument or a second input (Caffe2: "
                             "\"Argument `shape` is missing.\")")
        return ints(op.args["shape"], "shape", bits=64)
    if op.args.get("shape") is not None:
        raise ValueError("takes the new shape from its second input or the `shape` argument, "
                         "not both (Caffe2 refuses both)")
    known = {**b.params, **b.constants}
    if op.inputs[1] not in known:
        raise Unsupported(f"Reshape to a shape from '{op.inputs[1]}', a blob computed at run "
                          "time (one the init net fills is converted)")
    value = np.asarray(known[op.inputs[1]])
    if value.ndim != 1 or value.dtype.kind not in "iu":
        raise ValueError(f"its shape input '{op.inputs[1]}' must be a 1-D int32/int64 blob. "
                         f"Received: dtype {value.dtype}, shape {value.shape}")
    return ints(value, "shape", bits=64)

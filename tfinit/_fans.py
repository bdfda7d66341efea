"""Caffe2's fan rules and the move between Caffe2 and Keras weight layouts.

Caffe2 stores an FC weight as ``[out, in]`` and a conv weight as OIHW, and computes
``fan_in = numel // shape[0]`` (XavierFill) and ``fan_out = numel // shape[1]``
(MSRAFill), with integer division. Keras stores ``[in, out]`` and HWIO, i.e. the
output axis last and the input axis before it. ``layout="keras"`` reads the output
and input axes from the end of the shape, ``layout="caffe2"`` from the front, so
the same parameter gets the same fan in either layout. ``caffe2_shape`` and
``to_keras_layout`` move a parameter between the two layouts.
"""

import math

import numpy as np

LAYOUTS = ("keras", "caffe2")


def check_layout(layout, op_name):
    if layout not in LAYOUTS:
        raise ValueError(
            f"{op_name}: Argument `layout` must be one of {LAYOUTS}. Received: layout={layout!r}."
        )
    return layout


def numel(shape):
    return math.prod(int(d) for d in shape)


def output_axis(shape, layout):
    """The axis Caffe2 calls the output (filter) axis: 0 in Caffe2, last in Keras."""
    return 0 if layout == "caffe2" else len(shape) - 1


def input_axis(shape, layout):
    """The axis Caffe2 calls the input (channel) axis: 1 in Caffe2, -2 in Keras."""
    return 1 if layout == "caffe2" else len(shape) - 2


def xavier_fan_in(shape, layout, op_name="XavierFill"):
    """``numel // shape[output axis]``; a 1-D shape gives 1, as in Caffe2."""
    shape = tuple(shape)
    if not shape:
        raise ValueError(
            f"{op_name}: Argument `shape` must have at least 1 dimension to compute fan_in. "
            "Received: a 0-d shape ()."
        )
    return _safe_div(numel(shape), shape[output_axis(shape, layout)])


def msra_fan_out(shape, layout, op_name="MSRAFill"):
    """``numel // shape[input axis]``; needs >= 2 dimensions, as in Caffe2."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError(
            f"{op_name}: Argument `shape` must have at least 2 dimensions (an input axis) to "
            f"compute fan_out. Received: shape={shape}."
        )
    return _safe_div(numel(shape), shape[input_axis(shape, layout)])


def _safe_div(count, dim):
    # Caffe2 dies with SIGFPE when dim is 0; the tensor then has no elements, so 0.
    return count // dim if dim else 0


def caffe2_shape(keras_shape):
    """The Caffe2-layout shape of a Keras-layout weight: ``(*spatial, in, out)`` ->
    ``(out, in, *spatial)`` (Dense ``[in, out]`` -> ``[out, in]``, HWIO -> OIHW).
    Shapes of fewer than 2 dimensions are the same in both layouts.
    """
    shape = tuple(keras_shape)
    if len(shape) < 2:
        return shape
    return (shape[-1], shape[-2], *shape[:-2])


def to_keras_layout(values):
    """Move a Caffe2-layout array ``(out, in, *spatial)`` to Keras's ``(*spatial, in, out)``
    (``[out, in]`` -> ``[in, out]``; OIHW -> HWIO, i.e. ``transpose(2, 3, 1, 0)``)."""
    values = np.asarray(values)
    if values.ndim < 2:
        return values
    return np.ascontiguousarray(np.transpose(values, (*range(2, values.ndim), 1, 0)))

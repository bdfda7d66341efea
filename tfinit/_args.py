"""Argument checks shared by the fills and the initializer family.

Every error names the operator (or function) and the argument, in Keras's style:
``"GaussianFill: Argument `std` must be >= 0 ... Received: std=-1.0."``. Pure Python and
numpy, plus Keras's dtype names; no backend tensors.
"""

import numbers

import keras
import numpy as np


def check_real(value, op_name, arg, finite=True):
    """``value`` if it is a real number (not a bool), finite unless ``finite=False``.

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``finite`` and ``value`` is inf or NaN.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(
            f"{op_name}: Argument `{arg}` must be a real number. "
            f"Received: {arg}={value!r} (of type {type(value).__name__})."
        )
    if finite and not np.isfinite(value):
        raise ValueError(f"{op_name}: Argument `{arg}` must be finite. Received: {arg}={value!r}.")
    return value


def check_int(value, op_name, arg):
    """``value`` as a Python int if it is an integer (not a bool); else ``TypeError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{op_name}: Argument `{arg}` must be an integer. "
            f"Received: {arg}={value!r} (of type {type(value).__name__})."
        )
    return int(value)


def check_min_max(low, high, op_name):
    """``ValueError`` unless ``low < high`` (Caffe2's check, its message quoted)."""
    if not low < high:
        raise ValueError(
            f"{op_name}: Argument `min` must be smaller than `max` (Caffe2: "
            f"'Max value should be bigger than min value'). Received: min={low!r}, max={high!r}."
        )


def standardize_dtype(dtype, op_name, arg="dtype"):
    """Keras's name for ``dtype`` (``None`` stays ``None``); ``ValueError`` if unknown."""
    if dtype is None:
        return None
    try:
        return keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError, AttributeError):
        raise ValueError(
            f"{op_name}: Argument `{arg}` must be a Keras dtype name such as 'float32', "
            f"'float16', 'bfloat16', 'int32', 'int64' or 'bool'. Received: {arg}={dtype!r}."
        ) from None


def normalize_shape(shape, op_name):
    """``shape`` as a tuple of non-negative Python ints.

    Raises:
        TypeError: ``shape`` is not a sequence.
        ValueError: a dimension is unknown (``None``), not an integer, or negative.
    """
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(
            f"{op_name}: Argument `shape` must be a sequence of non-negative integers. "
            f"Received: shape={shape!r}."
        ) from None
    out = []
    for d in dims:
        if d is None or isinstance(d, bool) or not isinstance(d, (numbers.Integral, np.integer)):
            raise ValueError(
                f"{op_name}: Argument `shape` must be fully known non-negative integers. "
                f"Received: shape={shape!r}."
            )
        if d < 0:
            raise ValueError(
                f"{op_name}: Argument `shape` must not have a negative dimension. "
                f"Received: shape={shape!r}."
            )
        out.append(int(d))
    return tuple(out)

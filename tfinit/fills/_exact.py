"""Exact casts: numpy values become backend tensors only when the target dtype holds them.

The fills' dtype rule (see ``tfinit.fills``): integers must fit the target, floats going
to an integer or bool dtype must be integral (0/1 for bool), integers going to a float
dtype must be representable, and floats going to a narrower float dtype are rounded to
nearest but must stay finite. Anything else is a ``ValueError``.
"""

import warnings

import keras
import numpy as np

from tfinit import _backend


def numpy_dtype(dtype):
    """The numpy dtype of a Keras dtype name (``"bfloat16"`` through ``ml_dtypes``)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def check_exact_cast(values, dtype, op_name, arg=None):
    """Raise ``ValueError`` unless ``values`` (numpy) cast exactly to ``dtype``.

    Exact means the cast round-trips, except float -> float, which rounds to
    nearest (Caffe2's FloatToHalf) and only has to stay finite.

    Args:
        values: array-like of numbers.
        dtype: a Keras dtype name.
        op_name: the operator named in the error.
        arg: the argument the values came from, named in the error (if any).

    Raises:
        ValueError: a value that ``dtype`` cannot hold, the first one named.

    Example:

    >>> from tfinit.fills import check_exact_cast
    >>> check_exact_cast([1.0, 2.0], "int32", "ConstantFill")
    >>> check_exact_cast([1.5], "int32", "ConstantFill")
    Traceback (most recent call last):
    ...
    ValueError: ConstantFill: value 1.5 cannot be represented exactly as int32; ...
    """
    values = np.asarray(values)
    target = numpy_dtype(dtype)
    if values.size == 0 or values.dtype == target:
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cast = values.astype(target)
        if values.dtype.kind in "fV" and keras.backend.is_float_dtype(dtype):
            bad = np.isfinite(values) & ~np.isfinite(cast.astype(np.float64))
        else:
            bad = cast.astype(values.dtype) != values
    if np.any(bad):
        first = values.reshape(-1)[int(np.argmax(bad.reshape(-1)))].item()
        if arg is not None:
            raise ValueError(
                f"{op_name}: Argument `{arg}` must hold values exactly representable as "
                f"{dtype} (values are cast only when exact). Received: {arg} holding "
                f"{first!r}, which {dtype} cannot represent exactly."
            )
        raise ValueError(
            f"{op_name}: value {first!r} cannot be represented exactly as {dtype}; "
            f"pass a dtype that holds it (values are cast only when exact)."
        )


def to_tensor(array, dtype, op_name):
    """``array`` as a backend tensor of ``dtype``, cast only when exact."""
    _backend.check_holds(dtype, op_name)
    array = np.asarray(array)
    if array.dtype != numpy_dtype(dtype):
        check_exact_cast(array, dtype, op_name)
        array = array.astype(numpy_dtype(dtype))
    return keras.ops.convert_to_tensor(array, dtype=dtype)

"""Caffe2's deterministic fill operators: ConstantFill, RangeFill, DiagonalFill and the
GivenTensor*Fill family.

They draw nothing: what varies is where the values come from (a scalar, a count, a
diagonal rule, a given array). Values are cast to the call's dtype only when the cast is
exact (``tfinit.fills._exact``).
"""

import keras
import numpy as np

from tfinit import _args, _backend, _fans
from tfinit.fills import _exact
from tfinit.fills._base import Fill, register


@register
class ConstantFill(Fill):
    """Every element equals ``value`` (Caffe2 ConstantFill).

    Args:
        value: a real number (inf and NaN allowed, as in Caffe2).
        dtype: the fill's own dtype, used when the call gives none; ``value`` must be
            exactly representable in it.

    Returns:
        Called as ``fill(shape, dtype=None)``: a tensor of ``shape`` (dtype: the call's,
        else ``dtype``, else ``keras.config.floatx()``).

    Raises:
        TypeError: ``value`` is not a real number.
        ValueError: ``value`` does not fit ``dtype`` (or the call's dtype) exactly.

    Example:

    >>> import keras, tfinit
    >>> keras.ops.convert_to_numpy(tfinit.ConstantFill(7, dtype="int32")((2, 3))).tolist()
    [[7, 7, 7], [7, 7, 7]]
    >>> layer = keras.layers.Dense(3, bias_initializer=tfinit.ConstantFill(0.1))
    """

    formula = "x = value"

    def __init__(self, value=0.0, dtype=None):
        self.value = _args.check_real(value, self.op_name, "value", finite=False)
        self.dtype = _args.standardize_dtype(dtype, self.op_name)
        if self.dtype is not None:
            _exact.check_exact_cast(np.asarray(value), self.dtype, self.op_name, "value")

    def _fill(self, shape, dtype):
        scalar = _exact.to_tensor(np.asarray(self.value), dtype, self.op_name)
        return keras.ops.broadcast_to(scalar, shape)

    def get_config(self):
        return {"value": self.value, "dtype": self.dtype}


@register
class RangeFill(Fill):
    """0, 1, 2, ... in row-major order (Caffe2 RangeFill).

    Returns:
        Called as ``fill(shape, dtype=None)``: a tensor of ``shape``.

    Raises:
        ValueError: the dtype cannot hold ``numel - 1`` exactly.

    Example:

    >>> import keras, tfinit
    >>> keras.ops.convert_to_numpy(tfinit.RangeFill()((2, 3), dtype="int32")).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """

    formula = "x[i] = i, i = 0 .. numel-1 in row-major order"

    def __init__(self):
        pass

    def _fill(self, shape, dtype):
        count = _fans.numel(shape)
        # If the top two numbers are exact, every smaller one is.
        _exact.check_exact_cast(
            np.array([max(count - 2, 0), count - 1], dtype=np.int64), dtype, self.op_name
        )
        _backend.check_holds(dtype, self.op_name)
        return keras.ops.reshape(keras.ops.arange(count, dtype=dtype), shape)

    def get_config(self):
        return {}


@register
class DiagonalFill(Fill):
    """Caffe2's flat-stride diagonal: ``value`` every ``step`` elements, others 0.

    2-D: ``step = shape[1] + 1`` in Caffe2 layout, so a tall Caffe2 matrix wraps
    ([7, 5] sets (0,0)..(4,4) and (6,0)). N-D needs equal dims and sets [i, i, ..., i].
    Under ``layout="keras"`` a 2-D shape is Caffe2's ``[out, in]`` transposed.

    Args:
        value: the diagonal's value, a real number.
        dtype: the fill's own dtype, used when the call gives none.
        layout: ``"keras"`` (``[in, out]``) or ``"caffe2"`` (``[out, in]``).

    Returns:
        Called as ``fill(shape, dtype=None)``: a tensor of ``shape``.

    Raises:
        ValueError: a shape of fewer than 2 dimensions, an N-D shape of unequal
            dimensions, or a ``value`` the dtype cannot hold.

    Example:

    >>> import keras, tfinit
    >>> fill = tfinit.DiagonalFill(1, dtype="int32", layout="caffe2")
    >>> keras.ops.convert_to_numpy(fill((4, 2))).tolist()  # Caffe2's wrap: step 3
    [[1, 0], [0, 1], [0, 0], [1, 0]]
    """

    formula = "x[k*step] = value (flat), step = shape[1]+1 in Caffe2 layout; rest 0"

    def __init__(self, value=0.0, dtype=None, layout="keras"):
        self.value = _args.check_real(value, self.op_name, "value", finite=False)
        self.dtype = _args.standardize_dtype(dtype, self.op_name)
        self.layout = _fans.check_layout(layout, self.op_name)
        if self.dtype is not None:
            _exact.check_exact_cast(np.asarray(value), self.dtype, self.op_name, "value")

    def _check_shape(self, shape):
        if len(shape) < 2:
            raise ValueError(
                f"{self.op_name}: Argument `shape` must have at least 2 dimensions "
                f"(Caffe2: 'Input shape must be >= 2D'). Received: shape={shape}."
            )
        if len(shape) > 2 and len(set(shape)) != 1:
            raise ValueError(
                f"{self.op_name}: Argument `shape` must have all dimensions equal when N-D "
                f"(Caffe2: 'All dimensions of input must be of equal length'). "
                f"Received: shape={shape}."
            )

    def _fill(self, shape, dtype):
        keras_layout = self.layout == "keras"
        caffe2_shape = _fans.caffe2_shape(shape) if keras_layout else shape
        if len(shape) == 2:
            step = caffe2_shape[1] + 1
        else:
            step = 1 + sum(int(np.prod(shape[:k])) for k in range(1, len(shape)))
        flat = np.zeros(
            _fans.numel(shape),
            dtype=np.float64 if np.asarray(self.value).dtype.kind == "f" else np.int64,
        )
        flat[::step] = self.value
        values = flat.reshape(caffe2_shape)
        if keras_layout:  # an N-D diagonal of equal dims is the same in both layouts
            values = _fans.to_keras_layout(values)
        return _exact.to_tensor(values, dtype, self.op_name)

    def get_config(self):
        return {"value": self.value, "dtype": self.dtype, "layout": self.layout}


@register
class GivenTensorFill(Fill):
    """Exactly ``values``, in row-major order (Caffe2 GivenTensorFill, float32).

    ``shape`` is optional; when given it must have as many elements as ``values``
    and equal the shape the fill is called with (values are not re-laid out). The typed
    variants (``GivenTensorDoubleFill``, ``GivenTensorIntFill``, ``GivenTensorInt64Fill``,
    ``GivenTensorInt16Fill``, ``GivenTensorBoolFill``) hold their Caffe2 dtype instead.
    A numpy array already of that dtype is kept without a copy.

    Args:
        values: array-like of numbers, exactly representable in the fill's dtype.
        shape: optional shape the values are for.

    Returns:
        Called as ``fill(shape, dtype=None)``: a tensor holding ``values`` reshaped to
        ``shape`` (dtype: the call's when the cast is exact, else the fill's).

    Raises:
        TypeError: ``values`` does not hold numbers.
        ValueError: ``values`` cannot be an array or cast exactly, or the element count
            or ``shape`` differs from the call's shape.

    Example:

    >>> import keras, tfinit
    >>> fill = tfinit.GivenTensorFill([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    >>> keras.ops.convert_to_numpy(fill((2, 3))).tolist()
    [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    >>> keras.ops.convert_to_numpy(tfinit.GivenTensorInt64Fill([1, 2**40])((2,))).tolist()
    [1, 1099511627776]
    """

    formula = "x = values (row-major); numel(shape) == len(values)"
    value_dtype = "float32"

    def __init__(self, values, shape=None):
        op = self.op_name
        if keras.ops.is_tensor(values):
            values = keras.ops.convert_to_numpy(values)
        try:
            array = np.asarray(values)
        except (ValueError, TypeError) as err:
            raise ValueError(
                f"{op}: Argument `values` must be array-like ({err})."
            ) from None
        if array.dtype.kind not in "biuf":
            raise TypeError(
                f"{op}: Argument `values` must hold numbers. "
                f"Received: values of dtype {array.dtype}."
            )
        _exact.check_exact_cast(array, self.value_dtype, op, "values")
        # No copy when the array already has the right dtype: large parameters stay single.
        self.values = array.astype(_exact.numpy_dtype(self.value_dtype), copy=False)
        self.shape = None
        if shape is not None:
            self.shape = _args.normalize_shape(shape, op)
            if _fans.numel(self.shape) != self.values.size:
                raise ValueError(self._count_message(self.shape))

    def _count_message(self, shape):
        return (
            f"{self.op_name}: shape {tuple(shape)} has {_fans.numel(shape)} elements but "
            f"`values` has {self.values.size} (Caffe2: output->numel() == values_.numel(). "
            f"{_fans.numel(shape)} vs {self.values.size})."
        )

    @property
    def dtype(self):
        return self.value_dtype

    def _check_shape(self, shape):
        if self.shape is not None and tuple(shape) != self.shape:
            raise ValueError(
                f"{self.op_name}: built for shape {self.shape} but called with shape "
                f"{tuple(shape)}; values are row-major for the given shape (a Caffe2 "
                f"[out, in] weight must be transposed for a Keras [in, out] kernel)."
            )
        if _fans.numel(shape) != self.values.size:
            raise ValueError(self._count_message(shape))

    def _fill(self, shape, dtype):
        values = self.values.reshape(shape)
        if values.dtype == _exact.numpy_dtype(dtype):
            _backend.check_holds(dtype, self.op_name)
            return _backend.tensor_from_numpy(values, dtype)
        return _exact.to_tensor(values, dtype, self.op_name)

    def get_config(self):
        return {
            "values": self.values.tolist(),
            "shape": None if self.shape is None else list(self.shape),
        }


def _typed_given_tensor_fill(name, value_dtype, doc):
    cls = type(name, (GivenTensorFill,), {"value_dtype": value_dtype, "__doc__": doc})
    cls.__module__ = __name__
    cls.__qualname__ = name
    return register(cls)


def _typed_doc(caffe2_op, dtype, values, shown):
    return f"""Exactly ``values`` as {dtype} (Caffe2 {caffe2_op}).

    Same contract as :class:`GivenTensorFill`, with {dtype} as the fill's dtype.

    Args:
        values: array-like exactly representable as {dtype}.
        shape: optional shape the values are for.

    Returns:
        Called as ``fill(shape, dtype=None)``: a {dtype} tensor (or the call's dtype when
        the cast is exact) holding ``values`` in row-major order.

    Raises:
        TypeError: ``values`` does not hold numbers.
        ValueError: a value {dtype} cannot hold, or a count that differs from the shape's.

    Example:

    >>> import keras, tfinit
    >>> fill = tfinit.{caffe2_op}({values})
    >>> keras.ops.convert_to_numpy(fill((2,))).tolist()
    {shown}
    """


GivenTensorDoubleFill = _typed_given_tensor_fill(
    "GivenTensorDoubleFill", "float64",
    _typed_doc("GivenTensorDoubleFill", "float64", "[0.1, 0.25]", "[0.1, 0.25]"),
)
"""`GivenTensorDoubleFill(values, shape=None)`: exactly `values` as float64; the contract of
[`GivenTensorFill`][tfinit.fills.GivenTensorFill] with float64 as the fill's dtype."""
GivenTensorIntFill = _typed_given_tensor_fill(
    "GivenTensorIntFill", "int32", _typed_doc("GivenTensorIntFill", "int32", "[3, -4]", "[3, -4]")
)
"""`GivenTensorIntFill(values, shape=None)`: exactly `values` as int32; the contract of
[`GivenTensorFill`][tfinit.fills.GivenTensorFill] with int32 as the fill's dtype."""
GivenTensorInt64Fill = _typed_given_tensor_fill(
    "GivenTensorInt64Fill", "int64",
    _typed_doc("GivenTensorInt64Fill", "int64", "[1, 2**40]", "[1, 1099511627776]"),
)
"""`GivenTensorInt64Fill(values, shape=None)`: exactly `values` as int64; the contract of
[`GivenTensorFill`][tfinit.fills.GivenTensorFill] with int64 as the fill's dtype."""
GivenTensorInt16Fill = _typed_given_tensor_fill(
    "GivenTensorInt16Fill", "int16",
    _typed_doc("GivenTensorInt16Fill", "int16", "[7, -7]", "[7, -7]"),
)
"""`GivenTensorInt16Fill(values, shape=None)`: exactly `values` as int16; the contract of
[`GivenTensorFill`][tfinit.fills.GivenTensorFill] with int16 as the fill's dtype."""
GivenTensorBoolFill = _typed_given_tensor_fill(
    "GivenTensorBoolFill", "bool",
    _typed_doc("GivenTensorBoolFill", "bool", "[1, 0]", "[True, False]"),
)
"""`GivenTensorBoolFill(values, shape=None)`: exactly `values` as bool; the contract of
[`GivenTensorFill`][tfinit.fills.GivenTensorFill] with bool as the fill's dtype."""

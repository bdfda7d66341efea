"""The Caffe2 fill operators tfinit replays: each op's arguments turned into a tfinit fill.

One function per operator (or family: GivenTensor*Fill, UniformFill/UniformIntFill) reads its
arguments through ``OpCall`` and draws through ``OpCall.run_fill``; ``OPS`` maps each operator
type to its function and the arguments it reads besides FillerOp's (docs/caffe2-semantics.md).
A new replayed op is a function here and an entry in ``OPS``.
"""

import math

import numpy as np

from tfinit.caffe2._types import NUMPY_DTYPES, DataType
from tfinit.caffe2._fill_args import FILLER_ARGS, describe, dtype_error, exact

#: ConstantFill's switch, in Caffe2's order
_CONSTANT_DTYPES = (
    DataType.FLOAT, DataType.DOUBLE, DataType.BOOL, DataType.INT8, DataType.INT16,
    DataType.INT32, DataType.INT64, DataType.UINT8, DataType.UINT16, DataType.STRING,
)
#: DiagonalFill's switch: ConstantFill's without STRING
_DIAGONAL_DTYPES = _CONSTANT_DTYPES[:-1]


# ---------------------------------------------------------------- constant-like fills


def _value_dtype(op, allowed):
    """ConstantFill/DiagonalFill: dtype from the argument, else inferred from `value`."""
    if "dtype" in op.args:
        dtype = op.dtype_arg(DataType.FLOAT)
    elif "value" in op.args and op.args["value"] is not None:
        value = op.args["value"]
        if isinstance(value, float):
            dtype = DataType.FLOAT
        elif isinstance(value, int):
            dtype = DataType.INT64  # ints and bools are stored in the int64 field
        else:
            raise op.error("value", "must be a float or an int when no `dtype` is given "
                           "(Caffe2 infers the dtype only from those; unexpected type). "
                           f"Received: value={describe(value)}.", TypeError)
    else:
        dtype = DataType.FLOAT
    if dtype not in allowed:
        raise dtype_error(op, dtype)
    return dtype


def _typed_value(op, dtype):
    """The `value` argument read from the field ``dtype`` needs (default 0)."""
    if dtype in (DataType.FLOAT, DataType.DOUBLE):
        return op.float_arg("value", 0.0)
    if dtype == DataType.STRING:
        value = op.args.get("value")
        if value is None:
            return b""
        if not isinstance(value, bytes):
            raise op.error("value", "must be a string for dtype STRING (Caffe2: 'expected "
                           f"field s'). Received: value={describe(value)}.", TypeError)
        return value
    value = op.int_arg("value", 0)
    if dtype == DataType.BOOL:
        return int(bool(value))  # Caffe2 casts the int to bool without a range check
    exact(op, "value", value, NUMPY_DTYPES[dtype])
    return value


def _constant_fill(op):
    dtype = _value_dtype(op, _CONSTANT_DTYPES)
    value = _typed_value(op, dtype)
    shape = op.shape(dtype=object if dtype == DataType.STRING else NUMPY_DTYPES[dtype])
    if dtype == DataType.STRING:
        out = np.empty(shape, dtype=object)
        out.fill(value)
        return out
    name = NUMPY_DTYPES[dtype]
    return op.run_fill("ConstantFill", {"value": value, "dtype": name}, shape, name)


def _diagonal_fill(op):
    dtype = _value_dtype(op, _DIAGONAL_DTYPES)
    value = _typed_value(op, dtype)
    name = NUMPY_DTYPES[dtype]
    kwargs = {"value": value, "dtype": name, "layout": "caffe2"}
    return op.run_fill("DiagonalFill", kwargs, op.shape(dtype=name), name)


def _range_fill(op):
    return op.run_fill("RangeFill", {}, op.shape(), "float32")


def _float16_constant_fill(op):
    value = op.float_arg("value", 0.0)
    shape = op.shape(max_inputs=0, dtype="float16")
    return op.run_fill("ConstantFill", {"value": value}, shape, "float16")


# ---------------------------------------------------------------- random fills


def _gaussian_fill(op):
    kwargs = {"mean": op.float_arg("mean", 0.0), "std": op.float_arg("std", 1.0)}
    return op.run_fill("GaussianFill", kwargs, op.shape(), "float32", random=True)


def _bounds_from_inputs(op, kind):
    """UniformFill's 3-input form: (shape source, min blob, max blob)."""
    for index, arg in ((1, "min"), (2, "max")):
        if op.args.get(arg) is not None:
            raise op.error(arg, f"cannot be set together with a {arg} input blob "
                           f"(Caffe2: 'Cannot set both {arg} arg and {arg} input blob').")
        if op.inputs[index].size != 1 or op.inputs[index].dtype.kind not in kind:
            raise op.error(None, f"input {index} ({arg}) must be a scalar of the output "
                           f"type. Received: {op.inputs[index].dtype} of shape "
                           f"{op.inputs[index].shape}.")
    return op.inputs[1].item(), op.inputs[2].item()


def _uniform(op, name, kind, dtype, default_min, default_max, arg_reader):
    if len(op.inputs) == 2:
        raise op.error(None, "takes 0, 1 or 3 inputs (shape source, min, max). Received: 2 "
                       "inputs.")
    if len(op.inputs) == 3:
        low, high = _bounds_from_inputs(op, kind)
        shape = op.shape(max_inputs=3, dtype=dtype)
        if low > high:  # Caffe2 returns an empty tensor: first dimension 0
            return np.zeros((0,) + tuple(shape[1:]), dtype=dtype)
        if low == high:
            return np.full(shape, low, dtype=dtype)
        if name == "UniformFill":
            low, high = float(np.float32(low)), float(np.float32(high))
    else:
        low, high = arg_reader("min", default_min), arg_reader("max", default_max)
        shape = op.shape(dtype=dtype)
    bounds = {"min": low, "max": high}
    return op.run_fill(name, bounds, shape, dtype, random=True)


def _uniform_fill(op):
    return _uniform(op, "UniformFill", "f", "float32", 0.0, 1.0, op.float_arg)


def _uniform_int_fill(op):
    return _uniform(op, "UniformIntFill", "iu", "int32", 0, 1, op.int_arg)


def _float16_uniform_fill(op):
    low, high = op.float_arg("min", 0.0), op.float_arg("max", 1.0)
    shape = op.shape(max_inputs=0)  # drawn in float32, then cast
    values = op.run_fill("UniformFill", {"min": low, "max": high}, shape, "float32", random=True)
    return values.astype(np.float16)


def _xavier_fill(op):
    return op.run_fill("XavierFill", {"layout": "caffe2"}, op.shape(), "float32", random=True)


def _msra_fill(op):
    return op.run_fill("MSRAFill", {"layout": "caffe2"}, op.shape(), "float32", random=True)


def _unique_uniform_fill(op):
    dtype = op.dtype_arg(DataType.INT32)
    if dtype not in (DataType.INT32, DataType.INT64):
        raise dtype_error(op, dtype)
    for arg in ("min", "max"):
        if op.args.get(arg) is None:
            raise op.error(arg, "is required (UniqueUniformFill needs both min and max).")
    low, high = op.int_arg("min", 0), op.int_arg("max", 0)
    name = NUMPY_DTYPES[dtype]
    exact(op, "min", low, name)
    exact(op, "max", high, name)
    avoid = np.zeros(0, dtype=np.int64)
    if len(op.inputs) == 2:
        avoid = op.inputs[1].reshape(-1)
        if avoid.size and avoid.dtype.kind not in "iu":
            raise op.error(None, "input 1 (avoid) must hold integers. Received: avoid of "
                           f"dtype {avoid.dtype}.")
    shape = op.shape(max_inputs=2, dtype=name)
    count = math.prod(shape)
    if low < high and count > high - low + 1 - avoid.size:  # Caffe2 counts every avoided value
        raise op.error(None, f"cannot draw {count} distinct values from [{low}, {high}] "
                       f"avoiding {avoid.size} values (Caffe2: 'Cannot satisfy the unique "
                       f"requirement'. {count} vs {high - low + 1 - avoid.size}).")
    kwargs = {"min": low, "max": high, "avoid": avoid.astype(np.int64)}
    return op.run_fill("UniqueUniformFill", kwargs, shape, name, random=True)


# ---------------------------------------------------------------- GivenTensor*Fill

# op -> (tfinit class or None, Caffe2 data type it reads when no dtype applies)
_GIVEN = {
    "GivenTensorFill": ("GivenTensorFill", DataType.FLOAT),
    "GivenTensorDoubleFill": ("GivenTensorDoubleFill", DataType.DOUBLE),
    "GivenTensorIntFill": ("GivenTensorIntFill", DataType.INT32),
    "GivenTensorInt64Fill": ("GivenTensorInt64Fill", DataType.INT64),
    "GivenTensorInt16Fill": ("GivenTensorInt16Fill", DataType.INT16),
    "GivenTensorBoolFill": ("GivenTensorBoolFill", DataType.BOOL),
    "GivenTensorStringFill": (None, DataType.STRING),
    "GivenTensorByteStringToUInt8Fill": (None, DataType.UINT8),
}
#: GivenTensorFill's ``dtype`` argument -> the op it then behaves as
_GIVEN_BY_DTYPE = {
    DataType.FLOAT: "GivenTensorFill", DataType.DOUBLE: "GivenTensorDoubleFill",
    DataType.BOOL: "GivenTensorBoolFill", DataType.INT16: "GivenTensorInt16Fill",
    DataType.INT32: "GivenTensorIntFill", DataType.INT64: "GivenTensorInt64Fill",
    DataType.STRING: "GivenTensorStringFill",
}
#: the Argument field Caffe2 reads `values` from, per data type (others: "ints")
_FIELD_OF = {DataType.FLOAT: "floats", DataType.DOUBLE: "floats", DataType.STRING: "strings",
             DataType.UINT8: "strings"}


def _given_values(op, dtype):
    """The `values` list from the one field Caffe2 reads for ``dtype`` (others look empty)."""
    if "values" not in op.args:
        raise op.error("values", "is required (Caffe2: 'Argument 'values' is required').")
    raw = op.args["values"]
    field = _FIELD_OF.get(dtype, "ints")
    if raw is None:
        return [] if field == "strings" else np.zeros(0, NUMPY_DTYPES.get(dtype, "int64"))
    if field == "strings":
        return list(raw) if isinstance(raw, list) and all(isinstance(v, bytes) for v in raw) else []
    if isinstance(raw, np.ndarray) and (raw.dtype.kind == "f") == (field == "floats"):
        return raw
    return np.zeros(0, np.float32 if field == "floats" else np.int64)


def _given_tensor_fill(op):
    cls_name, dtype = _GIVEN[op.type]
    if op.type == "GivenTensorFill" and "dtype" in op.args:  # only it honours dtype
        dtype = op.dtype_arg(DataType.FLOAT)
        if dtype not in _GIVEN_BY_DTYPE:
            raise dtype_error(op, dtype)
        cls_name = _GIVEN_BY_DTYPE[dtype]
    values = _given_values(op, dtype)
    if dtype == DataType.UINT8:  # one byte string -> its bytes as uint8
        values = np.frombuffer(values[0], dtype=np.uint8) if values else np.zeros(0, np.uint8)
    shape = op.shape(dtype=None)  # bounded by the values the file holds: checked below
    count = len(values)
    if math.prod(shape) != count:
        field = _FIELD_OF.get(dtype, "ints")
        raw = op.args.get("values")
        hint = ""
        if count == 0 and raw is not None:
            hint = (f"; Caffe2 reads only the `{field}` field for this type, and the values "
                    f"were given as {describe(raw)}")
        raise op.error("values", f"shape {list(shape)} has {math.prod(shape)} elements but "
                       f"{count} values were given{hint} (Caffe2: 'output->numel() == "
                       f"values_.numel(). {math.prod(shape)} vs {count}').")
    if dtype == DataType.STRING:
        out = np.empty(count, dtype=object)
        out[:] = values
        return out.reshape(shape)
    if dtype == DataType.UINT8:
        return values.reshape(shape).copy()
    if dtype == DataType.BOOL:
        values = np.asarray(values) != 0  # Caffe2 casts ints to bool without a range check
    else:
        exact(op, "values", values, NUMPY_DTYPES[dtype])
    name = NUMPY_DTYPES[dtype]
    values = np.asarray(values).astype(name, copy=False)  # the net's own array: not kept
    if name == "float32":  # the fill returns exactly these values: no tensor round trip
        return values.reshape(shape)
    return op.run_fill(cls_name, {"values": values, "shape": shape}, shape, name)


# ---------------------------------------------------------------- fp16 conversion

_HALF_MAX = 65504.0


def _one_input(op, dtype, out_dtype):
    if len(op.inputs) != 1:
        raise op.error(None, f"takes exactly 1 input. Received: {len(op.inputs)} inputs.")
    x = op.inputs[0]
    if x.dtype != np.dtype(dtype):
        raise op.error(None, f"input must be {dtype} (Caffe2: 'Tensor type mismatch'). "
                       f"Received: an input of dtype {x.dtype}.", TypeError)
    op.claim(x.shape, out_dtype)
    return x


def _float_to_half(op):
    """Round to nearest even (numpy's cast); ``clip=1`` saturates to +-65504.

    With clip, NaN becomes -65504: measured on Caffe2 (PyTorch 1.8.1 CPU) for +NaN and
    -NaN alike, as ``max(-65504, min(x, 65504))`` gives when comparisons with NaN fail.
    """
    x = _one_input(op, "float32", "float16")
    if op.int_arg("clip", 0):
        x = np.where(np.isnan(x), np.float32(-_HALF_MAX), np.clip(x, -_HALF_MAX, _HALF_MAX))
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


def _half_to_float(op):
    return _one_input(op, "float16", "float32").astype(np.float32)


# ---------------------------------------------------------------- the op table

OPS = {
    "ConstantFill": (_constant_fill, ("value",)),
    "DiagonalFill": (_diagonal_fill, ("value",)),
    "RangeFill": (_range_fill, ()),
    "GaussianFill": (_gaussian_fill, ("mean", "std")),
    "UniformFill": (_uniform_fill, ("min", "max")),
    "UniformIntFill": (_uniform_int_fill, ("min", "max")),
    "UniqueUniformFill": (_unique_uniform_fill, ("min", "max")),
    "XavierFill": (_xavier_fill, ()),
    "MSRAFill": (_msra_fill, ()),
    "Float16ConstantFill": (_float16_constant_fill, ("value",)),
    "Float16UniformFill": (_float16_uniform_fill, ("min", "max")),
    "FloatToHalf": (_float_to_half, ("clip",)),
    "HalfToFloat": (_half_to_float, ()),
    **{name: (_given_tensor_fill, ("values",)) for name in _GIVEN},
}
_NOT_FILLERS = ("FloatToHalf", "HalfToFloat")
RANDOM_OPS = ("GaussianFill", "UniformFill", "UniformIntFill", "UniqueUniformFill",
              "XavierFill", "MSRAFill", "Float16UniformFill")


def supported_ops():
    """The operator types ``fill`` and ``load_init_net`` replay, sorted.

    Returns:
        A sorted list of Caffe2 operator type names.

    Example:

    >>> from tfinit.caffe2 import replayed_ops
    >>> replayed_ops()[:4]
    ['ConstantFill', 'DiagonalFill', 'Float16ConstantFill', 'Float16UniformFill']
    """
    return sorted(OPS)


def accepted_args(op_type):
    own = OPS[op_type][1]
    return own if op_type in _NOT_FILLERS else own + FILLER_ARGS

"""Caffe2 fill operators replayed with tfinit's fills: ``fill`` and ``load_init_net``.

Arguments follow Caffe2's conventions (docs/caffe2-semantics.md): every
argument goes through Caffe2's ``Argument`` message, so Python floats pass through
float32 and an op reads only the field of its type (``min=0`` is an int, not the
float UniformFill wants). Shapes follow ``FillerOp``: a ``shape`` list, or the shape
of input 0 plus ``extra_shape``, or input 0's values with ``input_as_shape=1``.
Values come from the ``tfinit`` fill classes (through ``tfinit.registry``) in
Caffe2 layout; this module only translates arguments and checks them as Caffe2 does.
"""

import math
import os

import keras
import numpy as np

from tfinit import registry, sources
from tfinit._caffe2_types import DATA_TYPES, NUMPY_DTYPES, DataType, data_type  # noqa: F401 (re-exported)
from tfinit._exact import check_exact_cast
from tfinit.caffe2._memory import Limit, blob_bytes, size_text
from tfinit.caffe2._netdef import NetDef, make_arg, read_netdef
from tfinit.caffe2._progress import Progress, check_verbose


#: ConstantFill's switch, in Caffe2's order
_CONSTANT_DTYPES = (
    DataType.FLOAT, DataType.DOUBLE, DataType.BOOL, DataType.INT8, DataType.INT16,
    DataType.INT32, DataType.INT64, DataType.UINT8, DataType.UINT16, DataType.STRING,
)
#: DiagonalFill's switch: ConstantFill's without STRING
_DIAGONAL_DTYPES = _CONSTANT_DTYPES[:-1]
_FILLER_ARGS = ("shape", "extra_shape", "input_as_shape", "dtype")


class _Op:
    """One operator call: its arguments (typed as decoded from a NetDef) and inputs."""

    def __init__(self, op_type, inputs, args, seed, caffe2_rng, limit):
        self.type = op_type
        self.inputs = inputs
        self.args = args
        self.seed = seed
        self.caffe2_rng = caffe2_rng
        self.limit = limit  # a _memory.Limit: the bytes the fills may still allocate

    # -- errors
    def error(self, arg, text, kind=ValueError):
        """``kind("<op>: Argument `arg` <text>")``; without ``arg``, ``"<op>: <text>"``."""
        where = f"Argument `{arg}` " if arg else ""
        return kind(f"{self.type}: {where}{text}")

    # -- typed argument access, one protobuf field each, as Caffe2's GetSingleArgument
    def float_arg(self, name, default):
        return self._single_arg(name, default, float, "a float", "f")

    def int_arg(self, name, default):
        return self._single_arg(name, default, int, "an int", "i")

    def _single_arg(self, name, default, kind, described, field):
        if name not in self.args or self.args[name] is None:
            return default
        value = self.args[name]
        if not isinstance(value, kind):
            raise self.error(
                name,
                f"must be {described} (Caffe2: 'Argument {name} does not have the right "
                f"field: expected field {field}'). Received: {name}={_describe(value)}.",
                TypeError,
            )
        return value

    def ints_arg(self, name):
        value = self.args.get(name)
        if value is None:
            return []
        if isinstance(value, (int, float)):
            raise self.error(
                name, f"must be a list (Caffe2: 'Fill '{name}' argument was a scalar, list "
                f"expected'). Received: {name}={value!r}."
            )
        if not (isinstance(value, np.ndarray) and value.dtype == np.int64):
            raise self.error(name, f"must be a list of ints. Received: {name}="
                             f"{_describe(value)}.", TypeError)
        if np.any(value < 0):
            raise self.error(name, f"must have no negative dimension. Received: {name}="
                             f"{value.tolist()}.")
        return [int(v) for v in value]

    def dtype_arg(self, default):
        if "dtype" not in self.args:
            return default
        return data_type(self.args["dtype"], self.type)

    # -- FillerOp's shape rules
    def claim(self, shape, dtype):
        """Refuse an output of ``shape`` and ``dtype`` over the memory limit, before it is
        allocated (a model file is untrusted input); else count it as held."""
        dtype = np.dtype(dtype)
        self.limit.claim(blob_bytes(shape, dtype.itemsize),
                         f"{self.type}: its {dtype} output of shape {list(shape)}",
                         f"shape={list(shape)}")

    def shape(self, max_inputs=1, dtype="float32"):
        """The output shape by FillerOp's rules, claimed for ``dtype`` (None: the values
        come from the file, no claim)."""
        shape = self._shape(max_inputs)
        if dtype is not None:
            self.claim(shape, dtype)
        return shape

    def _shape(self, max_inputs):
        shape = self.ints_arg("shape")
        extra = self.ints_arg("extra_shape")
        as_shape = bool(self.int_arg("input_as_shape", 0))
        if not self.inputs:
            if extra:
                raise self.error("extra_shape", "cannot be set when there is no input "
                                 "(Caffe2: 'Cannot set extra_shape when there is no input').")
            if as_shape:
                raise self.error("input_as_shape", "needs an input (Caffe2: 'An input must "
                                 "be given if input_as_shape is true').")
            return tuple(shape)
        if len(self.inputs) > max_inputs:
            raise self.error(None, f"takes at most {max_inputs} input(s). Received: "
                             f"{len(self.inputs)} inputs.")
        if shape:
            raise self.error("shape", "cannot be set when an input gives the shape (Caffe2: "
                             "'Cannot set the shape argument and pass in an input at the "
                             "same time').")
        source = self.inputs[0]
        if not as_shape:
            return tuple(source.shape) + tuple(extra)
        if source.ndim != 1 or source.dtype != np.int64 or source.size == 0:
            raise self.error("input_as_shape", "needs input 0 to be a non-empty 1-D int64 "
                             "tensor (Caffe2: 'Tensor type mismatch' for other types). "
                             f"Received: input 0 of dtype {source.dtype} and shape "
                             f"{source.shape}.", TypeError)
        if np.any(source < 0):
            raise self.error("input_as_shape", "needs input 0 without negative dimensions. "
                             f"Received: input 0 = {source.tolist()}.")
        return tuple(int(v) for v in source) + tuple(extra)

    # -- tfinit fills
    def run_fill(self, name, kwargs, shape, dtype, random=False):
        """Build tfinit fill ``name`` through the registry and draw ``shape``."""
        kwargs = dict(kwargs)
        if random and self.seed is not None:
            kwargs["seed"] = self.seed
            if self.caffe2_rng:
                kwargs["rng"] = "caffe2"
        try:
            values = registry.build(name, kwargs)(shape, dtype=dtype)
        except (ValueError, TypeError) as err:
            text = str(err)
            if not text.startswith(self.type):
                text = f"{self.type}: {text}"
            raise type(err)(text) from None
        return keras.ops.convert_to_numpy(values)


def _describe(value):
    if isinstance(value, np.ndarray):
        kind = "floats" if value.dtype.kind == "f" else "ints"
        return f"a list of {kind} {value.tolist()[:6]}{'...' if value.size > 6 else ''}"
    return f"{type(value).__name__} {value!r}"


def _dtype_error(op, dtype):
    if dtype == DataType.UNDEFINED:
        return op.error("dtype", f"must not be UNDEFINED (Caffe2: '{op.type} op cannot have "
                        "undefined 'dtype' argument'). Received: dtype=0 (UNDEFINED).")
    name = dtype.name if isinstance(dtype, DataType) else "unknown"
    return op.error("dtype", f"must be a data type {op.type} supports (Caffe2: 'Unexpected "
                    f"'dtype' argument value: {int(dtype)}'). Received: dtype={int(dtype)} "
                    f"({name}).")


def _exact(op, arg, values, dtype):
    """Caffe2's lossless integer conversion of argument values, naming the argument."""
    check_exact_cast(np.asarray(values), dtype, op.type, arg)


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
                           f"Received: value={_describe(value)}.", TypeError)
    else:
        dtype = DataType.FLOAT
    if dtype not in allowed:
        raise _dtype_error(op, dtype)
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
                           f"field s'). Received: value={_describe(value)}.", TypeError)
        return value
    value = op.int_arg("value", 0)
    if dtype == DataType.BOOL:
        return int(bool(value))  # Caffe2 casts the int to bool without a range check
    _exact(op, "value", value, NUMPY_DTYPES[dtype])
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
        raise _dtype_error(op, dtype)
    for arg in ("min", "max"):
        if op.args.get(arg) is None:
            raise op.error(arg, "is required (UniqueUniformFill needs both min and max).")
    low, high = op.int_arg("min", 0), op.int_arg("max", 0)
    name = NUMPY_DTYPES[dtype]
    _exact(op, "min", low, name)
    _exact(op, "max", high, name)
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
            raise _dtype_error(op, dtype)
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
                    f"were given as {_describe(raw)}")
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
        _exact(op, "values", values, NUMPY_DTYPES[dtype])
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

_OPS = {
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
    return sorted(_OPS)


def _accepted(op_type):
    own = _OPS[op_type][1]
    return own if op_type in _NOT_FILLERS else own + _FILLER_ARGS


def _run(op_type, inputs, args, seed, caffe2_rng, limit):
    if op_type not in _OPS:
        raise ValueError(f"Unknown or unsupported Caffe2 operator {op_type!r}; tfinit "
                         f"replays: {', '.join(supported_ops())}.")
    arrays = []
    for value in inputs:
        if keras.ops.is_tensor(value):
            value = keras.ops.convert_to_numpy(value)
        arrays.append(np.asarray(value))
    return _OPS[op_type][0](_Op(op_type, arrays, args, seed, caffe2_rng, limit))


def fill(op_type, *inputs, seed=None, max_bytes=None, **args):
    """Run one Caffe2 fill operator with Caffe2's argument conventions; a numpy array.

    ``inputs`` are arrays for the ops that take them (shape sources, FloatToHalf /
    HalfToFloat, UniqueUniformFill's ``avoid`` as input 1, UniformFill's min/max
    blobs). ``seed`` is the op's ``DeviceOption.random_seed``: random ops then use
    Caffe2's own CPU stream (``rng="caffe2"``); ``None`` draws fresh values.
    ``dtype`` is a ``TensorProto.DataType`` int or name. Unknown argument names raise
    ``TypeError`` (Caffe2 would silently ignore them). An output larger than the memory
    available is refused before it is allocated.

    Args:
        op_type: the Caffe2 operator type (``replayed_ops()`` lists them).
        *inputs: the operator's input arrays, for the operators that take them.
        seed: Caffe2's ``random_seed``, an int in ``[0, 2**32)``, or ``None``.
        max_bytes: the most bytes the output may take; ``None``: the memory available
            (``MemAvailable`` on Linux, within a cgroup's limit). Pass a larger int to
            allow more.
        **args: the operator's Caffe2 arguments (``shape``, ``values``, ``min``, ...).

    Returns:
        A numpy array: what the Caffe2 operator writes to its output blob.

    Raises:
        TypeError: an unknown argument name, a value in the wrong Caffe2 field (an int
            where Caffe2 reads a float), or a bad ``seed``.
        ValueError: an unknown operator, arguments Caffe2 refuses (its message quoted), or
            an output over ``max_bytes`` (the message gives the bytes it needs).

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2 import fill
    >>> fill("GivenTensorIntFill", shape=[2, 2], values=[1, 2, 3, 4]).tolist()
    [[1, 2], [3, 4]]
    >>> fill("UniformFill", shape=[3], min=-1.0, max=1.0, seed=3).astype(float).round(4).tolist()
    [-0.9915, -0.7889, -0.4283]
    >>> fill("FloatToHalf", np.array([65519.0, 65520.0], np.float32)).tolist()
    [65504.0, inf]
    >>> fill("XavierFill", shape=[1000000, 1000000])  # refused before allocating
    Traceback (most recent call last):
    ...
    ValueError: XavierFill: its float32 output of shape [1000000, 1000000] needs 4000000000000...
    """
    if not isinstance(op_type, str):
        raise TypeError("fill: Argument `op_type` must be a Caffe2 operator name. "
                        f"Received: op_type={op_type!r}.")
    limit = Limit(max_bytes, op_type)
    if op_type not in _OPS:
        _run(op_type, (), {}, None, False, limit)
    accepted = _accepted(op_type)
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise TypeError(f"{op_type}: unexpected argument(s) {', '.join(unknown)}; "
                        f"{op_type} takes {', '.join(accepted) or 'no arguments'}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or not 0 <= seed < 2**32):
        raise TypeError(f"{op_type}: Argument `seed` (Caffe2's random_seed) must be an int "
                        f"in [0, 2**32). Received: seed={seed!r}.")
    typed = {}
    for name, value in args.items():
        if name == "dtype":
            typed[name] = data_type(value, op_type)
            continue
        try:
            typed[name] = make_arg(name, value)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{op_type}: {err}") from None
    return _run(op_type, inputs, typed, None if seed is None else int(seed), seed is not None,
                limit)


# ---------------------------------------------------------------- init nets


def _caffe2_seed(net, op, seeds):
    output = op.outputs[0] if op.outputs else None
    if seeds and output in seeds:
        return seeds[output]
    for option in (op.device_option, net.device_option):
        # Caffe2 merges the net's device_option into each op's, the op's fields winning.
        if option is not None and option.random_seed is not None:
            return option.random_seed
    return None


def read_with_progress(source, verbose):
    """``read_netdef(source)``, with a ``keras.utils.Progbar`` over the bytes of a file or
    bytes at ``verbose=1`` (a NetDef is not read: no bar)."""
    if verbose == 0 or isinstance(source, NetDef):
        return read_netdef(source)
    shown = {}

    def report(done, total):
        if "bar" not in shown:  # the size is known once the file is read
            unit, scale = next((u, s) for u, s in (("MB", 10**6), ("kB", 10**3), ("B", 1))
                               if total >= 10 * s or s == 1)
            where = (os.fspath(source) if isinstance(source, (str, os.PathLike))
                     else "the given bytes")
            shown["bar"] = Progress(verbose, f"Reading {where}: {size_text(total)}",
                                    -(-total // scale), unit)
            shown["scale"] = scale
        scale = shown["scale"]  # the bar finishes when the read does, not before
        shown["bar"].update(done // scale if done < total else -(-total // scale))

    return read_netdef(source, progress=report)


def load_init_net(source, seed=None, seeds=None, *, max_bytes=None, verbose=0):
    """``{blob: numpy array}`` from replaying every op of a Caffe2 init net in order.

    ``source``: a path, bytes or NetDef. An op whose ``device_option.random_seed`` is
    set (its own or the net's, which Caffe2 applies to every op), or whose output
    blob is a key of ``seeds``, draws from Caffe2's own stream with that seed.
    Other random ops draw fresh values, or, with an int ``seed``, reproducible
    Keras-stream values (a distinct seed per op, derived from ``seed`` and the op's
    position). Arguments an op does not read are ignored, as in Caffe2.

    A model file is untrusted input: an op whose output would take the init net's blobs
    past ``max_bytes`` (by default the memory available when the replay starts) is
    refused before it is allocated. Values a file holds (GivenTensor*Fill) are already
    read, and not counted.

    Args:
        source: a ``.pb`` path, its bytes, or a ``tfinit.caffe2.NetDef``.
        seed: ``None`` (fresh values) or an int for reproducible Keras-stream values of the
            ops Caffe2 would not have seeded.
        seeds: ``{blob: int}``: Caffe2 seeds for the ops writing these blobs.
        max_bytes: the most bytes the replayed blobs may take together; ``None``: the
            memory available (``MemAvailable`` on Linux, within a cgroup's limit). Pass
            a larger int to allow more.
        verbose: ``0`` (silent), ``1`` (a ``keras.utils.Progbar`` while the file is read
            and while its ops are replayed) or ``2`` (one line each when done), as in
            Keras's ``fit``.

    Returns:
        A dict of blob name -> numpy array, in the order the ops write them.

    Raises:
        TypeError: a bad ``seed``/``seeds`` value, or an op argument in the wrong field.
        KeyError: ``seeds`` names a blob no op writes.
        ValueError: an op tfinit does not replay, an input no earlier op writes,
            arguments Caffe2 refuses, or an output over the memory limit (with the bytes
            it needs); the message names the op and its position.

    Example:

    >>> from tfinit.caffe2 import NetDef, Operator, load_init_net
    >>> net = NetDef(ops=[
    ...     Operator("ConstantFill", (), ("fc_b",), {"shape": [2], "value": 0.5}),
    ...     Operator("XavierFill", (), ("fc_w",), {"shape": [2, 3]}),
    ... ])
    >>> blobs = load_init_net(net, seeds={"fc_w": 1})
    >>> blobs["fc_b"].tolist(), blobs["fc_w"].shape
    ([0.5, 0.5], (2, 3))
    >>> blobs["fc_w"].astype(float).round(4).tolist()  # Caffe2's stream for random_seed=1
    [[0.5153, -0.4414, -0.1939], [0.4694, -0.9414, 0.5997]]
    """
    verbose = check_verbose(verbose, "load_init_net")
    limit = Limit(max_bytes, "load_init_net")
    net = read_with_progress(source, verbose)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError("load_init_net: Argument `seed` must be an int or None. "
                        f"Received: seed={seed!r}.")
    seeds = dict(seeds or {})
    produced = {out for op in net.ops for out in op.outputs}
    for blob, value in seeds.items():
        if blob not in produced:
            raise KeyError(f"load_init_net: Argument `seeds` names blob {blob!r}, which no "
                           f"op of the init net writes; blobs: {', '.join(sorted(produced)[:10])}.")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"load_init_net: Argument `seeds` must map blobs to ints. "
                            f"Received: seeds[{blob!r}]={value!r}.")
    blobs = {}
    bar = Progress(verbose, f"Replaying the {len(net.ops)} ops of init net "
                   f"{net.name or '(unnamed)'!r}", len(net.ops), "op")
    for index, op in enumerate(net.ops):
        where = f"init net op #{index} ({op.type or '<no type>'} -> {', '.join(op.outputs)})"
        if op.type not in _OPS:
            raise ValueError(f"{where}: {op.type!r} is not an operator tfinit replays; "
                             f"supported: {', '.join(supported_ops())}.")
        if len(op.outputs) != 1:
            raise ValueError(f"{where}: a fill op writes exactly one blob, this one "
                             f"{len(op.outputs)}.")
        missing = [name for name in op.inputs if name not in blobs]
        if missing:
            raise ValueError(f"{where}: input(s) {', '.join(missing)} are not written by an "
                             "earlier op of the init net.")
        op_seed, caffe2_rng = _caffe2_seed(net, op, seeds), True
        if op_seed is None and seed is not None:
            op_seed = int(np.random.SeedSequence([int(seed), index]).generate_state(1)[0])
            caffe2_rng = False
        try:
            blobs[op.outputs[0]] = _run(
                op.type, [blobs[name] for name in op.inputs], op.args, op_seed, caffe2_rng,
                limit,
            )
        except (ValueError, TypeError) as err:
            raise type(err)(f"{where}: {err}") from None
        bar.update(index + 1)
    return blobs


# ExternalInitializer reads init_nets through tfinit.sources, which sits below this package.
sources.register_init_net_reader(load_init_net)

"""One Caffe2 fill operator call: its arguments read as Caffe2 reads them, its output shape.

Every argument goes through Caffe2's ``Argument`` message, so Python floats pass through
float32 and an op reads only the field of its type (``min=0`` is an int, not the float
UniformFill wants): ``OpCall``'s typed accessors refuse the others, as Caffe2's
``GetSingleArgument`` does. Shapes follow ``FillerOp``: a ``shape`` list, or the shape of
input 0 plus ``extra_shape``, or input 0's values with ``input_as_shape=1``. Each output is
claimed against the memory limit before it is allocated, and drawn from the ``tfinit`` fill
classes through ``tfinit.fills.registry`` (docs/caffe2-semantics.md).
"""

import keras
import numpy as np

from tfinit.fills import registry
from tfinit.caffe2._types import DataType, data_type
from tfinit.fills import check_exact_cast
from tfinit.caffe2._memory import blob_bytes

#: the arguments every FillerOp reads (the shape rules and the output type)
FILLER_ARGS = ("shape", "extra_shape", "input_as_shape", "dtype")


class OpCall:
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
                f"field: expected field {field}'). Received: {name}={describe(value)}.",
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
                             f"{describe(value)}.", TypeError)
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


def describe(value):
    """``value`` as an error message shows it: its type, or the first items of a list."""
    if isinstance(value, np.ndarray):
        kind = "floats" if value.dtype.kind == "f" else "ints"
        return f"a list of {kind} {value.tolist()[:6]}{'...' if value.size > 6 else ''}"
    return f"{type(value).__name__} {value!r}"


def dtype_error(op, dtype):
    """The ValueError Caffe2 raises for a ``dtype`` argument ``op`` does not support."""
    if dtype == DataType.UNDEFINED:
        return op.error("dtype", f"must not be UNDEFINED (Caffe2: '{op.type} op cannot have "
                        "undefined 'dtype' argument'). Received: dtype=0 (UNDEFINED).")
    name = dtype.name if isinstance(dtype, DataType) else "unknown"
    return op.error("dtype", f"must be a data type {op.type} supports (Caffe2: 'Unexpected "
                    f"'dtype' argument value: {int(dtype)}'). Received: dtype={int(dtype)} "
                    f"({name}).")


def exact(op, arg, values, dtype):
    """Caffe2's lossless integer conversion of argument values, naming the argument."""
    check_exact_cast(np.asarray(values), dtype, op.type, arg)


"""Caffe2's fill operators as Keras 3 initializers.

Each class has the Caffe2 operator's name, argument names and maths (see
``docs/caffe2-semantics.md``), takes Keras's ``(shape, dtype=None)`` call,
and is registered for Keras serialization both as ``"tfinit>Name"`` and as the
bare ``"Name"``. Fills use ``keras.ops`` / ``keras.random`` only, so they run on
every Keras 3 backend.

Dtypes: the call's dtype (what the layer asks for) wins; otherwise the fill's own
dtype (``ConstantFill(dtype=...)``, the typed ``GivenTensor*Fill`` variants), then
``keras.config.floatx()``. Deterministic values are cast only when the cast is
exact: integers must fit the target, floats going to an integer or bool dtype must
be integral (0/1 for bool), integers going to a float dtype must be representable,
and floats going to a narrower float dtype are rounded to nearest but must stay
finite. Anything else is a ``ValueError``.

Shapes with a zero dimension give an empty tensor: there is nothing to draw (Caffe2
itself dies with SIGFPE on some of them).
"""

import numbers
import random as python_random
import warnings

import keras
import numpy as np

from tfinit import _backend, _caffe2_rng, _fans, registry

# ---------------------------------------------------------------- argument checks


def _check_real(value, op_name, arg, finite=True):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(
            f"{op_name}: argument `{arg}` must be a real number, got "
            f"{type(value).__name__}: {value!r}."
        )
    if finite and not np.isfinite(value):
        raise ValueError(f"{op_name}: argument `{arg}` must be finite, got {value!r}.")
    return value


def _check_int(value, op_name, arg):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{op_name}: argument `{arg}` must be an integer, got "
            f"{type(value).__name__}: {value!r}."
        )
    return int(value)


def _check_min_max(low, high, op_name):
    if not low < high:
        raise ValueError(
            f"{op_name}: argument `min` must be smaller than `max` (Caffe2: "
            f"'Max value should be bigger than min value'), got min={low!r}, max={high!r}."
        )


def _standardize_dtype(dtype, op_name, arg="dtype"):
    if dtype is None:
        return None
    try:
        return keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError, AttributeError):
        raise ValueError(
            f"{op_name}: argument `{arg}` must be a Keras dtype name such as "
            f"'float32', 'float16', 'bfloat16', 'int32', 'int64' or 'bool', got {dtype!r}."
        ) from None


def _normalize_shape(shape, op_name):
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(
            f"{op_name}: shape must be a sequence of non-negative integers, got {shape!r}."
        ) from None
    out = []
    for d in dims:
        if d is None or isinstance(d, bool) or not isinstance(d, (numbers.Integral, np.integer)):
            raise ValueError(
                f"{op_name}: shape must be fully known non-negative integers, got {shape!r}."
            )
        if d < 0:
            raise ValueError(f"{op_name}: shape has a negative dimension: {shape!r}.")
        out.append(int(d))
    return tuple(out)


# ---------------------------------------------------------------- exact casts


def _numpy_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def check_exact_cast(values, dtype, op_name):
    """Raise ``ValueError`` unless ``values`` (numpy) cast exactly to ``dtype``.

    Exact means the cast round-trips, except float -> float, which rounds to
    nearest (Caffe2's FloatToHalf) and only has to stay finite.
    """
    values = np.asarray(values)
    target = _numpy_dtype(dtype)
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
        raise ValueError(
            f"{op_name}: value {first!r} cannot be represented exactly as {dtype}; "
            f"pass a dtype that holds it (values are cast only when exact)."
        )


def _check_backend_holds(dtype, op_name):
    if keras.backend.backend() != "jax" or dtype not in ("int64", "uint64", "float64", "uint32"):
        return
    import jax

    if not jax.config.jax_enable_x64:
        raise ValueError(
            f"{op_name}: the JAX backend cannot hold {dtype} unless 64-bit mode is on "
            f"(jax.config.update('jax_enable_x64', True)); refusing to truncate."
        )


def _to_tensor(array, dtype, op_name):
    _check_backend_holds(dtype, op_name)
    array = np.asarray(array)
    if array.dtype != _numpy_dtype(dtype):
        check_exact_cast(array, dtype, op_name)
        array = array.astype(_numpy_dtype(dtype))
    return keras.ops.convert_to_tensor(array, dtype=dtype)


#: below this, GivenTensorFill converts values the plain way (the saving is not worth it)
_ONE_COPY_MIN_BYTES = 1 << 20


def _tf_tensor_one_copy(array):
    """A TensorFlow tensor of a private copy of ``array``, made with one copy in all.

    ``tf.convert_to_tensor`` of a numpy array holds two copies of it at its peak (TF 2.21,
    measured: 2.0x the array's bytes). A 64-byte-aligned numpy copy handed to TF through
    DLPack is the tensor's buffer itself, and ``tf.Variable`` adopts that buffer, so a large
    given parameter costs the variable and nothing more. The copy is private: the variable
    never shares memory with the caller's array.
    """
    tf = _backend.tensorflow("tfinit.fills.tf_tensor_from_numpy")

    buffer = np.empty(array.nbytes + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return tf.experimental.dlpack.from_dlpack(copy.__dlpack__())


def tf_tensor_from_numpy(array):
    """``array`` as a TensorFlow tensor of its own; a large numeric one costs a single copy."""
    if array.nbytes >= _ONE_COPY_MIN_BYTES and array.dtype.kind in "fiu":
        return _tf_tensor_one_copy(array)
    tf = _backend.tensorflow("tfinit.fills.tf_tensor_from_numpy")

    return tf.convert_to_tensor(array)


# ---------------------------------------------------------------- base classes

#: random streams of the random fills: Keras's own, or Caffe2's CPU stream replayed
RNGS = ("keras", "caffe2")


class Fill(keras.initializers.Initializer):
    """Base of every tfinit fill: shape/dtype checks and the empty-shape rule.

    Subclasses implement ``_fill(shape, dtype)`` for a non-empty, validated shape.
    """

    #: the Caffe2 maths, shown by ``tfinit ops``
    formula = ""
    #: the dtype the fill produces when neither the call nor the user gives one
    default_dtype = None

    @property
    def op_name(self):
        return type(self).__name__

    def __call__(self, shape, dtype=None):
        shape = _normalize_shape(shape, self.op_name)
        dtype = self._resolve_dtype(dtype)
        self._check_shape(shape)
        if _fans.numel(shape) == 0:
            _check_backend_holds(dtype, self.op_name)
            return keras.ops.zeros(shape, dtype=dtype)
        return self._fill(shape, dtype)

    def _resolve_dtype(self, dtype):
        dtype = _standardize_dtype(dtype, self.op_name)
        if dtype is None:
            dtype = getattr(self, "dtype", None) or self.default_dtype or keras.config.floatx()
        return dtype

    def _check_shape(self, shape):
        """Shape rules checked before anything is drawn (empty shapes included)."""

    def _fill(self, shape, dtype):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{self.op_name}({args})"


class RandomFill(Fill):
    """A fill that draws from ``keras.random`` with Keras 3's seed rules.

    An int seed (or ``None``, which picks one at construction, as Keras does) gives
    the same values on every call; a ``keras.random.SeedGenerator`` advances.

    ``rng="caffe2"`` (int seed required) instead replays the Caffe2 CPU operator whose
    ``DeviceOption.random_seed`` is ``seed mod 2**32``, bit for bit: the float32 values
    Caffe2 writes, cast to the call's dtype when that is another dtype (to float16
    they round to nearest, as Caffe2's FloatToHalf). The algorithm per op is in
    ``tfinit._caffe2_rng``. Fills without a ``layout`` fill the given shape in
    row-major order, as Caffe2 does; see XavierFill/MSRAFill for layouts.
    """

    def __init__(self, seed=None, rng="keras"):
        if rng not in RNGS:
            raise ValueError(f"{self.op_name}: argument `rng` must be one of {RNGS}, got {rng!r}.")
        if rng == "caffe2" and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(
                f"{self.op_name}: rng='caffe2' replays the Caffe2 operator seeded with "
                f"DeviceOption.random_seed, so `seed` must be an int (reduced mod 2**32); "
                f"got {seed!r} (None and keras.random.SeedGenerator have no Caffe2 equivalent)."
            )
        self.rng = rng
        self._init_seed = seed
        if seed is None:
            seed = python_random.randint(1, int(1e9))
        elif isinstance(seed, dict):
            seed = keras.saving.deserialize_keras_object(seed)
        elif isinstance(seed, bool) or not isinstance(
            seed, (numbers.Integral, keras.random.SeedGenerator)
        ):
            raise ValueError(
                f"{self.op_name}: argument `seed` must be an int or a "
                f"keras.random.SeedGenerator, got {seed!r}."
            )
        self.seed = int(seed) if isinstance(seed, numbers.Integral) else seed

    def get_config(self):
        return {"seed": keras.saving.serialize_keras_object(self._init_seed), "rng": self.rng}

    def _caffe2_tensor(self, draw, shape, dtype, layout="caffe2"):
        """Caffe2's values for ``shape``: ``draw(count)`` returns them in Caffe2's
        row-major order for the Caffe2-layout shape; under ``layout="keras"`` that shape
        is ``_fans.caffe2_shape(shape)`` and the values are moved to ``shape``.
        """
        keras_layout = layout == "keras"
        caffe2_shape = _fans.caffe2_shape(shape) if keras_layout else shape
        values = draw(_fans.numel(shape)).reshape(caffe2_shape)
        if keras_layout:
            values = _fans.to_keras_layout(values)
        return _to_tensor(values, dtype, self.op_name)

    def _float_dtype(self, dtype):
        if not keras.backend.is_float_dtype(dtype):
            raise ValueError(
                f"{self.op_name}: draws floating-point values; dtype must be a float "
                f"dtype, got {dtype}."
            )
        _check_backend_holds(dtype, self.op_name)
        return dtype


def _register(cls):
    """Register ``cls`` in tfinit's op table and with Keras, bare name included."""
    registry.register(cls)
    cls = keras.saving.register_keras_serializable(package="tfinit")(cls)
    keras.saving.get_custom_objects()[cls.__name__] = cls
    return cls


# ---------------------------------------------------------------- constant-like fills


@_register
class ConstantFill(Fill):
    """Every element equals ``value`` (Caffe2 ConstantFill)."""

    formula = "x = value"

    def __init__(self, value=0.0, dtype=None):
        self.value = _check_real(value, self.op_name, "value", finite=False)
        self.dtype = _standardize_dtype(dtype, self.op_name)
        if self.dtype is not None:
            check_exact_cast(np.asarray(value), self.dtype, self.op_name)

    def _fill(self, shape, dtype):
        scalar = _to_tensor(np.asarray(self.value), dtype, self.op_name)
        return keras.ops.broadcast_to(scalar, shape)

    def get_config(self):
        return {"value": self.value, "dtype": self.dtype}


@_register
class RangeFill(Fill):
    """0, 1, 2, ... in row-major order (Caffe2 RangeFill)."""

    formula = "x[i] = i, i = 0 .. numel-1 in row-major order"

    def __init__(self):
        pass

    def _fill(self, shape, dtype):
        count = _fans.numel(shape)
        # If the top two numbers are exact, every smaller one is.
        check_exact_cast(
            np.array([max(count - 2, 0), count - 1], dtype=np.int64), dtype, self.op_name
        )
        _check_backend_holds(dtype, self.op_name)
        return keras.ops.reshape(keras.ops.arange(count, dtype=dtype), shape)

    def get_config(self):
        return {}


@_register
class DiagonalFill(Fill):
    """Caffe2's flat-stride diagonal: ``value`` every ``step`` elements, others 0.

    2-D: ``step = shape[1] + 1`` in Caffe2 layout, so a tall Caffe2 matrix wraps
    ([7, 5] sets (0,0)..(4,4) and (6,0)). N-D needs equal dims and sets [i, i, ..., i].
    Under ``layout="keras"`` a 2-D shape is Caffe2's ``[out, in]`` transposed.
    """

    formula = "x[k*step] = value (flat), step = shape[1]+1 in Caffe2 layout; rest 0"

    def __init__(self, value=0.0, dtype=None, layout="keras"):
        self.value = _check_real(value, self.op_name, "value", finite=False)
        self.dtype = _standardize_dtype(dtype, self.op_name)
        self.layout = _fans.check_layout(layout, self.op_name)
        if self.dtype is not None:
            check_exact_cast(np.asarray(value), self.dtype, self.op_name)

    def _check_shape(self, shape):
        if len(shape) < 2:
            raise ValueError(
                f"{self.op_name}: shape must have at least 2 dimensions "
                f"(Caffe2: 'Input shape must be >= 2D'), got {shape}."
            )
        if len(shape) > 2 and len(set(shape)) != 1:
            raise ValueError(
                f"{self.op_name}: an N-D shape needs all dimensions equal (Caffe2: 'All "
                f"dimensions of input must be of equal length'), got {shape}."
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
        return _to_tensor(values, dtype, self.op_name)

    def get_config(self):
        return {"value": self.value, "dtype": self.dtype, "layout": self.layout}


@_register
class GivenTensorFill(Fill):
    """Exactly ``values``, in row-major order (Caffe2 GivenTensorFill, float32).

    ``shape`` is optional; when given it must have as many elements as ``values``
    and equal the shape the fill is called with (values are not re-laid out).
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
                f"{op}: argument `values` cannot be made into an array ({err})."
            ) from None
        if array.dtype.kind not in "biuf":
            raise TypeError(
                f"{op}: argument `values` must hold numbers, got an array of {array.dtype}."
            )
        check_exact_cast(array, self.value_dtype, op)
        # No copy when the array already has the right dtype: large parameters stay single.
        self.values = array.astype(_numpy_dtype(self.value_dtype), copy=False)
        self.shape = None
        if shape is not None:
            self.shape = _normalize_shape(shape, op)
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
        if values.dtype == _numpy_dtype(dtype):
            if keras.backend.backend() == "tensorflow":
                return tf_tensor_from_numpy(values)
            # JAX on CPU may adopt a numpy buffer as it is: the tensor gets its own copy.
            values = values.copy()
        return _to_tensor(values, dtype, self.op_name)

    def get_config(self):
        return {
            "values": self.values.tolist(),
            "shape": None if self.shape is None else list(self.shape),
        }


def _typed_given_tensor_fill(name, value_dtype, doc):
    cls = type(name, (GivenTensorFill,), {"value_dtype": value_dtype, "__doc__": doc})
    cls.__module__ = __name__
    cls.__qualname__ = name
    return _register(cls)


GivenTensorDoubleFill = _typed_given_tensor_fill(
    "GivenTensorDoubleFill",
    "float64",
    "Exactly ``values`` as float64 (Caffe2 GivenTensorDoubleFill).",
)
GivenTensorIntFill = _typed_given_tensor_fill(
    "GivenTensorIntFill", "int32", "Exactly ``values`` as int32 (Caffe2 GivenTensorIntFill)."
)
GivenTensorInt64Fill = _typed_given_tensor_fill(
    "GivenTensorInt64Fill", "int64", "Exactly ``values`` as int64 (Caffe2 GivenTensorInt64Fill)."
)
GivenTensorInt16Fill = _typed_given_tensor_fill(
    "GivenTensorInt16Fill", "int16", "Exactly ``values`` as int16 (Caffe2 GivenTensorInt16Fill)."
)
GivenTensorBoolFill = _typed_given_tensor_fill(
    "GivenTensorBoolFill",
    "bool",
    "Exactly ``values`` (0/1 or bools) as bool (Caffe2 GivenTensorBoolFill).",
)


# ---------------------------------------------------------------- random fills


@_register
class GaussianFill(RandomFill):
    """normal(mean, std), not truncated; ``std == 0`` gives ``mean`` (Caffe2 GaussianFill)."""

    formula = "x ~ normal(mean, std), not truncated"

    def __init__(self, mean=0.0, std=1.0, seed=None, rng="keras"):
        self.mean = _check_real(mean, self.op_name, "mean")
        self.std = _check_real(std, self.op_name, "std")
        if std < 0:
            raise ValueError(
                f"{self.op_name}: argument `std` must be >= 0 (Caffe2: 'stdv_in must be "
                f"positive'), got std={std!r}."
            )
        super().__init__(seed, rng)

    def _fill(self, shape, dtype):
        dtype = self._float_dtype(dtype)
        if self.rng == "caffe2":
            return self._caffe2_tensor(
                lambda n: _caffe2_rng.gaussian(self.seed, n, self.mean, self.std), shape, dtype
            )
        return keras.random.normal(
            shape, mean=self.mean, stddev=self.std, dtype=dtype, seed=self.seed
        )

    def get_config(self):
        return {"mean": self.mean, "std": self.std, **super().get_config()}


@_register
class UniformFill(RandomFill):
    """uniform on [min, max) (Caffe2 UniformFill); ``min < max`` required."""

    formula = "x ~ uniform[min, max)"

    def __init__(self, min=0.0, max=1.0, seed=None, rng="keras"):  # noqa: A002 (Caffe2's)
        self.min = _check_real(min, self.op_name, "min")
        self.max = _check_real(max, self.op_name, "max")
        _check_min_max(self.min, self.max, self.op_name)
        super().__init__(seed, rng)
        if rng == "caffe2" and not np.float32(self.min) < np.float32(self.max):
            raise ValueError(
                f"{self.op_name}: Caffe2 passes min and max as float32, where min={self.min!r} "
                f"and max={self.max!r} are no longer min < max."
            )

    def _fill(self, shape, dtype):
        dtype = self._float_dtype(dtype)
        if self.rng == "caffe2":
            return self._caffe2_tensor(
                lambda n: _caffe2_rng.uniform(self.seed, n, self.min, self.max), shape, dtype
            )
        return keras.random.uniform(
            shape, minval=self.min, maxval=self.max, dtype=dtype, seed=self.seed
        )

    def get_config(self):
        return {"min": self.min, "max": self.max, **super().get_config()}


class _FanScaledFill(RandomFill):
    """XavierFill / MSRAFill: a Caffe2 fan rule read through ``layout`` gives the scale
    ``sqrt(numerator / fan)``, computed in float32 as Caffe2 does.

    ``rng="caffe2"``: with ``layout="caffe2"``, Caffe2's array for this shape. With
    ``layout="keras"``, the same parameter in Keras layout: Caffe2's array for the
    Caffe2-layout shape ``(out, in, *spatial)`` of the Keras shape ``(*spatial, in, out)``,
    moved there (Dense ``[in, out]`` = Caffe2's ``[out, in]`` transposed; Conv HWIO =
    OIHW ``.transpose(2, 3, 1, 0)``; 1-D shapes are the same in both layouts).
    """

    numerator = None

    def __init__(self, seed=None, layout="keras", rng="keras"):
        self.layout = _fans.check_layout(layout, self.op_name)
        super().__init__(seed, rng)

    @staticmethod
    def fan(shape, layout, op_name):
        raise NotImplementedError

    def _check_shape(self, shape):
        self.fan(shape, self.layout, self.op_name)

    def _scale(self, shape):
        fan = self.fan(_normalize_shape(shape, self.op_name), self.layout, self.op_name)
        return float(np.sqrt(np.float32(self.numerator) / np.float32(fan), dtype=np.float32))

    def _fill(self, shape, dtype):
        dtype = self._float_dtype(dtype)
        scale = self._scale(shape)
        if self.rng == "caffe2":
            draw = lambda n: self._caffe2_draw(n, scale)  # noqa: E731
            return self._caffe2_tensor(draw, shape, dtype, self.layout)
        return self._keras_draw(shape, scale, dtype)

    def get_config(self):
        return {**super().get_config(), "layout": self.layout}


@_register
class XavierFill(_FanScaledFill):
    """uniform(+-sqrt(3 / fan_in)), Caffe2's fan_in = numel // (output dim).

    LeCun-uniform variance 1/fan_in (not Glorot's). ``layout="keras"`` reads the
    output axis as the last one (Dense [in, out], Conv HWIO); ``"caffe2"`` as axis 0.
    A 1-D shape has fan_in 1, so the limit is sqrt(3), as in Caffe2.
    """

    formula = "x ~ uniform(-L, L), L = sqrt(3 / fan_in), fan_in = numel / shape[out axis]"
    numerator = 3
    fan = staticmethod(_fans.xavier_fan_in)

    def limit(self, shape):
        """Caffe2's float32 limit ``sqrt(3 / fan_in)`` for ``shape``."""
        return self._scale(shape)

    def _caffe2_draw(self, count, limit):
        return _caffe2_rng.uniform(self.seed, count, -limit, limit)

    def _keras_draw(self, shape, limit, dtype):
        return keras.random.uniform(shape, minval=-limit, maxval=limit, dtype=dtype, seed=self.seed)


@_register
class MSRAFill(_FanScaledFill):
    """normal(0, sqrt(2 / fan_out)), Caffe2's fan_out = numel // (input dim).

    He initialization scaled by the *output* size, as Caffe2 does. ``layout="keras"``
    reads the input axis as the one before last; ``"caffe2"`` as axis 1. Needs >= 2-D.
    """

    formula = "x ~ normal(0, sqrt(2 / fan_out)), fan_out = numel / shape[in axis]"
    numerator = 2
    fan = staticmethod(_fans.msra_fan_out)

    def std(self, shape):
        """Caffe2's float32 std ``sqrt(2 / fan_out)`` for ``shape``."""
        return self._scale(shape)

    def _caffe2_draw(self, count, std):
        return _caffe2_rng.gaussian(self.seed, count, 0.0, std)

    def _keras_draw(self, shape, std, dtype):
        return keras.random.normal(shape, mean=0.0, stddev=std, dtype=dtype, seed=self.seed)


class _IntegerFill(RandomFill):
    """Shared checks of the integer-valued random fills (int32 unless asked otherwise)."""

    default_dtype = "int32"

    def _check_bounds_fit(self, dtype):
        _check_backend_holds(dtype, self.op_name)
        check_exact_cast(np.array([self.min, self.max], dtype=np.int64), dtype, self.op_name)

    def _draw_dtype(self):
        lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        return "int32" if lo <= self.min and self.max < hi else "int64"


@_register
class UniformIntFill(_IntegerFill):
    """Integers uniform on [min, max], max inclusive (Caffe2 UniformIntFill)."""

    formula = "x ~ uniform integers in [min, max] (max inclusive)"

    def __init__(self, min=0, max=1, seed=None, rng="keras"):  # noqa: A002 (Caffe2's)
        self.min = _check_int(min, self.op_name, "min")
        self.max = _check_int(max, self.op_name, "max")
        _check_min_max(self.min, self.max, self.op_name)
        super().__init__(seed, rng)
        int32 = np.iinfo(np.int32)
        if rng == "caffe2" and not int32.min <= self.min < self.max <= int32.max:
            raise ValueError(
                f"{self.op_name}: Caffe2's UniformIntFill is int32, so rng='caffe2' needs "
                f"min and max in the int32 range, got min={self.min}, max={self.max}."
            )

    def _fill(self, shape, dtype):
        self._check_bounds_fit(dtype)
        if self.rng == "caffe2":
            return self._caffe2_tensor(
                lambda n: _caffe2_rng.uniform_int(self.seed, n, self.min, self.max), shape, dtype
            )
        draw_dtype = self._draw_dtype()
        _check_backend_holds(draw_dtype, self.op_name)
        values = keras.random.randint(
            shape, self.min, self.max + 1, dtype=draw_dtype, seed=self.seed
        )
        return keras.ops.cast(values, dtype)

    def get_config(self):
        return {"min": self.min, "max": self.max, **super().get_config()}


@_register
class UniqueUniformFill(_IntegerFill):
    """Distinct integers from [min, max] (inclusive) that are not in ``avoid``.

    Needs ``numel <= max - min + 1 - (avoided values inside the range)``, as Caffe2.
    """

    formula = "x = distinct integers drawn from [min, max] \\ avoid"

    def __init__(self, min, max, avoid=(), seed=None, rng="keras"):  # noqa: A002
        self.min = _check_int(min, self.op_name, "min")
        self.max = _check_int(max, self.op_name, "max")
        _check_min_max(self.min, self.max, self.op_name)
        if keras.ops.is_tensor(avoid):
            avoid = keras.ops.convert_to_numpy(avoid)
        avoid = np.asarray(avoid).reshape(-1)
        if avoid.size and avoid.dtype.kind not in "iu":
            raise TypeError(
                f"{self.op_name}: argument `avoid` must hold integers, got {avoid.dtype}."
            )
        self.avoid = tuple(int(v) for v in avoid)
        super().__init__(seed, rng)

    def _available(self):
        inside = np.unique([v for v in self.avoid if self.min <= v <= self.max]).astype(np.int64)
        return self.max - self.min + 1 - inside.size, inside

    def _check_shape(self, shape):
        count, _ = self._available()
        if _fans.numel(shape) > count:
            raise ValueError(
                f"{self.op_name}: cannot draw {_fans.numel(shape)} distinct values from "
                f"[{self.min}, {self.max}] minus {len(self.avoid)} avoided values "
                f"({count} available; Caffe2: 'Cannot satisfy the unique requirement')."
            )

    def _fill(self, shape, dtype):
        self._check_bounds_fit(dtype)
        if self.rng == "caffe2":
            # Caffe2 draws 64-bit numbers only for an INT64 output with a range >= 2**32.
            return self._caffe2_tensor(
                lambda n: _caffe2_rng.unique_uniform_int(
                    self.seed, n, self.min, self.max, self.avoid, wide=dtype == "int64"
                ),
                shape,
                dtype,
            )
        count, inside = self._available()
        # One Keras draw seeds the sampler, so int seeds repeat and SeedGenerators advance.
        sampler_seed = keras.random.randint((2,), 0, 2**31 - 1, dtype="int32", seed=self.seed)
        rng = np.random.default_rng(keras.ops.convert_to_numpy(sampler_seed).tolist())
        ranks = rng.choice(count, size=_fans.numel(shape), replace=False).astype(np.int64)
        # The k-th available value skips every avoided value at or below it.
        gaps = inside - self.min - np.arange(inside.size)
        values = self.min + ranks + np.searchsorted(gaps, ranks, side="right")
        return _to_tensor(values.reshape(shape), dtype, self.op_name)

    def get_config(self):
        return {"min": self.min, "max": self.max, "avoid": list(self.avoid), **super().get_config()}


# ---------------------------------------------------------------- lookup


def get(identifier):
    """A Keras initializer from a Caffe2 op name, a ``(name, kwargs)`` tuple as
    Caffe2's brew took it, a Keras config dict or name, an initializer, or None.
    """
    if identifier is None or isinstance(identifier, keras.initializers.Initializer):
        return identifier
    if isinstance(identifier, str):
        try:
            return registry.build(identifier, {})
        except ValueError as ours:
            try:
                return keras.initializers.get(identifier)
            except ValueError:
                raise ours from None
    if isinstance(identifier, (tuple, list)):
        if len(identifier) != 2 or not isinstance(identifier[1], dict):
            raise TypeError(
                "A fill given as a tuple must be (op_name, kwargs_dict) as in Caffe2's "
                f"brew, e.g. ('GaussianFill', {{'std': 0.01}}); got {identifier!r}."
            )
        return registry.build(identifier[0], identifier[1])
    if isinstance(identifier, dict):
        return keras.initializers.get(identifier)
    if isinstance(identifier, type) and issubclass(identifier, keras.initializers.Initializer):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(
        "tfinit.get: expected a fill operator name, an (op_name, kwargs) tuple, a Keras "
        f"initializer, a config dict or None; got {type(identifier).__name__}: {identifier!r}."
    )

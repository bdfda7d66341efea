"""Caffe2's random fill operators: GaussianFill, UniformFill, XavierFill, MSRAFill,
UniformIntFill and UniqueUniformFill.

What varies between them is the distribution and its Caffe2 arguments; what varies
between two instances of one of them is the random stream, chosen once at construction
by ``rng`` (``tfinit.fills._streams``): ``"keras"`` (default) draws with ``keras.random`` and
Keras 3's seed rules, ``"caffe2"`` replays Caffe2's CPU stream for an int seed, bit for bit.
"""

import numbers
import random as python_random

import keras
import numpy as np

from tfinit import _args, _backend, _fans
from tfinit.fills import _exact
from tfinit.fills import _streams
from tfinit.fills._base import Fill, register

RNGS = _streams.RNGS
"""The values of a random fill's `rng` argument: `"keras"` (Keras's own generator) or
`"caffe2"` (Caffe2's CPU stream replayed bit for bit)."""


def _resolve_seed(seed, op_name):
    """A Keras seed: ``None`` picks an int now (as Keras does), a config dict is rebuilt."""
    if seed is None:
        return python_random.randint(1, int(1e9))
    if isinstance(seed, dict):
        seed = keras.saving.deserialize_keras_object(seed)
    if isinstance(seed, bool) or not isinstance(
        seed, (numbers.Integral, keras.random.SeedGenerator)
    ):
        raise ValueError(
            f"{op_name}: Argument `seed` must be an int or a keras.random.SeedGenerator. "
            f"Received: seed={seed!r}."
        )
    return int(seed) if isinstance(seed, numbers.Integral) else seed


class RandomFill(Fill):
    """A fill that draws random numbers, from the stream chosen by ``rng``.

    ``rng="keras"``: an int seed (or ``None``, which picks one at construction, as Keras
    does) gives the same values on every call; a ``keras.random.SeedGenerator`` advances.

    ``rng="caffe2"`` (int seed required) instead replays the Caffe2 CPU operator whose
    ``DeviceOption.random_seed`` is ``seed mod 2**32``, bit for bit: the float32 values
    Caffe2 writes, cast to the call's dtype when that is another dtype (to float16
    they round to nearest, as Caffe2's FloatToHalf). The algorithm per op is in
    ``tfinit.fills._caffe2_rng``. Fills without a ``layout`` fill the given shape in
    row-major order, as Caffe2 does; see XavierFill/MSRAFill for layouts.
    """

    def __init__(self, seed=None, rng="keras"):
        stream = _streams.stream_class(rng, self.op_name)
        stream.check_seed(seed, self.op_name)
        self.rng = rng
        self._init_seed = seed
        self.seed = _resolve_seed(seed, self.op_name)
        self._stream = stream(self.seed, self.op_name)

    def get_config(self):
        return {"seed": keras.saving.serialize_keras_object(self._init_seed), "rng": self.rng}

    def _float_dtype(self, dtype):
        if not keras.backend.is_float_dtype(dtype):
            raise ValueError(
                f"{self.op_name}: draws floating-point values, so the dtype must be a float "
                f"dtype. Received: dtype={dtype}."
            )
        _backend.check_holds(dtype, self.op_name)
        return dtype


@register
class GaussianFill(RandomFill):
    """normal(mean, std), not truncated; ``std == 0`` gives ``mean`` (Caffe2 GaussianFill).

    Caffe2's ``GaussianFill`` draws from the untruncated normal distribution (unlike
    ``keras.initializers.TruncatedNormal``); ``std`` must be ``>= 0``, as in Caffe2.

    Args:
        mean: the mean, a finite real number.
        std: the standard deviation, a finite real number ``>= 0``.
        seed: an int, ``None`` or a ``keras.random.SeedGenerator`` (Keras's seed rules);
            with ``rng="caffe2"``, the int ``DeviceOption.random_seed``.
        rng: ``"keras"`` (``keras.random``) or ``"caffe2"`` (Caffe2's CPU stream, bit for bit).

    Returns:
        Called as ``fill(shape, dtype=None)``: a tensor of ``shape`` and a float dtype
        (the call's, else ``keras.config.floatx()``).

    Raises:
        TypeError: ``mean`` or ``std`` is not a real number.
        ValueError: ``std < 0``, a bad ``seed``/``rng``, or a non-float call dtype.

    Example:

    >>> import keras, tfinit
    >>> init = tfinit.GaussianFill(mean=1.0, std=0.5, seed=3, rng="caffe2")
    >>> keras.ops.convert_to_numpy(init((2, 3))).astype(float).round(4).tolist()
    [[1.2361, 1.0063, 0.9739], [1.1139, 0.8267, 1.0312]]
    >>> layer = keras.layers.Dense(4, kernel_initializer=tfinit.GaussianFill(std=0.01, seed=1))
    """

    formula = "x ~ normal(mean, std), not truncated"

    def __init__(self, mean=0.0, std=1.0, seed=None, rng="keras"):
        self.mean = _args.check_real(mean, self.op_name, "mean")
        self.std = _args.check_real(std, self.op_name, "std")
        if std < 0:
            raise ValueError(
                f"{self.op_name}: Argument `std` must be >= 0 (Caffe2: 'stdv_in must be "
                f"positive'). Received: std={std!r}."
            )
        super().__init__(seed, rng)

    def _fill(self, shape, dtype):
        return self._stream.normal(shape, self.mean, self.std, self._float_dtype(dtype))

    def get_config(self):
        return {"mean": self.mean, "std": self.std, **super().get_config()}


@register
class UniformFill(RandomFill):
    """uniform on [min, max) (Caffe2 UniformFill); ``min < max`` required.

    Args:
        min: the lower bound (included), a finite real number.
        max: the upper bound (excluded), a finite real number greater than ``min``.
        seed: an int, ``None`` or a ``keras.random.SeedGenerator``; with ``rng="caffe2"``
            an int.
        rng: ``"keras"`` or ``"caffe2"``; Caffe2 passes ``min`` and ``max`` as float32, so
            with ``"caffe2"`` they must stay ``min < max`` in float32.

    Returns:
        Called as ``fill(shape, dtype=None)``: a float tensor of ``shape``.

    Raises:
        TypeError: ``min`` or ``max`` is not a real number.
        ValueError: ``min >= max``, a bad ``seed``/``rng``, or a non-float call dtype.

    Example:

    >>> import keras, tfinit
    >>> init = tfinit.UniformFill(min=-1.0, max=1.0, seed=3, rng="caffe2")
    >>> keras.ops.convert_to_numpy(init((2, 2))).astype(float).round(4).tolist()
    [[-0.9915, -0.7889], [-0.4283, -0.9461]]
    """

    formula = "x ~ uniform[min, max)"

    def __init__(self, min=0.0, max=1.0, seed=None, rng="keras"):  # noqa: A002 (Caffe2's)
        self.min = _args.check_real(min, self.op_name, "min")
        self.max = _args.check_real(max, self.op_name, "max")
        _args.check_min_max(self.min, self.max, self.op_name)
        super().__init__(seed, rng)
        self._stream.check_float_bounds(self.min, self.max)

    def _fill(self, shape, dtype):
        return self._stream.uniform(shape, self.min, self.max, self._float_dtype(dtype))

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
        fan = self.fan(_args.normalize_shape(shape, self.op_name), self.layout, self.op_name)
        return float(np.sqrt(np.float32(self.numerator) / np.float32(fan), dtype=np.float32))

    def _fill(self, shape, dtype):
        return self._draw(shape, self._scale(shape), self._float_dtype(dtype))

    def get_config(self):
        return {**super().get_config(), "layout": self.layout}


@register
class XavierFill(_FanScaledFill):
    """uniform(+-sqrt(3 / fan_in)), Caffe2's fan_in = numel // (output dim).

    LeCun-uniform variance 1/fan_in (not Glorot's). ``layout="keras"`` reads the
    output axis as the last one (Dense [in, out], Conv HWIO); ``"caffe2"`` as axis 0.
    A 1-D shape has fan_in 1, so the limit is sqrt(3), as in Caffe2.

    Args:
        seed: an int, ``None`` or a ``keras.random.SeedGenerator``; with ``rng="caffe2"``
            an int.
        layout: ``"keras"`` (the shape is a Keras weight's: ``[in, out]``, HWIO) or
            ``"caffe2"`` (``[out, in]``, OIHW, read as Caffe2 reads it).
        rng: ``"keras"`` or ``"caffe2"`` (Caffe2's values for the same parameter, moved
            to the Keras layout when ``layout="keras"``).

    Returns:
        Called as ``fill(shape, dtype=None)``: a float tensor of ``shape``.
        ``limit(shape)`` gives Caffe2's float32 limit.

    Raises:
        ValueError: a 0-d shape, a bad ``layout``/``seed``/``rng``, or a non-float dtype.

    Example:

    >>> import keras, tfinit
    >>> init = tfinit.XavierFill(seed=0)
    >>> round(init.limit((300, 100)), 6)  # Dense kernel [in=300, out=100]: sqrt(3 / 300)
    0.1
    >>> layer = keras.layers.Dense(100, kernel_initializer="XavierFill")
    """

    formula = "x ~ uniform(-L, L), L = sqrt(3 / fan_in), fan_in = numel / shape[out axis]"
    numerator = 3
    fan = staticmethod(_fans.xavier_fan_in)

    def limit(self, shape):
        """Caffe2's float32 limit ``sqrt(3 / fan_in)`` for ``shape``."""
        return self._scale(shape)

    def _draw(self, shape, limit, dtype):
        return self._stream.uniform(shape, -limit, limit, dtype, self.layout)


@register
class MSRAFill(_FanScaledFill):
    """normal(0, sqrt(2 / fan_out)), Caffe2's fan_out = numel // (input dim).

    He initialization scaled by the *output* size, as Caffe2 does. ``layout="keras"``
    reads the input axis as the one before last; ``"caffe2"`` as axis 1. Needs >= 2-D.

    Args:
        seed: an int, ``None`` or a ``keras.random.SeedGenerator``; with ``rng="caffe2"``
            an int.
        layout: ``"keras"`` (``[in, out]``, HWIO) or ``"caffe2"`` (``[out, in]``, OIHW).
        rng: ``"keras"`` or ``"caffe2"``.

    Returns:
        Called as ``fill(shape, dtype=None)``: a float tensor of ``shape``.
        ``std(shape)`` gives Caffe2's float32 standard deviation.

    Raises:
        ValueError: a shape of fewer than 2 dimensions, a bad ``layout``/``seed``/``rng``,
            or a non-float dtype.

    Example:

    >>> import tfinit
    >>> init = tfinit.MSRAFill(seed=0)
    >>> round(init.std((3, 3, 16, 8)), 6)  # HWIO: fan_out = 3 * 3 * 8, sqrt(2 / 72)
    0.166667
    """

    formula = "x ~ normal(0, sqrt(2 / fan_out)), fan_out = numel / shape[in axis]"
    numerator = 2
    fan = staticmethod(_fans.msra_fan_out)

    def std(self, shape):
        """Caffe2's float32 std ``sqrt(2 / fan_out)`` for ``shape``."""
        return self._scale(shape)

    def _draw(self, shape, std, dtype):
        return self._stream.normal(shape, 0.0, std, dtype, self.layout)


class _IntegerFill(RandomFill):
    """Shared checks of the integer-valued random fills (int32 unless asked otherwise)."""

    default_dtype = "int32"

    def _init_bounds(self, low, high):
        self.min = _args.check_int(low, self.op_name, "min")
        self.max = _args.check_int(high, self.op_name, "max")
        _args.check_min_max(self.min, self.max, self.op_name)

    def _check_bounds_fit(self, dtype):
        _backend.check_holds(dtype, self.op_name)
        _exact.check_exact_cast(np.array([self.min, self.max], dtype=np.int64), dtype, self.op_name)


@register
class UniformIntFill(_IntegerFill):
    """Integers uniform on [min, max], max inclusive (Caffe2 UniformIntFill).

    Args:
        min: the smallest value, an integer.
        max: the largest value (included), an integer greater than ``min``.
        seed: an int, ``None`` or a ``keras.random.SeedGenerator``; with ``rng="caffe2"``
            an int.
        rng: ``"keras"`` or ``"caffe2"`` (Caffe2's int32 operator: bounds in int32 range).

    Returns:
        Called as ``fill(shape, dtype=None)``: an int32 tensor of ``shape`` (or the call's
        dtype, when it holds ``min`` and ``max`` exactly).

    Raises:
        TypeError: ``min`` or ``max`` is not an integer.
        ValueError: ``min >= max``, bounds the dtype cannot hold, a bad ``seed``/``rng``.

    Example:

    >>> import keras, tfinit
    >>> init = tfinit.UniformIntFill(min=0, max=9, seed=3, rng="caffe2")
    >>> keras.ops.convert_to_numpy(init((2, 4))).tolist()
    [[6, 8, 7, 7], [0, 0, 0, 5]]
    """

    formula = "x ~ uniform integers in [min, max] (max inclusive)"

    def __init__(self, min=0, max=1, seed=None, rng="keras"):  # noqa: A002 (Caffe2's)
        self._init_bounds(min, max)
        super().__init__(seed, rng)
        self._stream.check_int_bounds(self.min, self.max)

    def _fill(self, shape, dtype):
        self._check_bounds_fit(dtype)
        return self._stream.integers(shape, self.min, self.max, dtype)

    def get_config(self):
        return {"min": self.min, "max": self.max, **super().get_config()}


@register
class UniqueUniformFill(_IntegerFill):
    """Distinct integers from [min, max] (inclusive) that are not in ``avoid``.

    Needs ``numel <= max - min + 1 - (avoided values inside the range)``, as Caffe2.

    Args:
        min: the smallest value, an integer.
        max: the largest value (included), an integer greater than ``min``.
        avoid: integers never drawn (Caffe2's optional second input).
        seed: an int, ``None`` or a ``keras.random.SeedGenerator``; with ``rng="caffe2"``
            an int.
        rng: ``"keras"`` or ``"caffe2"``.

    Returns:
        Called as ``fill(shape, dtype=None)``: an int32 tensor of ``shape`` (or the call's
        dtype) of distinct values.

    Raises:
        TypeError: ``min``/``max`` not integers, or ``avoid`` holds non-integers.
        ValueError: ``min >= max``, or more elements than available values.

    Example:

    >>> import keras, tfinit
    >>> init = tfinit.UniqueUniformFill(min=0, max=9, avoid=[0, 1], seed=3, rng="caffe2")
    >>> keras.ops.convert_to_numpy(init((5,))).tolist()
    [6, 8, 7, 5, 9]
    """

    formula = "x = distinct integers drawn from [min, max] \\ avoid"

    def __init__(self, min, max, avoid=(), seed=None, rng="keras"):  # noqa: A002
        self._init_bounds(min, max)
        if keras.ops.is_tensor(avoid):
            avoid = keras.ops.convert_to_numpy(avoid)
        avoid = np.asarray(avoid).reshape(-1)
        if avoid.size and avoid.dtype.kind not in "iu":
            raise TypeError(
                f"{self.op_name}: Argument `avoid` must hold integers. "
                f"Received: avoid of dtype {avoid.dtype}."
            )
        self.avoid = tuple(int(v) for v in avoid)
        super().__init__(seed, rng)

    def _check_shape(self, shape):
        count = self.max - self.min + 1 - _streams.avoided_inside(self.min, self.max,
                                                                   self.avoid).size
        if _fans.numel(shape) > count:
            raise ValueError(
                f"{self.op_name}: cannot draw {_fans.numel(shape)} distinct values from "
                f"[{self.min}, {self.max}] minus {len(self.avoid)} avoided values "
                f"({count} available; Caffe2: 'Cannot satisfy the unique requirement')."
            )

    def _fill(self, shape, dtype):
        self._check_bounds_fit(dtype)
        return self._stream.unique_integers(shape, self.min, self.max, self.avoid, dtype)

    def get_config(self):
        return {"min": self.min, "max": self.max, "avoid": list(self.avoid), **super().get_config()}

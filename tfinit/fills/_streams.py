"""The random streams of the random fills, one strategy object per ``rng`` value.

A random fill chooses its stream once, at construction (``rng="keras"`` or
``rng="caffe2"``), and asks it for values: ``normal``, ``uniform``, ``integers`` and
``unique_integers``. The fill owns the arguments and their Caffe2 checks; the stream owns
how numbers are drawn.

- :class:`KerasStream`: ``keras.random`` with Keras 3's seed rules (an int seed repeats,
  a ``keras.random.SeedGenerator`` advances); runs on every backend.
- :class:`Caffe2Stream`: Caffe2's CPU stream for ``DeviceOption.random_seed = seed mod
  2**32``, replayed bit for bit in numpy by ``tfinit.fills._caffe2_rng`` (float32 values in
  Caffe2's row-major order, then moved to the Keras layout and cast exactly).
"""

import numbers

import keras
import numpy as np

from tfinit import _backend, _fans
from tfinit.fills import _exact
from tfinit.fills import _caffe2_rng

_INT32 = np.iinfo(np.int32)


def avoided_inside(low, high, avoid):
    """The distinct values of ``avoid`` inside ``[low, high]``, sorted (int64 array)."""
    return np.unique([v for v in avoid if low <= v <= high]).astype(np.int64)


class KerasStream:
    """Keras's random stream: ``keras.random`` with the fill's seed."""

    name = "keras"

    def __init__(self, seed, op_name):
        self.seed = seed
        self.op_name = op_name

    @staticmethod
    def check_seed(seed, op_name):
        """Every Keras seed works (int, None, ``SeedGenerator``); checked by the fill."""

    def check_float_bounds(self, low, high):
        """Keras draws with the bounds as given."""

    def check_int_bounds(self, low, high):
        """Keras draws in int32 or int64 as the bounds need."""

    def normal(self, shape, mean, std, dtype, layout="caffe2"):
        return keras.random.normal(shape, mean=mean, stddev=std, dtype=dtype, seed=self.seed)

    def uniform(self, shape, low, high, dtype, layout="caffe2"):
        return keras.random.uniform(shape, minval=low, maxval=high, dtype=dtype, seed=self.seed)

    def integers(self, shape, low, high, dtype):
        """Integers uniform on ``[low, high]`` (``high`` inclusive), cast to ``dtype``."""
        draw_dtype = "int32" if _INT32.min <= low and high < _INT32.max else "int64"
        _backend.check_holds(draw_dtype, self.op_name)
        values = keras.random.randint(shape, low, high + 1, dtype=draw_dtype, seed=self.seed)
        return keras.ops.cast(values, dtype)

    def unique_integers(self, shape, low, high, avoid, dtype):
        """Distinct integers of ``[low, high]`` not in ``avoid``, uniformly chosen."""
        inside = avoided_inside(low, high, avoid)
        count = high - low + 1 - inside.size
        # One Keras draw seeds the sampler, so int seeds repeat and SeedGenerators advance.
        sampler_seed = keras.random.randint((2,), 0, 2**31 - 1, dtype="int32", seed=self.seed)
        rng = np.random.default_rng(keras.ops.convert_to_numpy(sampler_seed).tolist())
        ranks = rng.choice(count, size=_fans.numel(shape), replace=False).astype(np.int64)
        # The k-th available value skips every avoided value at or below it.
        gaps = inside - low - np.arange(inside.size)
        values = low + ranks + np.searchsorted(gaps, ranks, side="right")
        return _exact.to_tensor(values.reshape(shape), dtype, self.op_name)


class Caffe2Stream:
    """Caffe2's CPU stream of the operator seeded with ``seed`` (see ``_caffe2_rng``)."""

    name = "caffe2"

    def __init__(self, seed, op_name):
        self.seed = seed
        self.op_name = op_name

    @staticmethod
    def check_seed(seed, op_name):
        """Caffe2 seeds an operator with an int (``DeviceOption.random_seed``)."""
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ValueError(
                f"{op_name}: rng='caffe2' replays the Caffe2 operator seeded with "
                f"DeviceOption.random_seed, so Argument `seed` must be an int (reduced mod "
                f"2**32); None and keras.random.SeedGenerator have no Caffe2 equivalent. "
                f"Received: seed={seed!r}."
            )

    def check_float_bounds(self, low, high):
        """Caffe2 passes min and max as float32: they must stay ``min < max`` there."""
        if not np.float32(low) < np.float32(high):
            raise ValueError(
                f"{self.op_name}: Arguments `min` and `max` must stay min < max in float32, "
                f"as Caffe2 passes them. Received: min={low!r}, max={high!r}."
            )

    def check_int_bounds(self, low, high):
        """Caffe2's UniformIntFill is int32: the bounds must be in the int32 range."""
        if not _INT32.min <= low < high <= _INT32.max:
            raise ValueError(
                f"{self.op_name}: Arguments `min` and `max` must be in the int32 range with "
                f"rng='caffe2' (Caffe2's UniformIntFill is int32). "
                f"Received: min={low}, max={high}."
            )

    def _tensor(self, shape, dtype, layout, draw, *args, **kwargs):
        """Caffe2's values for ``shape``: ``draw(seed, count, *args, **kwargs)`` returns them
        in Caffe2's row-major order for the Caffe2-layout shape; under ``layout="keras"``
        that shape is ``_fans.caffe2_shape(shape)`` and the values are moved to ``shape``.
        """
        keras_layout = layout == "keras"
        caffe2_shape = _fans.caffe2_shape(shape) if keras_layout else shape
        values = draw(self.seed, _fans.numel(shape), *args, **kwargs).reshape(caffe2_shape)
        if keras_layout:
            values = _fans.to_keras_layout(values)
        return _exact.to_tensor(values, dtype, self.op_name)

    def normal(self, shape, mean, std, dtype, layout="caffe2"):
        return self._tensor(shape, dtype, layout, _caffe2_rng.gaussian, mean, std)

    def uniform(self, shape, low, high, dtype, layout="caffe2"):
        return self._tensor(shape, dtype, layout, _caffe2_rng.uniform, low, high)

    def integers(self, shape, low, high, dtype):
        return self._tensor(shape, dtype, "caffe2", _caffe2_rng.uniform_int, low, high)

    def unique_integers(self, shape, low, high, avoid, dtype):
        # Caffe2 draws 64-bit numbers only for an INT64 output with a range >= 2**32.
        return self._tensor(shape, dtype, "caffe2", _caffe2_rng.unique_uniform_int,
                            low, high, avoid, wide=dtype == "int64")


#: random streams of the random fills: Keras's own, or Caffe2's CPU stream replayed
STREAMS = {KerasStream.name: KerasStream, Caffe2Stream.name: Caffe2Stream}
RNGS = tuple(STREAMS)


def stream_class(rng, op_name):
    """The stream class for ``rng``; ``ValueError`` for an unknown name."""
    if rng not in STREAMS:
        raise ValueError(
            f"{op_name}: Argument `rng` must be one of {RNGS}. Received: rng={rng!r}."
        )
    return STREAMS[rng]

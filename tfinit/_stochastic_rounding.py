"""Stochastic rounding of float32 to bfloat16 with a counter-based hash (``master="stochastic"``).

The rule. A float32 ``x``'s bits are its bfloat16 truncation (the top 16 bits) followed by 16
*discarded* bits ``low``. ``x`` rounds to the truncation's magnitude plus one bfloat16 ulp
when 16 random bits ``r`` satisfy ``r < low``, else to the truncation: up with probability
``low / 2**16``, the fraction of the ulp, so ``E[round(x)] == x`` exactly and an update far
below an ulp still moves the weight in expectation (round to nearest drops it every time).
Float bits order magnitudes for both signs, so "up" is away from zero; a magnitude past
bfloat16's largest finite rounds to inf with that probability. Infinities, -0.0 and values
bfloat16 holds exactly are kept; a NaN stays a NaN.

The draws. ``r`` is the low half of ``hash(seed, step, stream, index)``: ``stream`` names the
variable (``MasterWeightOptimizer`` uses its index among the variables it was built for; a
name: :func:`stream_of`), ``index`` is the element's flat index.
The hash is murmur3's 32-bit finalizer (``fmix32``) applied in rounds, in int32 arithmetic
that wraps on every Keras backend (multiplies modulo 2**32; logical right shifts as an
arithmetic shift masked), so TensorFlow, JAX (with or without x64) and torch draw the same
bits (``tests/mixed_precision/test_stochastic_rounding.py`` checks them against a committed
golden array). No random-number generator state: a step's draws are a pure function of the
seed and the step, so a resumed run draws the same bits.
"""

import zlib

import keras
from keras import ops

from tfinit import _backend

#: murmur3 fmix32's multipliers, as the int32 values of their bits
_M1 = 0x85EBCA6B - (1 << 32)
_M2 = 0xC2B2AE35 - (1 << 32)
#: the golden ratio's bits (an odd constant that spreads consecutive counters)
_GOLDEN = 0x9E3779B9 - (1 << 32)
_LOW_HALF = 0xFFFF


def _int32(value):
    return ops.convert_to_tensor(value, dtype="int32")


def _shift_right(h, bits):
    """A logical right shift of int32 ``h`` (an arithmetic shift, its sign bits masked)."""
    return ops.bitwise_and(ops.right_shift(h, _int32(bits)), _int32((1 << (32 - bits)) - 1))


def fmix32(h):
    """murmur3's 32-bit finalizer over int32 ``h`` (wrapping multiplies)."""
    h = ops.bitwise_xor(h, _shift_right(h, 16))
    h = ops.multiply(h, _int32(_M1))
    h = ops.bitwise_xor(h, _shift_right(h, 13))
    h = ops.multiply(h, _int32(_M2))
    return ops.bitwise_xor(h, _shift_right(h, 16))


def _signed(value):
    """A Python int as the int32 of its low 32 bits."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def stream_of(path):
    """The stream of a variable: CRC-32 of its path (the same in every process and backend)."""
    return _signed(zlib.crc32(str(path).encode("utf-8")))


def random_bits(seed, step, stream, size):
    """``size`` int32 hashes of ``(seed, step, stream, index)`` for ``index`` in ``range(size)``.

    Args:
        seed: the seed (a Python int, or an int tensor).
        step: the step (a Python int, or an int tensor: an optimizer's ``iterations``).
        stream: the variable's stream (:func:`stream_of`).
        size: how many (a Python int).
    """
    key = fmix32(ops.add(ops.multiply(_int32(ops.cast(seed, "int32")), _int32(_GOLDEN)),
                         _int32(_signed(stream))))
    key = fmix32(ops.bitwise_xor(key, ops.cast(step, "int32")))
    index = ops.arange(size, dtype="int32")
    return fmix32(ops.add(fmix32(ops.bitwise_xor(index, key)), key))


def _view(x, dtype):
    """``x``'s bits as ``dtype`` (same width): ``keras.ops.view``, or where Keras lacks it
    (3.10, the oldest supported) the backend's own public bitcast."""
    if hasattr(ops, "view"):
        return ops.view(x, dtype)
    if keras.backend.backend() == "tensorflow":
        return _backend.tensorflow("stochastic rounding").bitcast(x, dtype)
    if keras.backend.backend() == "jax":
        from jax import lax

        return lax.bitcast_convert_type(x, dtype)
    import torch

    return x.view(getattr(torch, dtype))


def round_bits(x, random):
    """``x`` (float32) stochastically rounded to bfloat16 with the int32 draws ``random``
    (their low 16 bits), as float32 (bfloat16 holds it exactly)."""
    bits = _view(x, "int32")
    low = ops.bitwise_and(bits, _int32(_LOW_HALF))
    up = ops.less(ops.bitwise_and(random, _int32(_LOW_HALF)), low)
    truncated = ops.bitwise_and(bits, _int32(~_LOW_HALF))
    rounded = ops.where(up, ops.add(truncated, _int32(_LOW_HALF + 1)), truncated)
    rounded = _view(rounded, "float32")
    # A NaN's payload may lie in the low half only (its truncation would be an inf).
    return ops.where(ops.isnan(x), x, rounded)


def round_to_bfloat16(x, seed, step, stream):
    """``x`` stochastically rounded to bfloat16 (see the module docstring), a bfloat16 tensor.

    Args:
        x: the float32 values.
        seed, step, stream: as :func:`random_bits`; the element draws follow ``x``'s
            row-major order.
    """
    x = ops.convert_to_tensor(x, dtype="float32")
    shape = ops.shape(x)
    flat = ops.reshape(x, (-1,))
    size = 1
    for dimension in shape:
        size *= int(dimension)
    rounded = round_bits(flat, random_bits(seed, step, stream, size))
    return ops.cast(ops.reshape(rounded, shape), "bfloat16")


def widen(copy):
    """A bfloat16 ``copy`` as float32 (exact)."""
    return ops.cast(copy, "float32")



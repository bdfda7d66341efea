"""Caffe2's CPU random streams, replayed bit-for-bit in numpy.

Source: Caffe2 as shipped in the PyTorch 1.8.1 wheel (``caffe2/core/context.h``,
``caffe2/operators/filler_op.h``, ``caffe2/utils/math_cpu.cc``, and ATen's
``core/DistributionsHelper.h`` and ``core/TransformationHelper.h``); checked against
that Caffe2's own output (``tests/data/caffe2_rng_cases.*``, made as its README says).

**Generator.** A CPU operator with ``DeviceOption.random_seed = s`` makes its own
``at::CPUGeneratorImpl``: a 32-bit Mersenne Twister (MT19937) seeded by the classic
``init_genrand(s)``, the same stream as numpy's ``RandomState(s)``. Every operator
starts a fresh stream, so two operators with the same seed draw the same numbers.
``random_seed`` is a ``uint32`` field and ATen keeps only the low 32 bits of a seed,
so any Python int seed is reduced to ``seed mod 2**32`` (``-1`` -> ``4294967295``,
``2**32 + 5`` -> ``5``). ``random()`` is one 32-bit output; ``random64()`` is two,
the first as the high word.

Per op, ``n`` = number of elements, written in row-major order:

* **UniformFill(min, max)** / **XavierFill** (``min, max = -L, L`` with the float32
  ``L = sqrt(3 / fan_in)``): one ``random()`` per element; ``k`` = its low 24 bits;
  ``u = k * 2**-24`` (exact in float32); ``x = u * (max - min) + min`` with each
  operation rounded to float32 (ATen 1.8's ``dist_acctype<float>`` is ``float``; no
  fused multiply-add). min and max are float32 (Caffe2 arguments are 32-bit floats).
* **GaussianFill(mean, std)** / **MSRAFill** (``mean = 0``, ``std`` = the float32
  ``sqrt(2 / fan_out)``): Box-Muller on pairs of the float32 uniforms above, ``u1``
  drawn before ``u2``; ``r = float32(sqrt(-2.0 * log(1.0 - u2)))`` and, with
  ``theta = float32(float32(2*pi) * u1)``, ``c = float32(r * cos(theta))`` and
  ``s = float32(r * sin(theta))``. ATen writes ``::log``, ``::sqrt``, ``::sin`` and
  ``::cos``, which are the C library's *double* functions: each is evaluated in
  float64 and rounded to float32 only where the result is stored. A pair gives ``c``
  first and ``s`` next (ATen caches ``s`` in the generator). Each element is then
  ``z * std + mean`` in float32. An odd ``n`` ends on a ``c``: the last pair's ``s``
  is drawn and left unused, so ``n`` elements consume ``2 * ceil(n / 2)`` outputs.
  The last bit is decided by the C library's double ``log``/``sin``/``cos`` (glibc
  for the reference data). numpy's vectorised float64 functions may differ from them
  in the last bits of the double, so wherever that could move the float32 result
  (the double lies within 2**-36, relative, of a float32 rounding boundary: about 1 in
  2500 values) the value is recomputed through Python's ``math``, i.e. the C
  library itself. On glibc this is bit-exact (no differing value over 3*10**6 Caffe2
  outputs); with a C library that rounds differently from the one Caffe2 ran on, a
  value can differ by 1 float32 ulp.
* **UniformIntFill(min, max)** (int32, max inclusive): ``range = max - min + 1``; one
  ``random()`` per element; ``x = random() % range + min``. The modulo makes small
  values slightly more likely when ``range`` does not divide 2**32, as in Caffe2.
  ``torch.randint(min, max + 1, generator=torch.Generator().manual_seed(s))`` gives
  the same numbers.
* **UniqueUniformFill(min, max, avoid)**: candidates ``random() % range + min``
  (``random64() % range + min`` when the output is int64 and ``range >= 2**32``),
  drawn one at a time; a candidate already output or in ``avoid`` is rejected and
  redrawn. So the output is the first ``n`` distinct, non-avoided candidates.
"""

import math

import numpy as np

_FLOAT32_MAX = np.finfo(np.float32).max
_MARGIN = 2.0**-36
_TWO_PI = np.float32(2) * np.float32(np.pi)  # ATen: static_cast<float>(2.0) * c10::pi<float>


def reduce_seed(seed):
    """``seed mod 2**32``: the ``init_genrand`` seed Caffe2/ATen use for ``seed``."""
    return int(seed) & 0xFFFFFFFF


class Stream:
    """The 32-bit MT19937 stream of one Caffe2 operator seeded with ``seed``."""

    def __init__(self, seed):
        self._state = np.random.RandomState(reduce_seed(seed))

    def random(self, count):
        """``count`` 32-bit outputs (``CPUGeneratorImpl::random()``), as uint64."""
        # randint over the full uint32 range returns the raw outputs unchanged.
        return self._state.randint(0, 2**32, size=count, dtype=np.uint32).astype(np.uint64)

    def random64(self, count):
        """``count`` 64-bit outputs: two 32-bit outputs each, the first as the high word."""
        pairs = self.random(2 * count)
        return (pairs[0::2] << np.uint64(32)) | pairs[1::2]

    def uniform24(self, count):
        """``count`` float32 uniforms ``k * 2**-24`` from the low 24 bits of ``random()``."""
        bits = (self.random(count) & np.uint64(0xFFFFFF)).astype(np.float32)
        return bits * np.float32(2.0**-24)


def _float32_bounds(low, high, what):
    low, high = np.float32(low), np.float32(high)
    if not low < high:
        raise ValueError(
            f"{what}: Arguments `min` and `max` must be min < max after rounding to float32, "
            f"as Caffe2 needs. Received: min={float(low)!r}, max={float(high)!r}."
        )
    with np.errstate(over="ignore"):
        if not high - low <= _FLOAT32_MAX:
            raise ValueError(
                f"{what}: Arguments `min` and `max` must have max - min <= "
                f"{float(_FLOAT32_MAX)!r} in float32, as Caffe2 (ATen) needs. "
                f"Received: min={float(low)!r}, max={float(high)!r}."
            )
    return low, high


def uniform(seed, count, low, high):
    """Caffe2's ``RandUniform<float>``: UniformFill and XavierFill values (float32)."""
    low, high = _float32_bounds(low, high, "UniformFill")
    return Stream(seed).uniform24(count) * (high - low) + low


def gaussian(seed, count, mean, std):
    """Caffe2's ``RandGaussian<float>``: GaussianFill and MSRAFill values (float32)."""
    mean, std = np.float32(mean), np.float32(std)
    if not std >= 0:
        raise ValueError(
            f"GaussianFill: Argument `std` must be >= 0 (ATen: 'stdv_in must be positive'). "
            f"Received: std={std}."
        )
    pairs = (count + 1) // 2
    uniforms = Stream(seed).uniform24(2 * pairs)
    u1, u2 = uniforms[0::2], uniforms[1::2]
    # Exact in float32 too; float64 so that numpy < 2 cannot demote the log to float32.
    one_minus_u2 = 1.0 - u2.astype(np.float64)
    radius = _to_float32(
        np.sqrt(-2.0 * np.log(one_minus_u2)),
        lambda i: math.sqrt(-2.0 * math.log(one_minus_u2[i])),
    )
    theta = (_TWO_PI * u1).astype(np.float64)
    radius64 = radius.astype(np.float64)
    normals = np.empty(2 * pairs, dtype=np.float32)
    normals[0::2] = _to_float32(
        radius64 * np.cos(theta), lambda i: radius64[i] * math.cos(theta[i])
    )
    normals[1::2] = _to_float32(
        radius64 * np.sin(theta), lambda i: radius64[i] * math.sin(theta[i])
    )
    return normals[:count] * std + mean


def _to_float32(approx, exact):
    """Round float64 libm results to float32 as Caffe2 did with the C library's.

    ``approx`` comes from numpy's vectorised float64 functions, whose last bits can
    differ from the C library's (numpy may use its own SIMD code). Where a change of
    2**-36 (relative; far above any such difference) could move the float32
    rounding, the value is recomputed by ``exact(i)`` through Python's ``math``,
    which calls the C library, as Caffe2's ``::log``/``::sin``/``::cos`` did.
    """
    low = (approx * (1.0 - _MARGIN)).astype(np.float32)
    high = (approx * (1.0 + _MARGIN)).astype(np.float32)
    result = approx.astype(np.float32)
    for i in np.flatnonzero(low != high).tolist():
        result[i] = exact(i)
    return result


def _int_candidates(stream, count, low, span, wide):
    draws = stream.random64(count) if wide and span >= 2**32 else stream.random(count)
    # (val % range) + base in 64 bits, as ATen's uniform_int_from_to.
    return (draws % np.uint64(span)).astype(np.int64) + np.int64(low)


def uniform_int(seed, count, low, high):
    """Caffe2's ``RandUniform<int>``: UniformIntFill values on [low, high] (int64 array)."""
    return _int_candidates(Stream(seed), count, low, high - low + 1, wide=False)


def unique_uniform_int(seed, count, low, high, avoid=(), wide=False):
    """Caffe2's ``RandUniformUnique``: ``count`` distinct values of [low, high] not in
    ``avoid`` (int64 array). ``wide``: the output is int64 (64-bit draws for huge ranges).

    The caller checks that enough values are available.
    """
    stream = Stream(seed)
    avoid = np.asarray(avoid, dtype=np.int64).reshape(-1)
    span = high - low + 1
    candidates = np.empty(0, dtype=np.int64)
    chunk = max(2 * count, 64)
    while True:
        candidates = np.concatenate([candidates, _int_candidates(stream, chunk, low, span, wide)])
        # A value is accepted at its first occurrence in the stream unless avoided.
        values, first = np.unique(candidates, return_index=True)
        first = np.sort(first[~np.isin(values, avoid)])
        if first.size >= count:
            return candidates[first[:count]]
        chunk = 2 * candidates.size

"""A float32 master stored as its bfloat16 copy plus an int16 remainder (``master="split"``).

Bit layout. ``M`` is the float32 master, ``copy = tf.cast(M, tf.bfloat16)`` (round to nearest,
ties to even: the copy the layer computes with, bit for bit the fp32-master scope's copy) and
``W`` the copy widened back to float32 (its bits are the copy's 16 bits followed by 16 zeros).
The remainder is ``bits(M) - bits(W)`` as a signed integer, so ``bits(M) = bits(W) + remainder``
rebuilds the master. Rounding to nearest keeps that difference within ``[-0x8000, +0x8000]``
(on the magnitude, which is what float bits order; the sign bit never changes).

The one value a 16-bit remainder cannot hold. An even copy has 65537 float32 preimages (both
ties round to it), so no 16-bit code covers them all: ``M = W + 0x8000`` (the low half exactly
0x8000 above an even copy, rounded down to it) would need +0x8000, one past ``int16``'s
maximum. Such a master is stored as ``W + 0x7FFF``: **one float32 ulp toward its copy**, whose
copy is still ``cast(master)``. Every other float32 is stored exactly. With random low bits
this happens to about 1 element update in 2**17 (measured in ``benchmarks``); each one leaves
that element 1 ulp (a relative 6e-8) from where the fp32-master scope would have it.

Special values: infinities, -0.0 and subnormals are exact (integer arithmetic only). A NaN
master is stored as its copy's NaN (sign kept, payload bits below the copy's dropped).
"""

from tfinit import _backend

_FEATURE = "splitting a float32 master (master=\"split\")"

#: the largest remainder an int16 holds; a tie above an even copy is stored at this one
MAX_REMAINDER = 0x7FFF


def _widened_bits(copy):
    """The bits of ``copy`` (bfloat16) widened to float32, as int32 (exact).

    Integer operations on the copy's own bits, not ``cast(copy, float32)``: XLA may fold a
    float32 -> bfloat16 -> float32 round trip into the float32 itself ("excess precision",
    measured with TensorFlow 2.16), which would lose the rounding the remainder measures.
    """
    tf = _backend.tensorflow(_FEATURE)
    bits = tf.cast(tf.bitcast(copy, tf.uint16), tf.uint32)
    return tf.bitcast(tf.bitwise.left_shift(bits, tf.constant(16, tf.uint32)), tf.int32)


def join(copy, remainder):
    """The float32 master of a bfloat16 ``copy`` and its int16 ``remainder`` (bit-exact)."""
    tf = _backend.tensorflow(_FEATURE)
    bits = _widened_bits(copy) + tf.cast(remainder, tf.int32)
    return tf.bitcast(bits, tf.float32)


def split(master):
    """``(copy, remainder)`` of a float32 ``master``: ``copy == tf.cast(master, bfloat16)``."""
    tf = _backend.tensorflow(_FEATURE)
    master = tf.convert_to_tensor(master, tf.float32)
    copy = tf.cast(master, tf.bfloat16)
    difference = tf.bitcast(master, tf.int32) - _widened_bits(copy)
    difference = tf.minimum(difference, MAX_REMAINDER)  # the tie above an even copy
    # A NaN master's difference can be anything: int16 keeps its low bits, and the copy's
    # NaN (its fraction's top bit set) plus any of them is still a NaN of the same sign.
    return copy, tf.cast(difference, tf.int16)


def ties(master):
    """How many elements of ``master`` (float32) a split stores 1 ulp toward their copy."""
    tf = _backend.tensorflow(_FEATURE)
    master = tf.convert_to_tensor(master, tf.float32)
    difference = tf.bitcast(master, tf.int32) - _widened_bits(tf.cast(master, tf.bfloat16))
    tie = (difference > MAX_REMAINDER) & ~tf.math.is_nan(master)
    return tf.reduce_sum(tf.cast(tie, tf.int64))

"""``master="split"`` in TensorFlow: the bit layout's maths on ``tf`` tensors.

The layout is :mod:`tfinit._split_master`'s (read its docstring); JAX's maths are its sibling
:mod:`tfinit._split_master.jax`.
"""

from tfinit import _backend
from tfinit._split_master import MAX_REMAINDER

_FEATURE = "splitting a float32 master (master=\"split\")"


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

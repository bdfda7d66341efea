"""``master="split"`` in JAX: the bit layout's maths (Keras's JAX backend).

The layout is :mod:`tfinit._split_master`'s (read its docstring): the float32 master ``M`` is
its bfloat16 copy (``cast(M)``, round to nearest even) plus the int16 remainder
``bits(M) - bits(widened copy)``; the one float32 a remainder cannot hold, a tie above an
even copy, is stored 1 ulp toward its copy. Here in ``jax.numpy``: integer operations on the
copy's own bits, so XLA cannot fold a float32 -> bfloat16 -> float32 round trip.
"""

try:
    import jax.numpy as jnp
    from jax import lax
except ImportError:  # Keras's torch backend without JAX: scope refuses master="split" there
    jnp = lax = None

from tfinit._split_master import MAX_REMAINDER



def _widened_bits(copy):
    """The bits of ``copy`` (bfloat16) widened to float32, as int32 (exact)."""
    bits = lax.bitcast_convert_type(jnp.asarray(copy, jnp.bfloat16), jnp.uint16)
    return lax.bitcast_convert_type(jnp.left_shift(bits.astype(jnp.uint32), 16), jnp.int32)


def join(copy, remainder):
    """The float32 master of a bfloat16 ``copy`` and its int16 ``remainder`` (bit-exact)."""
    bits = _widened_bits(copy) + jnp.asarray(remainder, jnp.int16).astype(jnp.int32)
    return lax.bitcast_convert_type(bits, jnp.float32)


def split(master):
    """``(copy, remainder)`` of a float32 ``master``: ``copy == cast(master, bfloat16)``."""
    master = jnp.asarray(master, jnp.float32)
    copy = master.astype(jnp.bfloat16)
    difference = lax.bitcast_convert_type(master, jnp.int32) - _widened_bits(copy)
    difference = jnp.minimum(difference, MAX_REMAINDER)  # the tie above an even copy
    # A NaN's difference can be anything: int16 keeps its low bits, and the copy's NaN plus
    # any of them is still a NaN of the same sign (as on TensorFlow).
    return copy, difference.astype(jnp.int16)


def ties(master):
    """How many elements of ``master`` (float32) a split stores 1 ulp toward their copy."""
    master = jnp.asarray(master, jnp.float32)
    difference = lax.bitcast_convert_type(master, jnp.int32) - _widened_bits(
        master.astype(jnp.bfloat16))
    return int(jnp.sum((difference > MAX_REMAINDER) & ~jnp.isnan(master)))

"""``master="split"`` on Keras's JAX backend: the bit layout's maths and bfloat16 state.

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

from tfinit import _keras_internals as internals
from tfinit._split_master import MAX_REMAINDER

#: state Keras's base optimizer keeps per variable that stays fp32 whatever ``state_dtype``
#: (as on TensorFlow: tfinit.mixed_precision._variable.FP32_STATE)
FP32_STATE = ("average", "gradient_accumulator")


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


def keep_state_in(optimizer, dtype, masters):
    """Make ``optimizer`` (an inner optimizer, this object only) store the per-variable state
    it makes for the variables in ``masters`` in ``dtype``; EMA averages and gradient
    accumulators stay float32.

    Keras's ``add_variable_from_reference`` gives a slot its reference variable's dtype; here
    it asks ``add_variable`` for ``dtype`` instead (both the optimizer's own methods).
    """
    masters = {id(v) for v in masters}
    make = optimizer.add_variable_from_reference
    add = optimizer.add_variable

    def add_in_state_dtype(*args, **kwargs):
        kwargs["dtype"] = dtype
        return add(*args, **kwargs)

    def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
        if id(reference_variable) not in masters or name in FP32_STATE:
            return make(reference_variable, name=name, initializer=initializer)
        internals.set_object_method(optimizer, "add_variable", add_in_state_dtype)
        try:
            return make(reference_variable, name=name, initializer=initializer)
        finally:
            internals.unset_object_method(optimizer, "add_variable")

    internals.set_object_method(optimizer, "add_variable_from_reference",
                                add_variable_from_reference)

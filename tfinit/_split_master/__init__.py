"""A float32 master stored as its bfloat16 copy plus an int16 remainder (``master="split"``).

The layout, one rule for every backend; its maths in TensorFlow (:mod:`.tensorflow`) and in
JAX (:mod:`.jax`, for Keras's JAX backend) are sibling modules.

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

#: the largest remainder an int16 holds; a tie above an even copy is stored at this one
MAX_REMAINDER = 0x7FFF

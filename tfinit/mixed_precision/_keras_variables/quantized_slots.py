"""``state_dtype="int8"`` on Keras's JAX and torch backends: the slot the inner optimizer
updates, a ``keras.Variable`` without a value of its own whose reads dequantize its codes and
scales (optimizer variables, so ``fit``'s compiled JAX step carries them as state and a
``StatelessScope`` gives their values of the step) and whose writes requantize into them.
"""

import keras

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision._common import quantized_state
from tfinit.mixed_precision._common.optimizer_core import FP32_STATE


class QuantizedSlot(quantized_state.QuantizedSlotRules, keras.Variable):
    """A quantized slot (see :mod:`tfinit.mixed_precision._common.quantized_state`): every
    read of ``value`` (Keras's conversions, ``__jax_array__``, torch's functions) dequantizes."""

    @property
    def value(self):
        return self.dequantized()


def make_slot(reference, name, codes, scales, levels):
    """The :class:`QuantizedSlot` of ``reference``'s shape over ``codes`` and ``scales``."""
    slot = QuantizedSlot(initializer="zeros", shape=tuple(reference.shape), dtype=MASTER_DTYPE,
                         trainable=False, name=name)
    internals.release_value(slot)  # its value is codes and scales'
    slot._quantized(codes, scales, levels)
    return slot


def keep_state_quantized(optimizer, masters):
    """Make ``optimizer`` store its slots of ``masters`` as int8 codes and scales."""
    ids = {id(v) for v in masters}
    quantized_state.install(optimizer, lambda v: id(v) in ids, make_slot, FP32_STATE)

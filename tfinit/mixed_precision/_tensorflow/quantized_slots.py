"""``state_dtype="int8"`` on TensorFlow: the slot the inner optimizer updates, a Keras
variable whose reads dequantize its codes and scales (the optimizer's own variables, what
checkpoints and files store) and whose writes requantize into them. It holds an empty
``tf.Variable`` of its own and writes nothing to a checkpoint.
"""

import keras
import tensorflow as tf

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision._common import quantized_state
from tfinit.mixed_precision._common.optimizer_core import FP32_STATE


class QuantizedSlot(internals.WrittenElsewhere, quantized_state.QuantizedSlotRules,
                    keras.Variable):
    """A quantized slot (see :mod:`tfinit.mixed_precision._common.quantized_state`).

    Keras's TensorFlow optimizer writes a slot through ``slot.value`` (the ``tf.Variable`` it
    expects there): here the slot itself, whose ``assign*`` requantize; TensorFlow reads it
    through ``__tf_tensor__``, the dequantized tensor."""

    @property
    def value(self):
        return self

    def __tf_tensor__(self, dtype=None, name=None):
        return tf.convert_to_tensor(self.dequantized(), dtype=dtype, name=name)


def make_slot(reference, name, codes, scales, levels):
    """The :class:`QuantizedSlot` of ``reference``'s shape over ``codes`` and ``scales``."""
    with tf.init_scope():
        empty = tf.Variable(tf.zeros([0], MASTER_DTYPE), trainable=False, name=name)

        def existing(next_creator, **_):
            return empty

        with tf.variable_creator_scope(existing):
            slot = QuantizedSlot(initializer="zeros", shape=tuple(reference.shape),
                                 dtype=MASTER_DTYPE, trainable=False, name=name)
    slot._quantized(codes, scales, levels)
    return slot


def keep_state_quantized(optimizer, is_master):
    """Make ``optimizer`` store its slots of the variables ``is_master`` accepts as int8
    codes and scales."""
    quantized_state.install(optimizer, is_master, make_slot, FP32_STATE)

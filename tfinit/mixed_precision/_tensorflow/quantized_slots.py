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

    def _quantize(self, value):
        # XLA fuses its ~20 element-wise passes into one (4x faster on CPU than graph mode)
        return _XLA_QUANTIZE[self._levels is quantized_state.SIGNED](value)

    def _dequantize(self):
        return _XLA_DEQUANTIZE[self._levels is quantized_state.SIGNED](
            tf.convert_to_tensor(self._codes.value), tf.convert_to_tensor(self._scales.value),
            tuple(self.shape))  # values, not the variables: no function holds them


def _compiled_quantize(levels):
    return tf.function(lambda value: quantized_state.quantize(value, levels), jit_compile=True)


def _compiled_dequantize(levels):
    return tf.function(lambda codes, scales, shape: quantized_state.dequantize(
        codes, scales, levels, shape), jit_compile=True)


_XLA_QUANTIZE = {True: _compiled_quantize(quantized_state.SIGNED),
                 False: _compiled_quantize(quantized_state.UNSIGNED)}
_XLA_DEQUANTIZE = {True: _compiled_dequantize(quantized_state.SIGNED),
                   False: _compiled_dequantize(quantized_state.UNSIGNED)}


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
    codes and scales; ValueError under a ``tf.distribute`` strategy of several replicas (each
    replica's step would share one slot's step value)."""
    strategy = (tf.distribute.get_strategy() if tf.distribute.has_strategy()
                else internals.optimizer_strategy(optimizer))
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        raise ValueError(
            "MasterWeightOptimizer: Argument `state_dtype='int8'` does not combine with a "
            f"tf.distribute strategy of several replicas ({type(strategy).__name__}, "
            f"{strategy.num_replicas_in_sync} replicas): the replicas' steps would share the "
            "dequantized moments. Use state_dtype='bfloat16' (or None) there, or train on "
            "one replica.")
    quantized_state.install(optimizer, is_master, make_slot, FP32_STATE)

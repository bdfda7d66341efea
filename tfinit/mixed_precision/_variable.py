"""``PairedVariable``: the Keras variable of a pair, with master-aware writes.

Reads are Keras's own: ``numpy()``, ``np.asarray``, ``keras.ops.convert_to_numpy``,
``tf.convert_to_tensor``, ``value`` and ``get_weights`` give the variable's own dtype and
value (16-bit in pseudo_fp16, fp32 in reverse). Writes reach the master:

- an fp32 (or wider) value sets the master exactly and re-casts the copy;
- in pseudo_fp16, a 16-bit value leaves the master of every element whose 16-bit value it
  does not change (so ``set_weights(get_weights())`` is lossless) and sets the others to
  the exact widening of the new value;
- ``assign_add``/``assign_sub`` add to the master in fp32.

Reads inside a layer call: in reverse mode, under Keras's autocast, the cached 16-bit copy
instead of a cast of the fp32 variable on every read (the gradient reaches the fp32
variable); in pseudo_fp16, the 16-bit variable whose gradient comes back in fp32, so a
weight read many times has its contributions summed in fp32, as Keras's own cast does.
"""

import keras
import numpy as np
import tensorflow as tf

from tfinit import _keras_internals as internals
from tfinit.mixed_precision import _pairs


class PairedVariable(internals.HookedKerasVariable):
    """A Keras variable with an fp32 master (see the module docstring)."""

    def layer_read(self, tf_var, autocast_dtype):
        pair = _pairs.pair_of(self)
        if pair is None:
            return None
        if pair.spec.is_pseudo:
            # The 16-bit variable itself, but each read's gradient comes back in fp32, so
            # autodiff sums a shared weight's contributions in fp32, as Keras's cast does.
            return _read(tf_var, tf_var, tf.float32)
        if autocast_dtype is None or tf.as_dtype(autocast_dtype) != pair.copy.dtype:
            return None
        if internals.in_saved_model_save():
            # tf.saved_model.save traces its signatures here: Keras's cast, no copy capture.
            return None
        return _read(tf_var, pair.copy, tf_var.dtype)

    def assign(self, value):
        pair = _pairs.pair_of(self)
        value = _as_tensor(value)
        if not value.shape.is_compatible_with(self.shape):
            raise ValueError(
                f"Cannot assign a value of shape {value.shape} to variable {self.path!r} "
                f"of shape {self.shape}."
            )
        master = pair.master
        if pair.spec.is_pseudo and value.dtype == pair.copy.dtype:
            unchanged = tf.equal(value, pair.copy.read_value())
            master.assign(tf.where(unchanged, master.read_value(), tf.cast(value, tf.float32)))
        else:
            master.assign(tf.cast(value, tf.float32))
        _pairs.refresh([pair])
        return self.value

    def assign_add(self, value):
        return self._add_to_master(value, 1.0)

    def assign_sub(self, value):
        return self._add_to_master(value, -1.0)

    def _add_to_master(self, value, sign):
        pair = _pairs.pair_of(self)
        pair.master.assign_add(sign * tf.cast(_as_tensor(value), tf.float32))
        _pairs.refresh([pair])
        return self.value


def _read(param, source, grad_dtype):
    """``source``'s value, with the gradient routed to ``param`` and cast to ``grad_dtype``."""

    @tf.custom_gradient
    def read(param_value):
        def grad(upstream, variables=None):
            cast = tf.cast(upstream, grad_dtype)
            return (cast, [None] * len(variables)) if variables else cast

        if source is param:
            value = param_value
        elif hasattr(source, "read_value"):
            value = source.read_value()
        else:
            value = tf.convert_to_tensor(source)
        return tf.identity(value), grad

    return read(tf.convert_to_tensor(param))


def _as_tensor(value):
    if isinstance(value, (tf.Tensor, tf.Variable, keras.Variable)):
        return tf.convert_to_tensor(value)
    return tf.convert_to_tensor(np.asarray(value))


def adopt(keras_var):
    """Make a Keras variable created in the scope a ``PairedVariable`` (that object only)."""
    internals.make_instance_of(keras_var, PairedVariable)

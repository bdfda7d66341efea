"""Checkpoint and weight-file hooks: what is saved for a paired variable is its fp32 master.

- ``tf.train.Checkpoint`` (Keras models, ``tf.Module``s, raw variables): the paired
  ``tf.Variable`` serializes its *master* (fp32) under its own key and, on restore,
  assigns the master and re-casts the copy. So the usual
  ``tf.train.Checkpoint(module=m).write/restore`` is the way to checkpoint masters of raw
  ``tf.Module`` code, and an fp32 checkpoint of the same architecture restores exactly
  into a pseudo_fp16 model (fine-tuning).
- Keras ``.weights.h5`` / ``.keras``: Keras stores ``np.asarray(variable)`` and loads with
  ``variable.assign(value)``. A paired Keras variable converts to numpy as its master
  (fp32) and ``assign`` sets the master exactly, then re-casts the copy. ``.numpy()`` still
  returns the value the code computes with.
"""

import keras
import numpy as np
import tensorflow as tf
from keras.src.backend.common import global_state
from keras.src.backend.common.variables import get_autocast_scope

from tfinit.mixed_precision import _pairs


def install(tf_var, info):
    """Attach ``info`` to the paired ``tf_var`` and hook its checkpoint serialization."""
    tf_var._tfinit_info = info
    original_restore = type(tf_var)._restore_from_tensors

    if _pairs.is_pseudo(info):

        def _serialize_to_tensors():
            return _pairs.master_of(info)._serialize_to_tensors()

        def _restore_from_tensors(restored_tensors):
            master = _pairs.master_of(info)
            op = master._restore_from_tensors(restored_tensors)
            with tf.control_dependencies(_deps(op)):
                return _pairs._assign_cast(_pairs.copy_of(info), master.read_value())

        tf_var._serialize_to_tensors = _serialize_to_tensors
    else:

        def _restore_from_tensors(restored_tensors):
            op = original_restore(tf_var, restored_tensors)
            with tf.control_dependencies(_deps(op)):
                return _pairs._assign_cast(_pairs.copy_of(info), tf_var.read_value())

    tf_var._restore_from_tensors = _restore_from_tensors


def _deps(op):
    return [] if op is None or tf.executing_eagerly() else tf.nest.flatten(op)


class PairedVariable(keras.Variable):
    """A Keras variable with an fp32 master: assigns go to the master, numpy is the master.

    In reverse mode, a read under Keras's autocast (a layer call with a mixed policy)
    returns the cached 16-bit copy instead of casting the fp32 variable on every read;
    the gradient still reaches the fp32 variable (cast to fp32, as Keras's cast does).
    """

    def _maybe_autocast(self, value):
        info = _pairs.lookup(self)
        if info is None or not self._autocast or value is not self._value:
            return super()._maybe_autocast(value)
        if _pairs.is_pseudo(info):
            # In a layer call: the 16-bit variable's own value, but each read's gradient
            # comes back in fp32, so autodiff sums a shared weight's contributions in fp32
            # (as Keras does). Elsewhere (e.g. the tape's ``handle``) the plain variable.
            if global_state.get_global_attribute("current_call_ctx") is None:
                return super()._maybe_autocast(value)
            return _read_copy(value, None, tf.float32)
        scope = get_autocast_scope()
        copy = _pairs.copy_of(info)
        if scope is not None and scope.dtype and tf.as_dtype(scope.dtype) == copy.dtype:
            return _read_copy(value, copy)
        return super()._maybe_autocast(value)

    def assign(self, value):
        info = _pairs.lookup(self)
        value = _as_tensor(value)
        if not value.shape.is_compatible_with(self.shape):
            raise ValueError(
                f"Cannot assign a value of shape {value.shape} to variable {self.path!r} "
                f"of shape {self.shape}."
            )
        master = _pairs.master_of(info)
        master.assign(tf.cast(value, tf.float32))
        _pairs.refresh([info])
        return value

    def assign_add(self, value):
        return self._update(value, 1.0)

    def assign_sub(self, value):
        return self._update(value, -1.0)

    def _update(self, value, sign):
        info = _pairs.lookup(self)
        master = _pairs.master_of(info)
        master.assign_add(sign * tf.cast(_as_tensor(value), tf.float32))
        _pairs.refresh([info])
        return master

    def __array__(self, dtype=None):
        master = np.asarray(_pairs.master_of(_pairs.lookup(self)).numpy())
        return master if dtype is None else master.astype(dtype)

    def __tf_tracing_type__(self, context):
        # Without this, tf.function would type the argument from __array__ (the fp32
        # master) and then refuse the 16-bit value: trace it as the variable it is.
        return tf.TensorSpec(self.shape, self.dtype)


def _read_copy(param, copy, grad_dtype=None):
    """The copy's value (``param``'s own with ``copy`` None), with the gradient routed to
    ``param`` cast to ``grad_dtype`` (default: ``param``'s dtype)."""

    @tf.custom_gradient
    def read(param_value):
        def grad(upstream, variables=None):
            cast = tf.cast(upstream, grad_dtype or param_value.dtype)
            return (cast, [None] * len(variables)) if variables else cast

        if copy is None:
            return tf.identity(param_value), grad
        return tf.identity(copy.read_value() if hasattr(copy, "read_value")
                           else tf.convert_to_tensor(copy)), grad

    return read(tf.convert_to_tensor(param))


def _as_tensor(value):
    if isinstance(value, (tf.Tensor, tf.Variable, keras.Variable)):
        return tf.convert_to_tensor(value)
    array = np.asarray(value)
    return tf.convert_to_tensor(array)


def adopt(keras_var):
    """Make a Keras variable created in the scope a ``PairedVariable``."""
    if type(keras_var) is keras.Variable:
        keras_var.__class__ = PairedVariable

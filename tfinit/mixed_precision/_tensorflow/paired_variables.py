"""The Keras variables of a pair: ``PairedVariable`` (what layers hold) and ``MasterVariable``
(what the optimizer inside ``MasterWeightOptimizer`` updates).

The rule: a layer *computes* with the 16-bit copy; everything that *stores, regularizes,
constrains, decays or optimizes* a weight uses the fp32 master, as Keras's mixed policies do.

``PairedVariable`` reads are Keras's own: ``numpy()``, ``np.asarray``,
``keras.ops.convert_to_numpy``, ``tf.convert_to_tensor``, ``value`` and ``get_weights`` give the
variable's own dtype and value (16-bit in pseudo_fp16, fp32 in reverse). Beyond that:

- writes reach the master: an fp32 (or wider) value sets the master exactly and re-casts the
  copy; in pseudo_fp16 a 16-bit value leaves the master of every element whose 16-bit value it
  does not change (so ``set_weights(get_weights())`` is lossless) and sets the others to the
  exact widening; ``assign_add``/``assign_sub`` add to the master in fp32;
- reads inside a layer call: a read Keras mixed makes uncast in float32 (a layer that does
  not autocast, such as an ``Embedding``, called inside another layer: its gather, a tied
  projection) gives the fp32 master's value; otherwise in pseudo_fp16 the 16-bit variable,
  whose gradient comes back in fp32 (so a weight read many times has its contributions
  summed in fp32, as Keras's cast does); inside a ``tf.while_loop`` or ``tf.cond`` body
  (recurrent layers) the read is made outside the body in fp32 and cast inside it, so the
  loop accumulates the gradient in fp32, as Keras's cast of an fp32 variable does. In
  reverse, under Keras's autocast, the cached 16-bit copy instead of a cast on every read
  (the gradient reaches the fp32 variable);
- ``regularizer``: the penalty is computed on the fp32 master (its gradient reaches the
  variable in fp32), as Keras's mixed policies compute it on the fp32 variable;
- ``overwrite_with_gradient``: read by every Keras optimizer before it touches a variable; a
  paired variable refuses it, because a plain optimizer would update the variable without
  its master (pseudo_fp16) or behind its cached copy (reverse). ``MasterWeightOptimizer``
  gives its optimizer the ``MasterVariable`` instead.
"""

import keras
import numpy as np
import tensorflow as tf

from tfinit import _keras_internals as internals
from tfinit.mixed_precision._common import pair_kinds
from tfinit.mixed_precision._tensorflow import pair_records
from tfinit.mixed_precision._common import scope_stack
from tfinit.parameter_info import without_output_index


class PairedVariable(pair_kinds.PairedVariableRules, internals.HookedKerasVariable):
    """A Keras variable with an fp32 master (see the module docstring)."""

    def pair(self):
        return pair_records.pair_of(self)

    def penalty_on_master(self, penalty):
        return MasterPenalty(penalty, self)

    def refuses_plain_optimizer(self, pair):
        return True  # reverse too: a plain optimizer's write would pass its cached copy by

    def layer_read(self, tf_var, autocast_dtype):
        pair = pair_records.pair_of(self)
        if pair is None:
            return None
        scope_stack.note_read(pair.spec.compute_dtype)
        if pair.computes_with_copy:
            outer = internals.control_flow_outer_graph()
            if outer is None:
                if pair.reads_wide():
                    # Keras mixed reads such a layer's fp32 variable uncast: the master's
                    # value (a tied projection's logits use its low bits), its gradient
                    # summed in fp32 and given to the copy. A SavedModel holds the variable,
                    # not its master: there, the variable's exact widening.
                    wide = (tf.cast(tf_var, tf.float32) if internals.in_saved_model_save()
                            else pair.master_value())
                    return _read(tf_var, wide, tf.float32)
                # The 16-bit variable itself; each read's gradient comes back in fp32.
                return _read(tf_var, None, tf.float32)
            # A gradient in fp32 for a 16-bit variable cannot meet the loop's 16-bit
            # accumulator: read the exact fp32 widening outside the body, cast it inside.
            with outer.as_default():
                wide = _read(tf_var, tf.cast(tf_var, tf.float32), tf.float32)
            return tf.cast(wide, tf_var.dtype)
        if autocast_dtype is None or tf.as_dtype(autocast_dtype) != pair.copy.dtype:
            return None
        if internals.in_saved_model_save():
            # tf.saved_model.save traces its signatures here: Keras's cast, no copy capture.
            return None
        return _read(tf_var, pair.copy.read_value(), tf_var.dtype)

    # -- writes -----------------------------------------------------------------------
    def assign(self, value):
        pair = pair_records.pair_of(self)
        value = _as_tensor(value)
        if not value.shape.is_compatible_with(self.shape):
            raise ValueError(
                f"Cannot assign a value of shape {value.shape} to variable {self.path!r} "
                f"of shape {self.shape}."
            )
        if pair.computes_with_copy and value.dtype == pair.copy.dtype:
            unchanged = tf.equal(value, pair.copy.read_value())
            pair.assign_master(tf.where(unchanged, pair.master_value(),
                                        tf.cast(value, tf.float32)))
        else:
            pair.assign_master(value)
        return self.value

    def assign_add(self, value):
        return self._add_to_master(value, 1.0)

    def assign_sub(self, value):
        return self._add_to_master(value, -1.0)

    def _add_to_master(self, value, sign):
        pair_records.pair_of(self).add_to_master(sign * tf.cast(_as_tensor(value), tf.float32))
        return self.value


class MasterVariable(internals.WrittenElsewhere, keras.Variable):
    """The fp32 master of a pair as the Keras variable an optimizer updates.

    It wraps the master ``tf.Variable`` itself (no second buffer) and answers for the paired
    variable everywhere an optimizer keys or routes by it: ``name`` and ``path`` are the paired
    variable's (so ``MultiOptimizer`` routes, ``Muon``'s exclusions and weight-decay name
    patterns match as under Keras's mixed policies), and its ``constraint`` and
    ``overwrite_with_gradient`` are the paired variable's.

    It writes nothing to a ``tf.train.Checkpoint``: the master is written once, under the
    paired variable (the model's, and the optimizer's list of the variables it trains). The
    inner optimizer lists its ``MasterVariable`` objects, made at its build; a checkpoint
    restored before that build (deferred) could not bind values to them, and TensorFlow's
    restore status would report them unmatched (Keras's ``LossScaleOptimizer`` lists the
    model's own variables there).
    """

    def __init__(self, paired, master, shape=None, **kwargs):
        self._paired = paired
        #: while the inner optimizer makes this variable's state in another dtype
        self._state_dtype = None

        def existing(next_creator, **_):
            return master

        with tf.variable_creator_scope(existing):
            super().__init__(initializer="zeros", shape=master.shape if shape is None else shape,
                             dtype="float32",
                             trainable=True, autocast=False, name=_short_name(paired),
                             **kwargs)

    @property
    def path(self):
        return getattr(self._paired, "path", None) or self.name

    @property
    def dtype(self):
        return self._state_dtype or keras.Variable.dtype.fget(self)

    @property
    def constraint(self):
        return getattr(self._paired, "constraint", None)

    @constraint.setter
    def constraint(self, value):
        if value is not None:
            raise ValueError("Set the constraint on the layer's variable, not on its master.")

    @property
    def overwrite_with_gradient(self):
        if isinstance(self._paired, keras.Variable):
            return keras.Variable.overwrite_with_gradient.fget(self._paired)
        return False

    @overwrite_with_gradient.setter
    def overwrite_with_gradient(self, value):
        if value:
            raise ValueError("Set overwrite_with_gradient on the layer's variable.")


def master_variable(pair):
    """The :class:`MasterVariable` of ``pair`` (made once, on first use).

    An fp32-master pair's wraps its master. A split pair has no fp32 variable: its
    ``MasterVariable`` wraps a *scratch* fp32 variable of the pair's rank that holds an empty
    tensor between steps; ``MasterWeightOptimizer`` fills it with the exact master
    before the inner optimizer's step and splits it back and empties it after
    (``pair_records.open_masters`` / ``close_masters``).
    """
    if pair.master_variable is None:
        with tf.init_scope():
            pair.master_variable = MasterVariable(pair.param, pair.optimized_variable(),
                                                  shape=pair.copy.shape)
    return pair.master_variable


def _short_name(variable):
    return without_output_index(getattr(variable, "name", None) or "Variable").split("/")[-1]


class MasterPenalty:
    """A layer's regularizer applied to the fp32 master of a pseudo_fp16 variable."""

    def __init__(self, penalty, variable):
        self.penalty = penalty
        self.variable = variable

    def __call__(self, x):
        pair = pair_records.pair_of(self.variable)
        if x is self.variable and pair is not None:
            tf_var = pair_records.backend_variable(self.variable)
            x = _read(tf_var, pair.master_value(), tf.float32)
        return self.penalty(x)

    def get_config(self):
        return self.penalty.get_config()


def _read(param, value, grad_dtype):
    """``value`` (``param``'s own value when None) in the forward pass; its gradient goes to
    ``param``, cast to ``grad_dtype``."""
    param_value = tf.convert_to_tensor(param)

    @tf.custom_gradient
    def read(param_value, value):
        def grad(upstream):
            return tf.cast(upstream, grad_dtype), None

        return value, grad  # tf.custom_gradient adds the identity that carries the gradient

    return read(param_value, param_value if value is None else value)


def _as_tensor(value):
    if isinstance(value, (tf.Tensor, tf.Variable, keras.Variable)):
        return tf.convert_to_tensor(value)
    return tf.convert_to_tensor(np.asarray(value))


def adopt(keras_var):
    """Make a Keras variable created in the scope a ``PairedVariable`` (that object only)."""
    internals.make_instance_of(keras_var, PairedVariable)

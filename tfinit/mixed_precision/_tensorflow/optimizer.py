"""``MasterWeightOptimizer``'s step on Keras's TensorFlow backend (``BackendOptimizer``):
the masters are ``MasterVariable`` objects the inner optimizer updates in place, in a replica
context of tf.distribute; gradients may be ``IndexedSlices``; a step with a non-finite
gradient on any replica is skipped on all (one ``all_reduce`` of a flag, or a ``merge_call``
where the strategy needs one).
"""

import keras
import tensorflow as tf
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import COMPUTE_DTYPES
from tfinit.mixed_precision._common.optimizer_core import (FP32_STATE,
                                                        MasterWeightOptimizerBase,
                                                        shard_over_refused)
from tfinit.mixed_precision._tensorflow import pair_records, paired_variables, quantized_slots


def _map_values(grad, fn):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
    return fn(grad)


def _values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


class BackendOptimizer(MasterWeightOptimizerBase):
    """``MasterWeightOptimizer`` on TensorFlow: its pairs, its step (see the module)."""

    _STATE_AGGREGATION = "only_first_replica"  # the scale is shared by every replica

    # -- the pairs, on TensorFlow ------------------------------------------------------
    def _pair_of(self, variable):
        return pair_records.pair_of(variable)

    def _master_of(self, pair):
        return paired_variables.master_variable(pair)

    def _own_dtype(self, variable):
        return pair_records.backend_variable(variable).dtype

    def _open_masters(self, pairs):
        if internals.in_xla_compilation():
            pair_records.keep_scratches(pairs)
        pair_records.open_masters(pairs)

    def _close_masters(self, pairs):
        pair_records.close_masters(pairs, self._rounding_state(pairs))

    def _keep_state_in(self, dtype, pairs):
        if dtype == "int8":
            return quantized_slots.keep_state_quantized(
                self.inner_optimizer,
                lambda v: isinstance(v, paired_variables.MasterVariable))
        keep_state_in(self.inner_optimizer, dtype)

    def _check_shard_over(self, shard_over):
        # ZeRO-1 over a keras.distribution mesh axis is JAX's; tf.distribute keeps whole
        # masters and state on every replica.
        raise shard_over_refused(shard_over, "tensorflow")

    # -- the step ---------------------------------------------------------------------
    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            if not self.built:
                raise ValueError("MasterWeightOptimizer.apply without variables needs a "
                                 "built optimizer: call build(variables) first.")
            trainable_variables = internals.optimizer_built_variables(self)
        grads, trainable_variables = list(grads), list(trainable_variables)
        if not grads:
            return
        self._check_one_each("apply", "grads", grads, trainable_variables,
                             "trainable variable")
        if not self.built:
            with tf.init_scope(), keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        targets, pairs = self._update_targets(trainable_variables)
        self._check_strategy(trainable_variables, targets)
        grads = self._unscale(grads, targets)
        if tf.distribute.in_cross_replica_context() and tf.distribute.has_strategy():
            raise ValueError("MasterWeightOptimizer.apply must be called in a replica context "
                             "(inside strategy.run).")
        if self._resolve_scaling() is None:
            # No loss scaling, no skipped steps: as a plain Keras optimizer (mixed_bfloat16).
            self._finite_step(grads, targets, pairs)
        elif internals.strategy_supports_no_merge_call():
            finite = self._all_replicas_finite(grads)
            ops.cond(finite, lambda: self._finite_step(grads, targets, pairs),
                     self._skip_step)
        else:
            def cross_replica(distribution, grads, targets):
                per_replica = distribution.extended.call_for_each_replica(
                    self._check_finite, args=(grads,))
                finite = tf.reduce_all(tf.stack(
                    distribution.experimental_local_results(per_replica)))

                def finite_fn():
                    distribution.extended.call_for_each_replica(
                        self._finite_step, args=(grads, targets, pairs))

                ops.cond(finite, finite_fn, self._skip_step)

            tf.distribute.get_replica_context().merge_call(cross_replica, args=(grads, targets))

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        raise NotImplementedError(
            "MasterWeightOptimizer updates its variables in place (TensorFlow backend); it "
            "has no stateless form."
        )

    def _check_strategy(self, variables, targets):
        """Refuse variables that the training strategy did not create (no silent divergence).

        The training strategy is the active one, else the one this optimizer was created in.
        """
        if tf.distribute.has_strategy():
            strategy = tf.distribute.get_strategy()
        else:
            strategy = internals.optimizer_strategy(self.inner_optimizer)
            if strategy is None or strategy is tf.distribute.get_strategy():
                return
        for variable, target in zip(variables, targets, strict=True):
            held = pair_records.backend_variable(target)
            if not strategy.extended.variable_created_in_scope(held):
                name = getattr(variable, "path", None) or variable.name
                raise ValueError(
                    f"MasterWeightOptimizer: variable {name!r} was not created under the "
                    f"{type(strategy).__name__} that is training it, so its replicas would "
                    "not stay in sync. Build the model (and the optimizer) inside "
                    "`with strategy.scope(), tfinit.mixed_precision.scope(...):`."
                )

    def _unscale(self, grads, targets):
        scaling = self._resolve_scaling()
        scale = None if scaling is None else ops.convert_to_tensor(self.dynamic_scale)
        out = []
        for grad, target in zip(grads, targets, strict=True):
            if grad is not None:
                grad = _map_values(grad, lambda g: tf.cast(g, tf.float32)
                                   if g.dtype.name in COMPUTE_DTYPES else g)
                # As Keras's LossScaleOptimizer: a variable overwritten with its gradient
                # (float8 scales) takes the gradient as it is.
                if scale is not None and not getattr(target, "overwrite_with_gradient", False):
                    grad = _map_values(grad, lambda g: g / tf.cast(scale, g.dtype))
            out.append(grad)
        return out

    def _check_finite(self, grads):
        """Whether every element of every gradient is finite (a scalar bool tensor).

        Fast path: one read-only sum per gradient. A NaN or infinite element makes the
        total NaN or infinite, so a finite total proves every element finite. Only when
        the total is not finite (a non-finite element, or finite elements summing past
        the float32 range) does the exact per-element check run.
        """
        values = [_values(g) for g in grads if g is not None]
        if not values:
            return tf.constant(True)
        total = tf.add_n([tf.reduce_sum(tf.cast(v, tf.float32)) for v in values])

        def per_element():
            return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in values]))

        return tf.cond(tf.math.is_finite(total), lambda: tf.constant(True), per_element)

    def _all_replicas_finite(self, grads):
        finite = self._check_finite(grads)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            bad = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(~finite, tf.float32))
            finite = tf.equal(bad, 0.0)
        return finite

    def _finite_step(self, grads, targets, pairs):
        self._open_masters(pairs)
        self.inner_optimizer.apply(grads, targets)
        self._close_masters(pairs)
        self._count_finite_step()


def keep_state_in(optimizer, dtype):
    """Make ``optimizer`` (an inner optimizer, this object only) store the state it makes for
    a ``MasterVariable`` in ``dtype``; EMA averages and gradient accumulators excepted."""
    make = optimizer.add_variable_from_reference

    def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
        if (not isinstance(reference_variable, paired_variables.MasterVariable)
                or name in FP32_STATE):
            return make(reference_variable, name=name, initializer=initializer)
        reference_variable._state_dtype = dtype
        try:
            return make(reference_variable, name=name, initializer=initializer)
        finally:
            reference_variable._state_dtype = None

    internals.set_object_method(optimizer, "add_variable_from_reference",
                                add_variable_from_reference)

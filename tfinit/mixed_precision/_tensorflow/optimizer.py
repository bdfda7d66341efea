"""MasterWeightOptimizer: a Keras optimizer wrapper that updates fp32 masters.

Per step (Caffe2's MultiPrecisionSgd generalised to any Keras optimizer): gradients of
paired variables are cast to fp32 and unscaled, the inner optimizer updates the fp32
masters (so its slots are fp32), and the 16-bit copies are re-cast from the masters.
The inner optimizer sees each master as a Keras variable with the paired variable's name,
path and constraint, so everything it keys or routes by variable (weight-decay exclusions,
EMA, gradient accumulation, ``MultiOptimizer`` paths, Muon's and Adafactor's state) works
as under Keras's mixed policies.

Loss scaling (``loss_scale``), in the style of jmp's ``DynamicLossScale``. Dynamic scaling
keeps the largest scale under which the float16 gradients stay finite: it doubles the scale
after 2000 consecutive finite steps and, on a step with a non-finite gradient, skips the step
and halves the scale (Keras's ``LossScaleOptimizer`` constants; no lower or upper bound)::

    scale = 2.0**15                   # dynamic; a number: that fixed scale; None: no scaling
    counter = 0
    for step in steps:
        grads = grad(scale * loss)                  # opt.scale_loss(loss) inside the tape
        grads = [float32(g) / scale for g in grads] # overwrite_with_gradient ones: not divided
        if all_finite(grads) on every replica:      # a sum per gradient, exact check if not
            inner.apply(grads, masters); copies = cast(masters)
            if dynamic:
                counter += 1
                if counter == 2000:
                    scale, counter = 2 * scale, 0
        else:                                       # skipped on all replicas: masters,
            if dynamic:                             # copies, slots and iterations unchanged
                scale, counter = scale / 2, 0

- ``"auto"`` (the default): ``"dynamic"`` when the model computes in float16, ``None`` when
  it computes in bfloat16 (bfloat16 has float32's exponent range, as Keras's
  ``mixed_bfloat16`` assumes). Decided once: in the constructor inside a scope, else at the
  first ``scale_loss`` or step, from the pairs the optimizer is built for, else the active
  scope, else the compute dtype of the model compiled with it (a Keras ``mixed_float16``
  model without a tfinit scope: dynamic, as Keras's own ``compile`` would wrap its optimizer
  in a ``LossScaleOptimizer``), else the paired variable a layer read last, else the scopes
  the process entered
  (float16 among them: dynamic; no 16-bit variable at all: no scaling).
- ``None``: no scaling and no finiteness check: every step is applied, as a plain Keras
  optimizer does (``mixed_bfloat16``).
"""

import keras
import tensorflow as tf
from keras import ops

from tfinit import _backend
from tfinit import _keras_internals as internals
from tfinit._precision import COMPUTE_DTYPES
from tfinit.mixed_precision._common.optimizer_core import (AUTO, FP32_STATE,
                                                        MasterWeightOptimizerBase)
from tfinit.mixed_precision._tensorflow import pair_records, paired_variables, quantized_slots


def _map_values(grad, fn):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
    return fn(grad)


def _values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


@keras.saving.register_keras_serializable(package="tfinit")
class MasterWeightOptimizer(MasterWeightOptimizerBase):
    """Wrap a Keras 3 optimizer so it updates the fp32 masters of paired variables.

    Caffe2's MultiPrecisionSgd, for any Keras optimizer: each step casts the gradients of
    paired variables to fp32 and unscales them, the inner optimizer updates the fp32 masters
    (its slots are fp32), and the 16-bit copies are re-cast from the masters. It is a
    ``keras.optimizers.LossScaleOptimizer`` (it does the loss scaling), so ``Model.compile``
    never wraps it in a second one, whatever the model's dtype policy; ``compile`` on a model
    constructed in a scope wraps a plain optimizer in it. Variables without a master (fp32
    variables, normalization layers) are updated by the inner optimizer directly; a 16-bit
    variable without a master is an error. The loss-scale algorithm is in this module's
    docstring.

    Its shape: a subclass of ``LossScaleOptimizer`` (through the base class that Keras's JAX
    and torch backends' ``MasterWeightOptimizer`` shares: arguments, config, loss-scale rules)
    that reuses the parent's constructor, ``variables``, ``learning_rate`` and
    ``iterations``; it replaces ``build`` and ``apply`` (and has no stateless form), because
    its inner optimizer is built for and updates the masters, not the variables it is handed.

    Args:
        optimizer: the Keras 3 optimizer that updates the masters (its slots are fp32).
        loss_scale: ``"auto"`` (the default: dynamic for float16, none for bfloat16, as
            Keras's mixed policies), ``"dynamic"`` (initial scale 2**15, doubled after 2000
            finite steps, halved on a skipped one), a finite positive number (a fixed scale),
            or ``None`` (no scaling: every step is applied).
        name: the optimizer's name.
        state_dtype: ``None`` / ``"float32"`` (the inner optimizer's state of a paired
            variable is fp32), or ``"bfloat16"``: its per-variable state (Adam's moments,
            momentum...) is stored in bfloat16, half the bytes; the update is still
            computed in fp32 on the exact master. EMA averages and gradient accumulators
            stay fp32. It changes the numerics: see the README's training-quality table.
            ``"int8"``: stored blockwise in 8 bits (uint8 codes, a float32 scale per 256),
            dequantized for each step and requantized after it.
        shard_over: None only on TensorFlow (ZeRO-1 over a ``keras.distribution`` mesh
            axis is JAX's; tf.distribute keeps whole masters and state on every replica).
        seed: the seed of stochastic rounding (an int, default 0; in the config), for
            variables built in ``scope(..., master="stochastic")``: a step's draws are a
            function of it, the inner optimizer's ``iterations`` and the variable's index.

    Raises:
        TypeError: ``optimizer`` is not a Keras 3 optimizer.
        ValueError: ``optimizer`` is already a loss-scale optimizer, a bad ``loss_scale`` or
            ``state_dtype``, other keyword arguments; at a step, a 16-bit variable without a
            master, or a variable created outside the strategy that trains it.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False,
    ...                               kernel_initializer="ones")])
    >>> opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(1e-4))
    >>> opt.loss_scale, opt.dynamic                     # "auto" in a float16 scope
    ('auto', True)
    >>> model.compile(optimizer=opt, loss="mse")        # fit scales and unscales the loss
    >>> _ = model.fit(np.full((1, 2), 0.25), np.zeros((1, 1)), verbose=0)
    >>> master = mp.get_master_weights(model)[0]       # 1 - 1e-4 * (2 * 0.5) * 0.25
    >>> master.ravel(), model.get_weights()[0].ravel()  # the fp16 copy rounds it to 1
    (array([0.999975, 0.999975], dtype=float32), array([1., 1.], dtype=float16))
    >>> float(opt.dynamic_scale.numpy())                # one finite step: scale kept
    32768.0

    In a custom loop: ``loss = opt.scale_loss(loss)`` inside the tape, then
    ``opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
    model.trainable_variables))``.
    """

    _STATE_AGGREGATION = "only_first_replica"  # the scale is shared by every replica

    def __init__(self, optimizer, loss_scale=AUTO, name=None, state_dtype=None,
                 shard_over=None, **kwargs):
        _backend.tensorflow("tfinit.mixed_precision.MasterWeightOptimizer")
        super().__init__(optimizer, loss_scale=loss_scale, name=name, state_dtype=state_dtype,
                         shard_over=shard_over, **kwargs)

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

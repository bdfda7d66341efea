"""MasterWeightOptimizer on Keras's JAX backend: the same maths as on TensorFlow, stateless.

``fit`` on JAX compiles one step over the values of the model's, the optimizer's and the
metrics' variables. The masters of pseudo_fp16 pairs (and the 16-bit copies of reverse
pairs) become this optimizer's own variables when it builds, so they travel in that step as
optimizer state; Keras writes them back when it syncs the state (end of an epoch, of ``fit``,
or when a callback reads the model).

One step (``apply``, in a ``StatelessScope`` under ``fit``)::

    grads32 = [float32(g) / scale for g in grads]     # 16-bit gradients of the copies
    finite = all(isfinite(g) for g in grads)          # only when scaling
    inner.apply(grads32, masters); copies = cast(masters)
    dynamic: finite -> counter += 1 (2000: scale *= 2, counter = 0); else scale /= 2

A non-finite step changes nothing but the scale: in ``fit``'s compiled step the two cases are
one ``ops.cond`` over the values, as Keras's ``LossScaleOptimizer`` does on JAX, so the
applied step compiles alike and masters match Keras ``mixed_*``; an eager ``apply`` undoes a
non-finite step with an element-wise select.
"""

import math

import keras
from keras import ops

from tfinit._precision import COMPUTE_DTYPES, MASTER_DTYPE, dtype_name
from tfinit import _keras_internals as internals
from tfinit.mixed_precision import _jax_pairs, _jax_split, _state

INITIAL_SCALE = 2.0**15
GROWTH_STEPS = 2000
_AUTO = "auto"


def _scaling_for(compute_dtypes):
    if "float16" in compute_dtypes:
        return "dynamic"
    return None if compute_dtypes else _AUTO


@keras.saving.register_keras_serializable(package="tfinit")
class MasterWeightOptimizer(keras.optimizers.LossScaleOptimizer):
    """Wrap a Keras 3 optimizer so it updates the fp32 masters of paired variables (JAX).

    The same contract as on TensorFlow: gradients of the 16-bit copies are cast to fp32 and
    unscaled, the inner optimizer updates the fp32 masters (its slots are fp32), and the
    copies are re-cast; steps with non-finite gradients are skipped when scaling. It is a
    ``keras.optimizers.LossScaleOptimizer``, so ``Model.compile`` never wraps it again;
    ``compile`` on a model constructed in a scope wraps a plain optimizer in it.

    Args:
        optimizer: the Keras 3 optimizer that updates the masters.
        loss_scale: ``"auto"`` (dynamic for float16, none for bfloat16), ``"dynamic"``, a
            finite positive number (a fixed scale) or ``None`` (no scaling, no skipping).
        name: the optimizer's name.
        state_dtype: ``None`` / ``"float32"``, or ``"bfloat16"``: the inner optimizer's
            per-variable state of a paired variable (Adam's moments, momentum...) is stored
            in bfloat16; EMA averages and gradient accumulators stay fp32.

    Raises:
        TypeError: ``optimizer`` is not a Keras 3 optimizer.
        ValueError: a loss-scale optimizer as ``optimizer``, a bad ``loss_scale`` or
            ``state_dtype``; at build, a 16-bit trainable variable without a master.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False,
    ...                               kernel_initializer="ones")])
    >>> model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
    >>> type(model.optimizer).__name__
    'MasterWeightOptimizer'
    >>> _ = model.fit(np.full((1, 2), 0.25), np.zeros((1, 1)), verbose=0)
    >>> mp.get_master_weights(model)[0].ravel()         # 1 - 1e-4 * (2 * 0.5) * 0.25
    array([0.999975, 0.999975], dtype=float32)
    """

    def __init__(self, optimizer, loss_scale=_AUTO, name=None, state_dtype=None, **kwargs):
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise TypeError(
                "MasterWeightOptimizer: Argument `optimizer` must be a Keras 3 optimizer. "
                f"Received: optimizer of type {type(optimizer).__name__}")
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise ValueError(
                "MasterWeightOptimizer: Argument `optimizer` is already a loss-scale "
                "optimizer; pass its inner optimizer (MasterWeightOptimizer scales the loss).")
        if state_dtype not in (None, MASTER_DTYPE, "bfloat16"):
            raise ValueError("MasterWeightOptimizer: Argument `state_dtype` must be None, "
                             f"'float32' or 'bfloat16'. Received: state_dtype={state_dtype!r}")
        loss_scale = _check_loss_scale(loss_scale)
        initial = loss_scale if isinstance(loss_scale, float) else INITIAL_SCALE
        super().__init__(optimizer, initial_scale=initial,
                         dynamic_growth_steps=GROWTH_STEPS, name=name, **kwargs)
        self.state_dtype = None if state_dtype is None else dtype_name(state_dtype)
        self.loss_scale = loss_scale
        self._scaling = self.loss_scale
        if self._scaling == _AUTO:
            scope = _state.active()
            if scope is not None:
                self._scaling = _scaling_for({scope.spec.compute_dtype})

    @property
    def dynamic(self):
        """Whether the loss scale changes (doubles, halves) with the gradients."""
        return self._scaling == "dynamic"

    def _resolve_scaling(self, pairs):
        if self._scaling == _AUTO:
            dtypes = {p.spec.compute_dtype for p in pairs} or \
                set(_state.compute_dtypes_used()) & set(COMPUTE_DTYPES)
            resolved = _scaling_for(dtypes)
            self._scaling = None if resolved == _AUTO else resolved

    @property
    def _scales(self):
        return self._scaling is not None and self._scaling != _AUTO

    def build(self, var_list):
        _jax_pairs.pair_pending()
        var_list = list(var_list)
        targets, others = [], []
        for variable in var_list:
            pair = _jax_pairs.pair_of(variable)
            if pair is None:
                if dtype_name(variable.dtype) in COMPUTE_DTYPES:
                    raise ValueError(
                        f"MasterWeightOptimizer: variable {variable.path!r} is "
                        f"{variable.dtype} without an fp32 master: build the model inside "
                        "tfinit.mixed_precision.scope(...) so that its layers pair up.")
                targets.append(variable)
            else:
                targets.append(pair.master)
                others.append(pair.other)
        self._resolve_scaling(_jax_pairs.pairs_of(var_list))
        # Not through Keras's attribute tracking (it would make the model's fp32 variables
        # optimizer state too): the masters become state below, explicitly.
        object.__setattr__(self, "_targets", targets)
        # LossScaleOptimizer.build, but the inner optimizer is built for the masters.
        self.step_counter = self.add_variable(shape=(), dtype="int", initializer="zeros",
                                              aggregation="none", name="step_counter")
        self.dynamic_scale = self.add_variable(
            shape=(), dtype=MASTER_DTYPE, initializer=keras.initializers.Constant(
                self.initial_scale), aggregation="none", name="dynamic_scale")
        # Exclusions set on the inner optimizer before it was wrapped name the layer's
        # variables (pseudo_fp16: the copies); its updates go to the masters.
        internals.carry_weight_decay_exclusions(
            self.inner_optimizer, [(v, t) for v, t in zip(var_list, targets) if v is not t])
        if self.state_dtype not in (None, MASTER_DTYPE):
            _jax_split.keep_state_in(self.inner_optimizer, self.state_dtype,
                                     [p.master for p in _jax_pairs.pairs_of(var_list)])
        self.inner_optimizer.build(targets)
        keras.optimizers.Optimizer.build(self, var_list)
        for other in others:
            internals.track_optimizer_variable(self, other)

    def scale_loss(self, loss):
        if not self._scales:
            return loss
        scale = self.dynamic_scale if self.built else self.initial_scale
        return ops.multiply(loss, ops.cast(scale, loss.dtype) if hasattr(loss, "dtype")
                            else scale)

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        mapping = list(zip(self._trainable_variables, trainable_variables)) + list(
            zip(self.variables, optimizer_variables))

        def run(step):
            with keras.StatelessScope(state_mapping=mapping) as scope:
                step()
            trainable = [scope.get_current_value(v) for v in self._trainable_variables]
            state = [scope.get_current_value(v) for v in self.variables]
            return ([old if new is None else new
                     for new, old in zip(trainable, trainable_variables)],
                    [old if new is None else new
                     for new, old in zip(state, optimizer_variables)])

        if not self._scales:
            return run(lambda: self._step(grads, None))
        # As Keras's LossScaleOptimizer on JAX: one ops.cond over the values, so the applied
        # step compiles as Keras's does (the same bits).
        return ops.cond(self.check_finite(grads),
                        lambda: run(lambda: self._finite_step(grads)),
                        lambda: run(self._skip_step))

    def apply(self, grads, trainable_variables=None):
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        grads = list(grads)
        if not self._scales:
            return self._step(grads, None)
        pairs = _jax_pairs.pairs_of(self._trainable_variables)
        masters = {id(p.master) for p in pairs}
        written = [*(t for t in self._targets if id(t) not in masters),
                   *self.inner_optimizer.variables, *self._variables,
                   *(v for p in pairs for _, v in p.stored())]
        old = [ops.copy(v.value) for v in written]  # torch's values change in place
        skipped_scale = ops.multiply(self.dynamic_scale.value, 0.5 if self.dynamic else 1.0)
        self._finite_step(grads)
        finite = self.check_finite(grads)
        for variable, before in zip(written, old):
            _jax_pairs.raw_assign(variable, ops.where(finite, variable.value, before))
        self.dynamic_scale.assign(ops.where(finite, self.dynamic_scale.value, skipped_scale))
        counter = self.step_counter.value
        self.step_counter.assign(ops.where(finite, counter, ops.zeros_like(counter)))

    def _finite_step(self, grads):
        scale = ops.cast(self.dynamic_scale.value, MASTER_DTYPE)
        if self.dynamic:
            counter = self.step_counter.value
            grow = ops.equal(counter, GROWTH_STEPS - 1)
            self.dynamic_scale.assign(ops.where(grow, ops.multiply(scale, 2.0), scale))
            self.step_counter.assign(ops.where(grow, ops.zeros_like(counter), counter + 1))
        self._step(grads, scale)

    def _skip_step(self):
        if self.dynamic:
            self.dynamic_scale.assign(ops.multiply(self.dynamic_scale.value, 0.5))
            self.step_counter.assign(ops.zeros_like(self.step_counter.value))

    def _step(self, grads, scale):
        """Unscale in fp32, update the masters with the inner optimizer, re-cast the copies."""
        unscaled = []
        for grad, variable in zip(grads, self._trainable_variables):
            if grad is not None:
                grad = ops.cast(grad, MASTER_DTYPE)
                if scale is not None and not _jax_pairs.overwrites_with_gradient(variable):
                    grad = ops.divide(grad, scale)
            unscaled.append(grad)
        pairs = _jax_pairs.pairs_of(self._trainable_variables)
        for pair in pairs:
            pair.open_step()  # a split pair's master joined into its scratch variable
        self.inner_optimizer.apply(unscaled, self._targets)
        for pair in pairs:
            pair.close_step()  # copies re-cast; split: split back, the scratch emptied

    def _masters_of(self, variables):
        """``variables`` with each paired one replaced by the variable the inner optimizer
        updates for it (its master; reverse: itself)."""
        _jax_pairs.pair_pending()
        return [v if _jax_pairs.pair_of(v) is None else _jax_pairs.pair_of(v).master
                for v in variables]

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """As Keras's, for the inner optimizer; paired variables map to their masters (a
        master has its layer variable's name and path, so ``var_names`` match alike)."""
        targets = self._masters_of(var_list) if var_list else None
        self.inner_optimizer.exclude_from_weight_decay(var_list=targets, var_names=var_names)

    def finalize_variable_values(self, var_list):
        """As Keras's, on the masters (EMA's averages are set on them; copies re-cast)."""
        pairs = _jax_pairs.pairs_of(var_list)
        for pair in pairs:
            pair.open_step()  # a split pair's master joined into its scratch variable
        self.inner_optimizer.finalize_variable_values(self._masters_of(var_list))
        for pair in pairs:
            pair.close_step()

    def load_own_variables(self, store):
        """Keras's, except the pairs' variables this optimizer carries as state (a
        pseudo_fp16 master, a reverse copy, a split remainder) are not read from it.

        Which variable of a pair sits at such an index depends on the scope the file was
        written in (a reverse file has the bfloat16 copies where a pseudo_fp16 model has its
        fp32 masters); the layers' entries of the same file hold the exact masters and set
        every pair (its copy or remainder re-made), whatever the mode of either side.
        """
        if len(store.keys()) != len(self.variables):
            return super().load_own_variables(store)  # Keras's warning, nothing loaded
        paired = {id(p.other) for p in _jax_pairs.pairs_of(self._trainable_variables or [])}
        for index, variable in enumerate(self.variables):
            if id(variable) not in paired:
                variable.assign(store[str(index)])

    def get_config(self):
        config = super().get_config()
        config.pop("initial_scale", None)
        config.pop("dynamic_growth_steps", None)
        return {**config, "loss_scale": self.loss_scale, "state_dtype": self.state_dtype}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(config.pop("inner_optimizer"),
                                                      custom_objects=custom_objects)
        return cls(inner, **config)


def _check_loss_scale(loss_scale):
    if loss_scale in (None, _AUTO, "dynamic"):
        return loss_scale
    if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool) and \
            math.isfinite(loss_scale) and loss_scale > 0:
        return float(loss_scale)
    raise ValueError(
        "MasterWeightOptimizer: Argument `loss_scale` must be 'auto', 'dynamic', a finite "
        f"positive number or None. Received: loss_scale={loss_scale!r}")

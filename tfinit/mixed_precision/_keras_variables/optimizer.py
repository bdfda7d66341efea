"""``MasterWeightOptimizer``'s step on Keras's JAX and torch backends (``BackendOptimizer``):
the same maths as on TensorFlow, stateless.

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

import keras
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision._keras_variables import shard_layouts
from tfinit.mixed_precision import _backend_choice as backend_choice
from tfinit.mixed_precision._common.optimizer_core import (FP32_STATE,
                                                        MasterWeightOptimizerBase,
                                                        shard_over_refused)
from tfinit.mixed_precision._keras_variables import (pair_records, paired_variables,
                                                    quantized_slots)


class BackendOptimizer(MasterWeightOptimizerBase):
    """``MasterWeightOptimizer`` on JAX and torch: its pairs, ``shard_over`` (ZeRO-1 on
    JAX), its stateless step (see the module)."""

    # -- the pairs, as keras.Variables -----------------------------------------------
    def _update_targets(self, variables):
        pair_records.pair_pending()
        return super()._update_targets(variables)

    def _pair_of(self, variable):
        return pair_records.pair_of(variable)

    def build(self, var_list):
        var_list = list(var_list)
        if self.shard_over is not None:
            self._shard_masters(var_list)
        super().build(var_list)  # the inner optimizer's state follows its targets' layouts

    def _shard_masters(self, var_list):
        """ZeRO-1: the variables only the step reads (fp32 masters, split remainders and
        scratch masters) laid out over the ``shard_over`` axis as well."""
        mesh = shard_layouts.mesh_for(self.shard_over)
        pair_records.pair_pending()
        stored = []
        for pair in pair_records.pairs_of(var_list):
            if pair.master is pair.param:
                raise ValueError(
                    f"{self.name}: Argument `shard_over={self.shard_over!r}` shards the fp32 "
                    "masters the layers do not read, but variable "
                    f"{pair.param.path!r} is a reverse pair, whose fp32 master is the layer's "
                    "own variable (Keras's layout, read by every step). Construct the model in "
                    "scope('pseudo_fp16', ...) (master='fp32' or 'split'), or leave "
                    "shard_over=None.")
            stored += [pair.master] if pair.master is pair.other else [pair.other, pair.master]
        shard_layouts.shard(stored, mesh, self.shard_over)
        inner = self.inner_optimizer  # its state is sharded too: gathered when saved
        internals.set_object_method(inner, "save_own_variables",
                                    lambda store: shard_layouts.save_gathered(
                                        inner.variables, store))

    def _check_shard_over(self, shard_over):
        if backend_choice.NAME != "jax":
            raise shard_over_refused(shard_over, backend_choice.NAME)
        if keras.distribution.distribution() is not None:
            shard_layouts.mesh_for(shard_over)  # checked again at build (the distribution then)

    @classmethod
    def _shard_over_here(cls, shard_over):
        if shard_layouts.shard_over_here(shard_over):
            return shard_over
        return super()._shard_over_here(shard_over)

    def _to_numpy(self, value):
        return shard_layouts.to_numpy(value)

    def _master_of(self, pair):
        return pair.master

    def _own_dtype(self, variable):
        return variable.dtype

    def _open_masters(self, pairs):
        for pair in pairs:
            pair.open_step()  # a split pair's master joined into its scratch variable

    def _close_masters(self, pairs):
        rounding = self._rounding_state(pairs)
        for pair in pairs:
            # copies re-cast; split: split back, the scratch emptied; stochastic: rounded
            pair.close_step(rounding)

    def _keep_state_in(self, dtype, pairs):
        if dtype == "int8":
            return quantized_slots.keep_state_quantized(self.inner_optimizer,
                                                        [p.master for p in pairs])
        keep_state_in(self.inner_optimizer, dtype, [p.master for p in pairs])

    def _built_for(self, var_list, targets, pairs):
        # Not through Keras's attribute tracking (it would make the model's fp32 variables
        # optimizer state too): the step's targets, and the pairs' other variables as this
        # optimizer's state, explicitly.
        object.__setattr__(self, "_targets", targets)
        object.__setattr__(self, "_built_variables", list(var_list))  # the step's variables
        for pair in pairs:
            internals.track_optimizer_variable(self, pair.other)

    def finalize_variable_values(self, var_list):
        """The base class's, unless the variables hold no value: Keras's ``fit`` on JAX
        takes their values out for its compiled step and calls this in a ``finally`` block,
        so after a step that raised they are empty (or hold the arrays that step consumed).
        Then there is nothing to finalize, and the step's own exception propagates."""
        var_list = list(var_list)
        held = [*var_list, *(p.other for p in pair_records.pairs_of(var_list))]
        if all(paired_variables.holds_value(v) for v in held):
            super().finalize_variable_values(var_list)

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        self._check_step_lists("stateless_apply", self._built_variables, grads,
                               trainable_variables, optimizer_variables)
        mapping = list(zip(self._built_variables, trainable_variables, strict=True)) + list(
            zip(self.variables, optimizer_variables, strict=True))

        def run(step):
            with keras.StatelessScope(state_mapping=mapping) as scope:
                step()
            trainable = [scope.get_current_value(v) for v in self._built_variables]
            state = [scope.get_current_value(v) for v in self.variables]
            return ([old if new is None else new
                     for new, old in zip(trainable, trainable_variables, strict=True)],
                    [old if new is None else new
                     for new, old in zip(state, optimizer_variables, strict=True)])

        if self._resolve_scaling() is None:
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
        self._check_step_lists("apply", self._built_variables, grads)
        if self._resolve_scaling() is None:
            return self._step(grads, None)
        pairs = pair_records.pairs_of(self._built_variables)
        masters = {id(p.master) for p in pairs}
        written = [*(t for t in self._targets if id(t) not in masters),
                   *self.variables,  # its own and the inner optimizer's
                   *(v for p in pairs for _, v in p.stored())]
        old = [ops.copy(v.value) for v in written]  # torch's values change in place
        skipped_scale = ops.multiply(self.dynamic_scale.value, 0.5 if self.dynamic else 1.0)
        self._finite_step(grads)
        finite = self.check_finite(grads)
        for variable, before in zip(written, old, strict=True):
            paired_variables.raw_assign(variable, ops.where(finite, variable.value, before))
        self.dynamic_scale.assign(ops.where(finite, self.dynamic_scale.value, skipped_scale))
        counter = self.step_counter.value
        self.step_counter.assign(ops.where(finite, counter, ops.zeros_like(counter)))

    def _finite_step(self, grads):
        scale = ops.cast(self.dynamic_scale.value, MASTER_DTYPE)  # before it grows
        self._count_finite_step()
        self._step(grads, scale)

    def _step(self, grads, scale):
        """Unscale in fp32, update the masters with the inner optimizer, re-cast the copies."""
        unscaled = []
        # strict only when given: no gradients is Keras's empty step (nothing to pair)
        for grad, variable in zip(grads, self._built_variables, strict=bool(grads)):
            if grad is not None:
                grad = ops.cast(grad, MASTER_DTYPE)
                if scale is not None and not paired_variables.overwrites_with_gradient(variable):
                    grad = ops.divide(grad, scale)
            unscaled.append(grad)
        pairs = pair_records.pairs_of(self._built_variables)
        self._open_masters(pairs)
        self.inner_optimizer.apply(unscaled, self._targets)
        self._close_masters(pairs)

    def _carried_pair_variables(self):
        return [p.other for p in pair_records.pairs_of(getattr(self, "_built_variables", []))]


def keep_state_in(optimizer, dtype, masters):
    """Make ``optimizer`` (an inner optimizer, this object only) store the per-variable state
    it makes for the variables in ``masters`` in ``dtype``; EMA averages and gradient
    accumulators stay float32.

    Keras's ``add_variable_from_reference`` gives a slot its reference variable's dtype; here
    it asks ``add_variable`` for ``dtype`` instead (both the optimizer's own methods).
    """
    masters = {id(v) for v in masters}
    make = optimizer.add_variable_from_reference
    add = optimizer.add_variable

    def add_in_state_dtype(*args, **kwargs):
        kwargs["dtype"] = dtype
        return add(*args, **kwargs)

    def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
        if id(reference_variable) not in masters or name in FP32_STATE:
            return make(reference_variable, name=name, initializer=initializer)
        internals.set_object_method(optimizer, "add_variable", add_in_state_dtype)
        try:
            return make(reference_variable, name=name, initializer=initializer)
        finally:
            internals.unset_object_method(optimizer, "add_variable")

    internals.set_object_method(optimizer, "add_variable_from_reference",
                                add_variable_from_reference)

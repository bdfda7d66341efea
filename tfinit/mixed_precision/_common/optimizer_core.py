"""What ``MasterWeightOptimizer`` is on every backend: its arguments, config, loss-scale rules.

``MasterWeightOptimizerBase`` holds what every backend shares: the constructor's checks, the
constants of dynamic scaling, what ``loss_scale="auto"`` resolves to and when, ``scale_loss``,
the scale's growth and halving, ``build`` (the inner optimizer built for the masters),
weight-decay exclusions, ``finalize_variable_values`` and the config. Each backend folder's
``optimizer.BackendOptimizer`` subclasses it with how that backend finds a variable's pair and
master, how a step opens and closes them (the ``_pair_of`` ... ``_built_for`` methods), what
``shard_over`` means there, and its step (``apply``; ``stateless_apply`` on JAX and torch);
``tfinit.mixed_precision._optimizer`` defines the one public ``MasterWeightOptimizer`` on the
chosen one, as Keras writes ``Optimizer`` once with the backend's mixed in. No backend here.
"""

import math
import warnings

import keras
import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import COMPUTE_DTYPES, MASTER_DTYPE, dtype_name
from tfinit.mixed_precision._common import quantized_state, scope_stack

#: Keras's ``LossScaleOptimizer`` constants: the first scale, finite steps between doublings
INITIAL_SCALE = 2.0**15
GROWTH_STEPS = 2000
#: the dtypes ``state_dtype`` takes
STATE_DTYPES = (MASTER_DTYPE, "bfloat16", "int8")
#: state Keras's base optimizer keeps per variable that stays fp32 whatever ``state_dtype``
#: (each backend's ``keep_state_in`` leaves it so)
FP32_STATE = ("average", "gradient_accumulator")
AUTO = "auto"
_WHO = "MasterWeightOptimizer"
#: what the JAX class's config also held on Keras before 3.11 (its base optimizer's
#: arguments): read back at these, Keras's defaults; another value is refused
_BASE_DEFAULTS = {"weight_decay": None, "clipnorm": None, "global_clipnorm": None,
                  "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
                  "ema_overwrite_frequency": None, "loss_scale_factor": None,
                  "gradient_accumulation_steps": None}


def check_loss_scale(loss_scale):
    """``loss_scale`` as the optimizer keeps it (a number as a float), or ValueError."""
    if loss_scale is None or (isinstance(loss_scale, str) and loss_scale in (AUTO, "dynamic")):
        return loss_scale
    if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool) and \
            math.isfinite(loss_scale) and loss_scale > 0:
        return float(loss_scale)
    raise ValueError(
        f"{_WHO}: Argument `loss_scale` must be 'auto', 'dynamic', None or a finite positive "
        f"number. Received: loss_scale={loss_scale!r}")


def check_seed(seed):
    """``seed`` (stochastic rounding's, ``master="stochastic"``) as an int, or ValueError."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not -2**31 <= seed < 2**31:
        raise ValueError(
            f"{_WHO}: Argument `seed` must be an int in [-2**31, 2**31) (the seed of "
            f"stochastic rounding, master='stochastic'). Received: seed={seed!r}")
    return seed


def check_shard_over(shard_over):
    """``shard_over`` as the optimizer keeps it (None or a name), or ValueError; whether
    the backend shards over a mesh axis is the backend's ``_check_shard_over``."""
    if shard_over is None or (isinstance(shard_over, str) and shard_over):
        return shard_over
    raise ValueError(
        f"{_WHO}: Argument `shard_over` must be None or the name of an axis of the "
        f"keras.distribution device mesh (e.g. 'batch'). Received: shard_over={shard_over!r}")


def shard_over_refused(shard_over, backend):
    """The ValueError for a ``shard_over`` axis on ``backend``, which does not shard."""
    return ValueError(
        f"{_WHO}: Argument `shard_over` (ZeRO-1: masters and optimizer state sharded "
        "over a keras.distribution mesh axis) works on Keras's JAX backend only. On "
        f"{backend} leave it None: tf.distribute's strategies (and torch's "
        "Keras backend) keep a whole copy of the masters and optimizer state on every "
        "replica; sharding them there is not built in (use the JAX backend with "
        f"keras.distribution). Received: shard_over={shard_over!r}")


def dropped_shard_over(shard_over):
    """None, with a warning: the saved optimizer's ``shard_over`` does not apply here."""
    warnings.warn(
        f"{_WHO}: the saved optimizer sharded its masters and state over the mesh axis "
        f"{shard_over!r} (shard_over), which this process has no active keras.distribution "
        "axis for (or its backend is not JAX): it loads with shard_over=None, the state whole "
        "on each device. Load it under a distribution with that axis to keep it sharded.",
        stacklevel=4)


def scaling_for(compute_dtypes):
    """What ``"auto"`` means for models computing in ``compute_dtypes``: ``"dynamic"`` with
    float16 among them, None for bfloat16 alone, still ``"auto"`` for none."""
    if "float16" in compute_dtypes:
        return "dynamic"
    return None if compute_dtypes else AUTO


def _check_optimizer(optimizer):
    kind = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"{_WHO}: Argument `optimizer` must be a Keras 3 optimizer (keras.optimizers."
            f"Optimizer, e.g. keras.optimizers.SGD(...)). Received: optimizer={optimizer!r:.80}"
            f" of type {kind}")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            f"{_WHO}: Argument `optimizer` must be the inner optimizer, not one that is "
            f"already a loss-scale optimizer ({_WHO} scales the loss itself: configure it "
            f"with `loss_scale=`). Received: optimizer of type {kind}")


class MasterWeightOptimizerBase(keras.optimizers.LossScaleOptimizer):
    """The backend-neutral part of ``MasterWeightOptimizer`` (see the module docstring)."""

    #: how the scale and its counter aggregate across replicas (the backend's choice)
    _STATE_AGGREGATION = "none"

    def __init__(self, optimizer, loss_scale=AUTO, name=None, state_dtype=None,
                 shard_over=None, seed=0, **kwargs):
        _check_optimizer(optimizer)
        check_seed(seed)
        loss_scale = check_loss_scale(loss_scale)
        shard_over = check_shard_over(shard_over)
        if shard_over is not None:
            self._check_shard_over(shard_over)
        if state_dtype is not None and dtype_name(state_dtype) not in STATE_DTYPES:
            raise ValueError(
                f"{_WHO}: Argument `state_dtype` must be None, 'float32', 'bfloat16' or "
                f"'int8'. Received: state_dtype={state_dtype!r}")
        if state_dtype is not None and dtype_name(state_dtype) == "int8":
            quantized_state.refuse_without_moments(optimizer)
            if shard_over is not None:
                raise ValueError(
                    f"{_WHO}: Argument `state_dtype='int8'` does not combine with "
                    "`shard_over` (the blockwise codes and scales are not laid out over a "
                    "mesh axis). Use state_dtype='bfloat16' with shard_over, or "
                    f"shard_over=None with int8. Received: shard_over={shard_over!r}")
        if kwargs:
            raise ValueError(
                f"{_WHO}: unexpected keyword arguments {sorted(kwargs)}: set them on the "
                "inner optimizer (argument `optimizer`). Received: "
                + ", ".join(f"{key}={value!r}" for key, value in sorted(kwargs.items())))
        initial = loss_scale if isinstance(loss_scale, float) else INITIAL_SCALE
        super().__init__(optimizer, initial_scale=initial,
                         dynamic_growth_steps=GROWTH_STEPS, name=name)
        self.loss_scale = loss_scale
        self.state_dtype = None if state_dtype is None else dtype_name(state_dtype)
        self.shard_over = shard_over
        self.seed = seed
        # What the step does, once known: "dynamic", a fixed float, or None.
        self._scaling = loss_scale
        if loss_scale == AUTO and scope_stack.active() is not None:
            self._scaling = scaling_for({scope_stack.active().spec.compute_dtype})

    # -- what a backend supplies -------------------------------------------------------
    def _pair_of(self, variable):
        """The pair of ``variable``, or None."""
        raise NotImplementedError

    def _master_of(self, pair):
        """The variable the inner optimizer updates for ``pair``."""
        raise NotImplementedError

    def _own_dtype(self, variable):
        """The dtype ``variable`` stores (an unpaired one)."""
        raise NotImplementedError

    # The no-op defaults have a statement, not only a docstring: AutoGraph converts them when
    # the optimizer builds inside a tf.function and cannot convert an empty body.
    def _open_masters(self, pairs):
        """Before the inner optimizer runs on the masters of ``pairs``."""
        return None

    def _close_masters(self, pairs):
        """After it ran: the copies re-cast from the masters."""
        raise NotImplementedError

    def _keep_state_in(self, dtype, pairs):
        """Make the inner optimizer keep its per-variable state of ``pairs`` in ``dtype``."""
        raise NotImplementedError

    def _built_for(self, var_list, targets, pairs):
        """After ``build``: what the backend's step needs of the variables."""
        return None

    def _check_shard_over(self, shard_over):
        """Refuse a ``shard_over`` axis name (not None) this backend cannot shard over."""
        raise NotImplementedError

    @classmethod
    def _shard_over_here(cls, shard_over):
        """A saved optimizer's ``shard_over`` (not None) if it applies here, else None with
        a warning (``dropped_shard_over``)."""
        return dropped_shard_over(shard_over)

    def _to_numpy(self, value):
        """``value`` whole, as numpy (the backend may gather a sharded one first)."""
        return keras.ops.convert_to_numpy(value)

    # -- loss scaling ------------------------------------------------------------------
    def _resolve_scaling(self, pairs=None, commit=True):
        """Fix ``"auto"`` for good: from the pairs being built, else the active scope, else
        the compute dtype of the models compiled with this optimizer (a Keras
        ``mixed_float16`` model: dynamic, as Keras's ``compile`` wraps its optimizer in a
        ``LossScaleOptimizer``), else the paired variable a layer call read last in this
        thread (``fit`` on TensorFlow scales the loss before it builds the optimizer, right
        after the forward pass), else the scopes this process has entered (no 16-bit
        variable at all: no scaling). ``commit=False`` answers what it would be now without
        fixing it (a read of ``dynamic``)."""
        if self._scaling != AUTO:
            return self._scaling
        active, last_read = scope_stack.active(), scope_stack.last_read()
        candidates = (  # each asked only when the ones before it do not decide
            lambda: {pair.spec.compute_dtype for pair in pairs or ()},
            lambda: {active.spec.compute_dtype} if active is not None else set(),
            lambda: {m.dtype_policy.compute_dtype  # as Keras's compile decides
                     for m in internals.models_compiled_with(self)} & set(COMPUTE_DTYPES),
            lambda: {last_read} if last_read is not None else set(),
            lambda: scope_stack.compute_dtypes_used() & set(COMPUTE_DTYPES),
        )
        scaling = next((scaling for scaling in (scaling_for(c()) for c in candidates)
                        if scaling != AUTO), None)
        if commit:
            self._scaling = scaling
        return scaling

    @property
    def dynamic(self):
        """Whether the loss scale is dynamic (``"auto"`` is fixed by the first step; reading
        this before it does not fix it)."""
        return self._resolve_scaling(commit=False) == "dynamic"

    def _initial_scale(self):
        scaling = self._resolve_scaling()
        return INITIAL_SCALE if scaling == "dynamic" else float(scaling or 1.0)

    def scale_loss(self, loss):
        """Multiply the loss by the current loss scale (call inside the gradient tape)."""
        if self._resolve_scaling() is None:
            return loss
        scale = self.dynamic_scale if self.built else self._initial_scale()
        if not hasattr(loss, "dtype"):
            return ops.multiply(loss, scale)
        return ops.multiply(loss, ops.cast(scale, keras.backend.standardize_dtype(loss.dtype)))

    def _count_finite_step(self):
        """Dynamic scaling after an applied step: count it; the 2000th in a row doubles the
        scale."""
        if self.dynamic:
            scale, counter = self.dynamic_scale.value, self.step_counter.value
            grow = ops.equal(counter, GROWTH_STEPS - 1)
            self.dynamic_scale.assign(ops.where(grow, ops.multiply(scale, 2.0), scale))
            self.step_counter.assign(ops.where(grow, ops.zeros_like(counter), counter + 1))

    def _skip_step(self):
        """Dynamic scaling after a skipped step (a non-finite gradient): halve the scale."""
        if self.dynamic:
            self.dynamic_scale.assign(ops.multiply(self.dynamic_scale.value, 0.5))
            self.step_counter.assign(ops.zeros_like(self.step_counter.value))

    def _check_one_each(self, method, argument, values, expected, each, empty_ok=False):
        """Refuse the list ``argument`` of ``method`` unless it holds one entry per item of
        ``expected`` (``each`` names one), or none with ``empty_ok`` (Keras's empty step):
        the step would pair its entries with the wrong variables, or drop some."""
        if len(values) != len(expected) and not (empty_ok and not values):
            raise ValueError(
                f"{_WHO}.{method}: Argument `{argument}` must hold one entry per {each} "
                f"({len(expected)}). Received: {len(values)} entries.")

    def _check_step_lists(self, method, built, grads, trainable_variables=None,
                          optimizer_variables=None):
        """JAX/torch: the lists of ``method`` (``apply``, ``stateless_apply``) refused unless
        each holds one entry per variable the step pairs it with (``built``: the variables
        this optimizer was built for; its own ``variables``); no ``grads`` is Keras's empty
        step."""
        each = "variable the optimizer was built for"
        self._check_one_each(method, "grads", grads, built, each, empty_ok=True)
        if trainable_variables is not None:
            self._check_one_each(method, "trainable_variables", trainable_variables, built, each)
        if optimizer_variables is not None:
            self._check_one_each(method, "optimizer_variables", optimizer_variables,
                                 self.variables, "variable of the optimizer (`variables`)")

    # -- building ----------------------------------------------------------------------
    def _update_targets(self, variables):
        """The variables the inner optimizer updates for ``variables`` (a paired one: its
        master), and the pairs among them; a 16-bit variable without a master is refused."""
        targets, pairs = [], []
        for variable in variables:
            pair = self._pair_of(variable)
            if pair is not None:
                targets.append(self._master_of(pair))
                pairs.append(pair)
                continue
            own_dtype = dtype_name(self._own_dtype(variable))
            if own_dtype in COMPUTE_DTYPES:
                label = getattr(variable, "path", None) or getattr(variable, "name", None)
                raise ValueError(
                    f"{_WHO}: variable {label or variable!r} is {own_dtype} and has no fp32 "
                    "master, so its small updates would be lost. Construct its layer inside "
                    "tfinit.mixed_precision.scope(...) (layers constructed there get masters "
                    "whenever they build).")
            targets.append(variable)
        return targets, pairs

    def build(self, var_list):
        """Keras's ``LossScaleOptimizer.build``, except that the inner optimizer is built for
        the masters (with the weight-decay exclusions of their variables carried over)."""
        var_list = list(var_list)
        targets, pairs = self._update_targets(var_list)
        self._check_stochastic(var_list)
        self._resolve_scaling(pairs)
        self.step_counter = self.add_variable(
            shape=(), dtype="int", initializer="zeros", aggregation=self._STATE_AGGREGATION,
            name="step_counter")
        self.dynamic_scale = self.add_variable(
            shape=(), dtype=MASTER_DTYPE,
            initializer=keras.initializers.Constant(self._initial_scale()),
            aggregation=self._STATE_AGGREGATION, name="dynamic_scale")
        # Exclusions set on the inner optimizer before it was wrapped name the layer's
        # variables (pseudo_fp16: the copies); its updates go to the masters.
        internals.carry_weight_decay_exclusions(
            self.inner_optimizer,
            [(v, t) for v, t in zip(var_list, targets, strict=True) if v is not t])
        if self.state_dtype not in (None, MASTER_DTYPE):
            self._keep_state_in(self.state_dtype, pairs)
        self.inner_optimizer.build(targets)
        if self.state_dtype == "int8":
            quantized_state.check_quantized(self.inner_optimizer, pairs)
        internals.build_optimizer_base(self, var_list)
        self._built_for(var_list, targets, pairs)

    # -- master="stochastic": begin ----------------------------------------------------
    def _check_stochastic(self, var_list):
        """Refuse the options a ``master="stochastic"`` pair does not combine with; give each
        such pair its stream of draws: its variable's index in ``var_list`` (the same for the
        same model wherever it is built, unlike a path Keras may have uniquified)."""
        stochastic = []
        for index, variable in enumerate(var_list):
            pair = self._pair_of(variable)
            if pair is not None and pair.rounds_stochastically:
                pair.stream = index
                stochastic.append(pair)
        if not stochastic:
            return
        for argument, value, default in (("state_dtype", self.state_dtype, None),
                                         ("shard_over", self.shard_over, None)):
            if value != default and not (argument == "state_dtype" and value == MASTER_DTYPE):
                raise ValueError(
                    f"{_WHO}: Argument `{argument}` must be None for variables built in "
                    "scope(..., master='stochastic') (variable "
                    f"{stochastic[0].name!r}): stochastic rounding keeps the inner "
                    "optimizer's state in float32, unsharded (a weight without a master has "
                    "nothing to shard). Use master='split' for those options. Received: "
                    f"{argument}={value!r}")

    def _rounding_state(self, pairs):
        """``(seed, step)`` of the stochastic rounding of this step (the inner optimizer's
        ``iterations``, saved and restored with it), or None without stochastic pairs."""
        if not any(p.rounds_stochastically for p in pairs):
            return None
        return self.seed, self.inner_optimizer.iterations.value
    # -- master="stochastic": end ------------------------------------------------------

    # -- weight files ------------------------------------------------------------------
    def _carried_pair_variables(self):
        """The pairs' variables this optimizer carries as its own state, in the order they
        follow its own variables in ``variables`` (none on TensorFlow)."""
        return []

    def _own_variables(self):
        """What this optimizer stores in weight files: its own variables (Keras's iterations
        and learning rate, the loss scale and its counter), without the inner optimizer's
        (Keras stores them under the inner optimizer's own entry) or the pairs' variables it
        carries (the layers' entries hold their exact masters): each array once."""
        variables, inner = self.variables, self.inner_optimizer.variables
        carried = {id(v) for v in self._carried_pair_variables()}
        return [v for v in variables[:len(variables) - len(inner)] if id(v) not in carried]

    def save_own_variables(self, store):
        """This optimizer's own variables only (see ``_own_variables``); a variable sharded
        over processes (``shard_over`` on a multi-host mesh) is gathered first."""
        for index, variable in enumerate(self._own_variables()):
            store[str(index)] = np.asarray(self._to_numpy(variable.value))

    def load_own_variables(self, store):
        """This optimizer's own variables, from a file written on either backend, now or
        before issue 48 (which stored, after them, the pairs' variables it carries on JAX and
        then the inner optimizer's variables again: those are read as before; the inner
        optimizer's own entry, which Keras loads next, holds the same values).

        Not built: nothing loaded, and no warning of its own: its inner optimizer, built with
        it, is not built either, and Keras warns for it (the one warning Keras mixed gives).
        Any other count: Keras's warning, nothing loaded.
        """
        own, inner = self._own_variables(), self.inner_optimizer.variables
        in_store = len(store.keys())
        if not self.built and not self.inner_optimizer.built:
            return
        pairs = self._update_targets(internals.optimizer_built_variables(self))[1] \
            if self.built else []
        carried = in_store - len(own) - len(inner)
        if not self.built or (in_store != len(own) and carried not in {0, len(pairs)}):
            warnings.warn(
                f"Skipping variable loading for optimizer '{self.name}', because it has "
                f"{len(own)} variables of its own whereas the saved optimizer has {in_store} "
                "variables. " + ("" if self.built else
                                 "This is likely because the optimizer has not been "
                                 "called/built yet."), stacklevel=2)
            return
        for index, variable in enumerate(own):
            variable.assign(store[str(index)])
        if in_store != len(own):  # a file written before: the inner optimizer's state again
            for index, variable in enumerate(inner, len(own) + carried):
                variable.assign(store[str(index)])

    # -- delegation --------------------------------------------------------------------
    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """As Keras's, for the inner optimizer; paired variables map to their masters (a
        master has its layer variable's name and path, so ``var_names`` match alike)."""
        targets = self._update_targets(var_list)[0] if var_list else None
        self.inner_optimizer.exclude_from_weight_decay(var_list=targets, var_names=var_names)

    def finalize_variable_values(self, var_list):
        """As Keras's, on the masters (EMA's averages are set on them; copies re-cast)."""
        targets, pairs = self._update_targets(var_list)
        self._open_masters(pairs)
        self.inner_optimizer.finalize_variable_values(targets)
        self._close_masters(pairs)

    def get_config(self):
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
            "loss_scale": self.loss_scale,
            "state_dtype": self.state_dtype,
            "shard_over": self.shard_over,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """The optimizer of ``get_config``'s dict, also of one written before on either
        backend (the JAX class wrote the inner optimizer under ``"inner_optimizer"``). A
        ``shard_over`` axis that the active distribution lacks (or no distribution, or not
        JAX) is dropped with a warning: files are layout-free, the state loads unsharded."""
        config = dict(config)
        key = "optimizer" if "optimizer" in config else "inner_optimizer"
        inner = keras.saving.deserialize_keras_object(config.pop(key),
                                                      custom_objects=custom_objects)
        for key, default in _BASE_DEFAULTS.items():
            if key in config and config[key] == default:
                del config[key]
        if config.get("shard_over") is not None:
            config["shard_over"] = cls._shard_over_here(config["shard_over"])
        return cls(inner, **config)

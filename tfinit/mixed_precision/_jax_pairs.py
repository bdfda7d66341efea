"""Master/copy pairs on the ``keras.Variable`` backends, JAX and torch (no variable creator).

A pair is made once, from the layer's own trainable float32 variables, by
:func:`pair_pending`; its kind was decided by
:func:`~tfinit.mixed_precision._pair_kinds.pair_class` from the scope's
:class:`~tfinit._precision.PairSpec`, and its record (a ``ParameterInfo``) sits on the Keras
variable:

- :class:`PseudoFP16JaxPair`: a layer constructed in the scope builds its weights in float32
  (its ``PairPolicy`` asks for float32 while it builds), so each holds the exact fp32
  initializer value. That value becomes the master, a separate fp32 ``keras.Variable``
  (``blob_copy["float32"]``, Caffe2's ``P_fp32``), and the layer's variable becomes its
  16-bit cast (Caffe2's ``P = FloatToHalf(P_fp32)``).
- :class:`SplitJaxPair` (pseudo_fp16, ``master="split"``): the layer's variable becomes the
  bfloat16 copy and the other is the int16 remainder (``blob_copy["int16"]``); the fp32
  master exists only during an optimizer step, in a scratch variable without a value between
  steps (:mod:`tfinit.mixed_precision._jax_split`).
- :class:`ReverseJaxPair`: the layer's variable stays the fp32 master (as under Keras
  ``mixed_*``); the 16-bit copy is a separate ``keras.Variable`` (``blob_copy[compute_dtype]``),
  always ``cast(master)``, which is what the layer computes with (Keras's per-read cast gives
  the same bits).

The other variable is not tracked by the layer (files and ``model.weights`` see the layer's
variables only); ``MasterWeightOptimizer`` makes it part of its own state, so ``fit``'s
compiled step updates it and Keras writes it back when it syncs the state.
"""

import contextlib
import threading

import keras
import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision import _jax_split, _pair_kinds, _policy, _sharding, _weight_files
from tfinit.mixed_precision._pair_kinds import (PairRecord, PseudoFP16Roles, ReverseRoles,
                                                SplitRoles, pair_class)


class JaxPair(PairRecord):
    """How a pair of ``keras.Variable`` objects stores its fp32 master (one kind's roles mixed in).

    Args:
        param: the Keras variable the layer holds.
        other: the pair's other Keras variable (the master, the 16-bit copy or the remainder).
        spec: the pair's :class:`~tfinit._precision.PairSpec`.
    """

    #: whether a 16-bit value assigned to the layer's variable keeps the master where its
    #: bits are ``cast(master)``'s (see :func:`_keeping_unchanged_masters`)
    keeps_unchanged_masters = False

    def __init__(self, param, other, spec):
        super().__init__(param, tuple(param.shape), blob_copy={other.dtype: other},
                         name=param.name)
        self.spec = spec
        self.other = other

    @classmethod
    def made_from(cls, variable, spec):
        """The pair of the layer's fp32 ``variable`` (its exact initial value the master)."""
        raise NotImplementedError

    def master_tensor(self):
        """The exact fp32 master (a backend tensor)."""
        return self.master.value

    def master_array(self):
        """The exact fp32 master (numpy).

        Raises:
            ValueError: the copy was changed without its master.
        """
        master = np.asarray(_sharding.to_numpy(self.master_tensor()), np.float32)
        self.check_copy_matches_master(master)
        return master

    def file_value(self):
        return self.master_array()

    def step_master(self, copy_value, other_value):
        """The master in a compiled step, from the values of the two variables there."""
        return other_value

    def open_step(self):
        """Before the inner optimizer updates ``master``: nothing to do (it is stored)."""

    def close_step(self):
        """After the inner optimizer updated ``master``: copy <- cast(master)."""
        self.refresh()

    def assign_master(self, value):
        """Set the master to ``value`` (cast to float32) exactly and re-make the copy."""
        master = ops.cast(value, MASTER_DTYPE)
        raw_assign(self.master, master)
        raw_assign(self.copy, ops.cast(master, self.copy.dtype))

    def refresh(self):
        """copy <- cast(master)."""
        raw_assign(self.copy, ops.cast(self.master.value, self.copy.dtype))

    def check_copy_matches_master(self, master):
        """Refuse a pair whose 16-bit copy was changed without its ``master`` (numpy, read).

        Raises:
            ValueError: ``copy != cast(master)`` (a plain optimizer or an assign changed the
                copy); using the master would silently drop that change.
        """
        cast = master.astype(_numpy_dtype(self.copy.dtype))
        if cast.tobytes() != np.asarray(_sharding.to_numpy(self.copy.value)).tobytes():
            raise ValueError(
                f"Variable {self.param.path!r}: its 16-bit value was changed without its fp32 "
                "master (a plain Keras optimizer or an assign updates only the 16-bit "
                "variable), so using the master would drop those updates. Train paired "
                "models with tfinit.mixed_precision.MasterWeightOptimizer, or call "
                "tfinit.mixed_precision.set_master_weights after changing weights by hand."
            )


class PseudoFP16JaxPair(PseudoFP16Roles, JaxPair):
    """The layer holds the 16-bit copy; the fp32 master is ``blob_copy["float32"]``."""

    keeps_unchanged_masters = True

    @classmethod
    def made_from(cls, variable, spec):
        # a copy: on torch a keras.Variable made from another's value (a torch.nn.Parameter)
        # would share it, and the master would change dtype with the copy
        master_value = ops.copy(variable.value)
        with _path_of(variable):  # the inner optimizer's variable: the layer's name, path
            master = keras.Variable(master_value, dtype=MASTER_DTYPE, trainable=False,
                                    name=variable.name, **_layout_of(variable))
        internals.set_variable_dtype(variable, spec.compute_dtype,
                                     ops.cast(master_value, spec.compute_dtype))
        return cls(variable, master, spec)


class ReverseJaxPair(ReverseRoles, JaxPair):
    """The layer holds the fp32 master; the 16-bit copy is ``blob_copy[compute_dtype]``."""

    @classmethod
    def made_from(cls, variable, spec):
        copy = keras.Variable(ops.cast(variable.value, spec.compute_dtype),
                              dtype=spec.compute_dtype, trainable=False,
                              name=variable.name + spec.other_suffix,
                              **_layout_of(variable))
        return cls(variable, copy, spec)

    def check_copy_matches_master(self, master):
        """On torch, re-cast a copy its master left behind, else refuse as every pair does.

        Keras's torch optimizers update a variable's tensor in place (no ``assign``), so a
        plain optimizer training a reverse master leaves its copy stale. The layer reads the
        master (Keras's per-read cast), so that master is what trained: the copy is re-made."""
        if keras.backend.backend() == "torch":
            self.refresh()
            return
        super().check_copy_matches_master(master)


class SplitJaxPair(SplitRoles, JaxPair):
    """A pseudo_fp16 pair whose fp32 master is stored split (``master="split"``): ``param`` is
    the bfloat16 variable, ``other`` the int16 remainder (``blob_copy["int16"]``).

    No fp32 value is kept between steps: ``master`` is a scratch fp32 ``keras.Variable``
    without a value, for the inner optimizer to build its state on and update. A step joins
    the master into it (in ``fit``'s compiled step, a value of the step's stateless scope
    only), and splits the updated master back into (copy, remainder).
    """

    def __init__(self, param, remainder, spec, scratch):
        super().__init__(param, remainder, spec)
        self.scratch = scratch

    @classmethod
    def made_from(cls, variable, spec):
        copy, remainder = _jax_split.split(ops.copy(variable.value))
        remainder = keras.Variable(remainder, dtype="int16", trainable=False,
                                   name=variable.name + spec.other_suffix,
                                   **_layout_of(variable))
        with _path_of(variable):  # what the inner optimizer sees: the layer's name and path
            scratch = keras.Variable(ops.zeros(variable.shape, MASTER_DTYPE),
                                     dtype=MASTER_DTYPE, trainable=False, name=variable.name,
                                     **_layout_of(variable))
        internals.release_value(scratch)
        internals.set_variable_dtype(variable, spec.compute_dtype, copy)
        return cls(variable, remainder, spec, scratch)

    @property
    def master(self):
        """The scratch fp32 ``keras.Variable`` the inner optimizer updates (no value between
        steps: read the master with :meth:`master_tensor`)."""
        return self.scratch

    def master_tensor(self):
        return _jax_split.join(self.param.value, self.other.value)

    def step_master(self, copy_value, other_value):
        return _jax_split.join(ops.stop_gradient(copy_value), other_value)

    def assign_master(self, value):
        """Split ``value`` (cast to float32) into the copy and the remainder (exact but for a
        tie above an even copy: 1 ulp toward it)."""
        copy, remainder = _jax_split.split(ops.cast(value, MASTER_DTYPE))
        raw_assign(self.param, copy)
        raw_assign(self.other, remainder)

    def refresh(self):
        """Nothing: the copy is the master's top half."""

    def check_copy_matches_master(self, master):
        """Nothing to check: the copy is the master's top half."""

    def open_step(self):
        raw_assign(self.scratch, self.master_tensor())

    def close_step(self):
        self.assign_master(self.scratch.value)
        if not internals.in_stateless_scope():  # else: a value of that scope only
            internals.release_value(self.scratch)


def _layout_of(variable):
    """The ``keras.Variable`` arguments that give a pair's other variable the layer variable's
    layout (under a ``keras.distribution`` Keras gave it one; the inner optimizer's state
    follows its target's layout), so no added array is laid out otherwise than the variable
    it pairs with; none without a layout."""
    layout = internals.variable_layout(variable)
    return {} if layout is None else {"layout": layout}


def raw_assign(variable, value):
    """Keras's own assign (the paired variable's assign sets its master), of ``value`` laid
    out as ``variable`` is (in a compiled step: a copy made from a master sharded over
    ``shard_over`` is gathered there, in 16 bits)."""
    keras.Variable.assign(variable, _sharding.laid_out(variable, value))


class PairedVariable(_pair_kinds.PairedVariableRules, internals.WideningKerasVariable):
    """The class of a paired Keras variable: every write reaches the master.

    ``assign`` (``set_weights``, a weights file's load, user code, an optimizer updating a
    reverse master) sets the fp32 master to the value exactly and re-casts the copy, so
    ``set_weights(get_weights())`` is lossless and no write leaves a stale copy;
    ``assign_add`` / ``assign_sub`` add to the master. Reads are Keras's own. A penalty of a
    pseudo_fp16 variable is computed on its master (:class:`MasterPenalty`), and a plain
    optimizer is refused where it would update the copy without its master
    (``_pair_kinds.PairedVariableRules``).

    A 16-bit value given to a pseudo_fp16 copy (eager) touches only the elements it changes,
    as on TensorFlow: where its bits are ``cast(master)``'s the master is kept, so
    ``set_weights(get_weights())`` leaves every master bit-identical. This matters after
    ``fit``: Keras's JAX trainer assigns every model variable its value from the compiled
    step, and a frozen paired variable (``trainable = False``, a LoRA-frozen kernel) is no
    optimizer state, so its master would otherwise be rounded to 16 bits.
    """

    def pair(self):
        return pair_of(self)

    def widens_in_layer_call(self):
        pair = pair_of(self)
        return pair is not None and pair.reads_wide()

    def penalty_on_master(self, penalty):
        return MasterPenalty(penalty, self)

    def assign(self, value):
        if _is_deleted(value):
            # Keras's fit on JAX syncs back, after a step that raised, the arrays that step
            # consumed: stored as Keras stores them, so the step's own exception propagates.
            raw_assign(self, value)
            return value
        pair = pair_of(self)
        pair.assign_master(_keeping_unchanged_masters(pair, value))
        return value

    def assign_add(self, value):
        pair = pair_of(self)
        pair.assign_master(ops.add(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value

    def assign_sub(self, value):
        pair = pair_of(self)
        pair.assign_master(ops.subtract(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value


def _is_traced(value):
    """Whether ``value`` is a JAX tracer (a value of a step being compiled)."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return isinstance(value, jax.core.Tracer)


def _is_deleted(value):
    """Whether ``value`` is a JAX array whose buffer is gone (donated to a compiled step)."""
    if keras.backend.backend() != "jax" or _is_traced(value):
        return False
    import jax

    return isinstance(value, jax.Array) and value.is_deleted()


def holds_value(variable):
    """Whether ``variable`` holds a value to compute with: not while Keras's ``fit`` on JAX
    has taken it out for its compiled step (None), nor after a step that raised (the arrays
    it consumed)."""
    return internals.is_initialized(variable) and not _is_deleted(variable.value)


def _keeping_unchanged_masters(pair, value):
    """What to set the master to for an assign of ``value``: ``value``, except where a 16-bit
    ``value`` (eager, outside a stateless scope) given to a pseudo_fp16 pair with an fp32
    master has ``cast(master)``'s bits: there the master itself.

    (Compared with the master's cast, not the copy: Keras empties the model's variables
    during ``fit`` and syncs them back with assigns.)"""
    copy, master = pair.copy, pair.master
    if (not pair.keeps_unchanged_masters or _is_traced(value)
            or internals.in_stateless_scope() or not internals.is_initialized(master)
            or not hasattr(value, "dtype")
            or keras.backend.standardize_dtype(value.dtype) != copy.dtype
            or tuple(value.shape) != tuple(copy.shape)):
        return value
    same = ops.equal(ops.view(ops.convert_to_tensor(value), "int16"),
                     ops.view(ops.cast(master.value, copy.dtype), "int16"))
    return ops.where(same, master.value, ops.cast(value, MASTER_DTYPE))


def _master_valued(master, copy):
    """``master``'s value exactly, whose gradient reaches ``copy`` (widened to float32)."""
    wide = ops.cast(copy, MASTER_DTYPE)
    return ops.add(master, ops.subtract(wide, ops.stop_gradient(wide)))


def overwrites_with_gradient(variable):
    """Keras's ``overwrite_with_gradient`` of ``variable`` (a paired one's without refusal)."""
    return bool(keras.Variable.overwrite_with_gradient.fget(variable))


# The masters' values in a compiled training step (they are optimizer state there, not
# values of the loss's stateless scope): set by the model's compute_loss_and_updates.
_STEP = threading.local()


@contextlib.contextmanager
def step_values(variables, values):
    """Inside: the value of each of ``variables`` in the step being traced is ``values``'s."""
    previous = getattr(_STEP, "values", None)
    _STEP.values = {id(v): value for v, value in zip(variables, values)}
    try:
        yield
    finally:
        _STEP.values = previous


class MasterPenalty:
    """A layer's regularizer applied to the fp32 master of a pseudo_fp16 variable (JAX).

    Called with the variable (``layer.losses`` outside a step): the penalty of the master,
    Keras mixed's value. In a stateless step (``fit``'s), with the copy's value ``x``: the
    penalty of ``master + (x - stop_gradient(x))``, the master's value exactly, whose gradient
    reaches the copy (cast to its 16-bit dtype: JAX's gradient of a 16-bit value is 16-bit).

    Raises:
        ValueError: in a stateless scope that does not carry the master (``evaluate``, a
            custom ``stateless_call``): its penalty cannot be computed there.
    """

    def __init__(self, penalty, variable):
        self.penalty = penalty
        self.variable = variable

    def __call__(self, x):
        pair = pair_of(self.variable)
        if x is self.variable:
            if keras.backend.backend() != "torch":
                return self.penalty(pair.master_tensor())
            # torch's eager step differentiates layer.losses: the master's value, whose
            # gradient reaches the copy the optimizer is given the gradient of.
            return self.penalty(_master_valued(pair.master_tensor(), self.variable.value))
        if not internals.in_stateless_scope():
            return self.penalty(x)
        other = (getattr(_STEP, "values", None) or {}).get(id(pair.other))
        if other is None:
            raise ValueError(
                f"The regularizer of variable {self.variable.path!r} is computed on its fp32 "
                "master, which this stateless computation does not carry (only fit's "
                "training step with MasterWeightOptimizer does on JAX; evaluate and a custom "
                "stateless_call do not). Read the penalty with `model.losses` outside it, or "
                "leave the regularizer out of this computation.")
        return self.penalty(_master_valued(pair.step_master(x, other), x))

    def get_config(self):
        return self.penalty.get_config()


def _numpy_dtype(dtype):
    if keras.backend.standardize_dtype(dtype) == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(keras.backend.standardize_dtype(dtype))


def pair_pending():
    """Pair the float32 trainable weights of every layer built in a scope and not paired yet
    (a layer whose weights Keras has not created yet waits for a later call)."""
    for policy in _policy.policies_to_pair():
        waiting = False
        layers = _policy.layers_to_pair(policy)
        for layer in layers + _quantized_from(policy, layers):
            if _policy.use_normalization_policy(layer, policy):
                continue
            variables = internals.own_trainable_variables(layer)
            if not layer.built or not all(internals.is_initialized(v) for v in variables):
                waiting = True
                continue
            for variable in variables:
                if (pair_of(variable) is None and variable.dtype == MASTER_DTYPE
                        and internals.autocasts(variable) and not _lora_weight(layer, variable)):
                    pair = _make_pair(variable, policy.spec)
                    pair.note_layer(layer)
                    if pair.computes_with_copy:
                        install_layer_hooks(layer)
        if not waiting:
            _policy.done_pairing(policy)


def _quantized_from(policy, layers):
    """The layers nested in ``layers`` (or among them) that ``Model.quantize`` / ``quantize``
    gave a quantized policy made from ``policy``'s name (``"float8_from_mixed_bfloat16"``):
    Keras replaced ``policy`` on them, but their weights were built under it (on TensorFlow
    they were paired when built)."""
    found, seen = [], set()
    for layer in layers:
        for nested in internals.all_layers(layer):
            held = nested.dtype_policy
            if (id(nested) not in seen and held is not policy
                    and held.quantization_mode is not None
                    and held.name.endswith("_from_" + policy.name)):
                seen.add(id(nested))
                found.append(nested)
    return found


def _lora_weight(layer, variable):
    """Whether ``variable`` is a LoRA weight ``layer.enable_lora`` added (Keras makes them
    float32 on purpose, against under- and overflow while fine-tuning): it stays as Keras made
    it, as on TensorFlow, where float32 weights added to a built layer are left alone."""
    return bool(getattr(layer, "lora_enabled", False)) and variable.name.startswith("lora_")


def _make_pair(variable, spec):
    """Pair the layer's fp32 ``variable``: a record of ``spec``'s kind (decided by
    ``_pair_kinds.pair_class``) on the variable, which becomes a :class:`PairedVariable`."""
    kind = pair_class(spec, pseudo_fp16=PseudoFP16JaxPair, reverse=ReverseJaxPair,
                      split=SplitJaxPair)
    pair = kind.made_from(variable, spec)
    if pair.computes_with_copy:  # Keras's optimizers constrain what they update: the master
        pair.master.constraint = variable.constraint
    setattr(variable, _pair_kinds.INFO_ATTRIBUTE, pair)
    internals.make_instance_of(variable, PairedVariable)
    return pair


def _path_of(variable):
    """A name scope in which a Keras variable named ``variable.name`` gets ``variable.path``.

    The inner optimizer keys what it does by path and name (``MultiOptimizer`` routes by
    path, ``exclude_from_weight_decay(var_names=...)`` searches names, its state variables
    are named after the path), so the variable it updates for a pair carries the layer
    variable's, as a ``MasterVariable`` does on TensorFlow.
    """
    parent, _, last = variable.path.rpartition("/")
    if not parent or last != variable.name:
        return contextlib.nullcontext()
    grandparent, _, scope_name = parent.rpartition("/")
    # override_parent: whatever name scope is open now (an optimizer's build, ...) is ignored.
    return keras.name_scope(scope_name, override_parent=grandparent, deduplicate=False)


def pair_of(variable):
    """The :class:`JaxPair` of a paired Keras variable, or None."""
    return _pair_kinds.record_of(variable)


def pairs_of(variables):
    """The distinct pairs among ``variables``, in order."""
    return _pair_kinds.pairs_of(variables, pair_of)


def refresh(pairs):
    """copy <- cast(master) for each pair (a split pair's copy is its master's top half)."""
    for pair in pairs:
        pair.refresh()


def replica_arrays(variable):
    """The per-device replicas of ``variable``'s value (numpy; replica ``k`` on the ``k``-th
    device by id), or the whole value as the one replica (a value not fully replicated)."""
    value = variable.value
    sharding = getattr(value, "sharding", None)
    if sharding is not None and sharding.is_fully_replicated and len(sharding.device_set) > 1:
        shards = sorted(value.addressable_shards, key=lambda shard: shard.device.id)
        return [np.asarray(shard.data) for shard in shards]
    return [np.asarray(_sharding.to_numpy(value))]


def master_for_file(value):
    """What a weights file stores for ``value`` (see ``_weight_files.master_or_value``)."""
    return _weight_files.master_or_value(value, pair_of)


def install_layer_hooks(layer):
    """``.weights.h5`` / ``.keras`` files store ``layer``'s pseudo_fp16 masters (fp32), in the
    layout TensorFlow's tfinit writes; loading assigns them, which sets the masters."""
    if internals.has_object_method(layer, "save_own_variables"):
        return
    save = layer.save_own_variables

    def save_own_variables(store):
        return save(_weight_files.StoreView(store, write=master_for_file))

    internals.set_object_method(layer, "save_own_variables", save_own_variables)

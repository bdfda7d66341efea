"""Master/copy pairs on the ``keras.Variable`` backends, JAX and torch (no variable creator).

A pair is made once, from the layer's own trainable float32 variables, by
:func:`pair_pending`; its kind was decided by
:func:`~tfinit.mixed_precision._common.pair_kinds.pair_class` from the scope's
:class:`~tfinit._precision.PairSpec`, and its record (a ``ParameterInfo``) sits on the Keras
variable:

- :class:`PseudoFP16Pair`: a layer constructed in the scope builds its weights in float32
  (its ``PairPolicy`` asks for float32 while it builds), so each holds the exact fp32
  initializer value. That value becomes the master, a separate fp32 ``keras.Variable``
  (``blob_copy["float32"]``, Caffe2's ``P_fp32``), and the layer's variable becomes its
  16-bit cast (Caffe2's ``P = FloatToHalf(P_fp32)``).
- :class:`SplitPair` (pseudo_fp16, ``master="split"``): the layer's variable becomes the
  bfloat16 copy and the other is the int16 remainder (``blob_copy["int16"]``); the fp32
  master exists only during an optimizer step, in a scratch variable without a value between
  steps (:mod:`tfinit._split_master.jax`).
- :class:`ReversePair`: the layer's variable stays the fp32 master (as under Keras
  ``mixed_*``); the 16-bit copy is a separate ``keras.Variable`` (``blob_copy[compute_dtype]``),
  always ``cast(master)``, which is what the layer computes with (Keras's per-read cast gives
  the same bits).

The other variable is not tracked by the layer (files and ``model.weights`` see the layer's
variables only); ``MasterWeightOptimizer`` makes it part of its own state, so ``fit``'s
compiled step updates it and Keras writes it back when it syncs the state.
"""

import contextlib

import keras
import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit import _stochastic_rounding
from tfinit._split_master import jax as jax_split
from tfinit.mixed_precision._common import pair_kinds, pair_policy, weight_files
from tfinit.mixed_precision._keras_variables import shard_layouts
from tfinit.mixed_precision._common.pair_kinds import (PairRecord, PseudoFP16Roles,
                                                       ReverseRoles, SplitRoles,
                                                       StochasticRoles, pair_class)
from tfinit.mixed_precision._keras_variables import active, paired_variables, save_hooks


class Pair(PairRecord):
    """How a pair of ``keras.Variable`` objects stores its fp32 master (one kind's roles mixed in).

    Args:
        param: the Keras variable the layer holds.
        other: the pair's other Keras variable (the master, the 16-bit copy or the remainder).
        spec: the pair's :class:`~tfinit._precision.PairSpec`.
    """

    #: whether a 16-bit value assigned to the layer's variable keeps the master where its
    #: bits are the copy's the master makes (see ``paired_variables._unchanged_elements``)
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

    def holds_master(self):
        """Whether :meth:`master_tensor` can be read now (not while Keras's JAX ``fit`` has
        taken the master out for its compiled step)."""
        return paired_variables.holds_value(self.master)

    def master_array(self):
        """The exact fp32 master (numpy).

        Raises:
            ValueError: the copy was changed without its master.
        """
        master = np.asarray(shard_layouts.to_numpy(self.master_tensor()), np.float32)
        self.check_copy_matches_master(master)
        return master

    def file_value(self):
        return self.master_array()

    def step_master(self, copy_value, other_value):
        """The master in a compiled step, from the values of the two variables there."""
        return other_value

    def open_step(self):
        """Before the inner optimizer updates ``master``: nothing to do (it is stored)."""

    def close_step(self, rounding=None):
        """After the inner optimizer updated ``master``: copy <- cast(master) (``rounding``:
        the optimizer's ``(seed, step)``, read by stochastic pairs only)."""
        self.refresh()

    def assign_master(self, value):
        """Set the master to ``value`` (cast to float32) exactly and re-make the copy."""
        master = ops.cast(value, MASTER_DTYPE)
        paired_variables.raw_assign(self.master, master)
        paired_variables.raw_assign(self.copy, ops.cast(master, self.copy.dtype))

    def refresh(self):
        """copy <- cast(master)."""
        paired_variables.raw_assign(self.copy, ops.cast(self.master.value, self.copy.dtype))

    def unchanged_copy(self):
        """The 16-bit copy the master makes, ``cast(master)`` (not the copy itself: Keras
        empties the model's variables during ``fit`` and syncs them back with assigns), or
        None while the master holds no value."""
        if not paired_variables.holds_value(self.master):
            return None
        return ops.cast(self.master.value, self.copy.dtype)

    def assign_keeping(self, value, kept):
        """Assign ``value`` but keep the master where the mask ``kept`` is true."""
        self.assign_master(ops.where(kept, self.master.value, ops.cast(value, MASTER_DTYPE)))

    def check_copy_matches_master(self, master):
        """Refuse a pair whose 16-bit copy was changed without its ``master`` (numpy, read).

        Raises:
            ValueError: ``copy != cast(master)`` (a plain optimizer or an assign changed the
                copy); using the master would silently drop that change.
        """
        cast = master.astype(_numpy_dtype(self.copy.dtype))
        if cast.tobytes() != np.asarray(shard_layouts.to_numpy(self.copy.value)).tobytes():
            raise ValueError(
                f"Variable {self.param.path!r}: its 16-bit value was changed without its fp32 "
                "master (a plain Keras optimizer or an assign updates only the 16-bit "
                "variable), so using the master would drop those updates. Train paired "
                "models with tfinit.mixed_precision.MasterWeightOptimizer, or call "
                "tfinit.mixed_precision.set_master_weights after changing weights by hand."
            )


class PseudoFP16Pair(PseudoFP16Roles, Pair):
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


class ReversePair(ReverseRoles, Pair):
    """The layer holds the fp32 master; the 16-bit copy is ``blob_copy[compute_dtype]``."""

    @classmethod
    def made_from(cls, variable, spec):
        with _path_of(variable):  # its own path beside the master's: unique, stable
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
        if active.OPTIMIZERS_WRITE_IN_PLACE:
            self.refresh()
            return
        super().check_copy_matches_master(master)


class SplitPair(SplitRoles, Pair):
    """A pseudo_fp16 pair whose fp32 master is stored split (``master="split"``): ``param`` is
    the bfloat16 variable, ``other`` the int16 remainder (``blob_copy["int16"]``).

    No fp32 value is kept between steps: ``master`` is a scratch fp32 ``keras.Variable``
    without a value, for the inner optimizer to build its state on and update. A step joins
    the master into it (in ``fit``'s compiled step, a value of the step's stateless scope
    only), and splits the updated master back into (copy, remainder).
    """

    keeps_unchanged_masters = True

    def __init__(self, param, remainder, spec, scratch):
        super().__init__(param, remainder, spec)
        self.scratch = scratch

    @classmethod
    def made_from(cls, variable, spec):
        copy, remainder = jax_split.split(ops.copy(variable.value))
        with _path_of(variable):  # its own path beside the layer variable's: unique, stable
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
        return jax_split.join(self.param.value, self.other.value)

    def holds_master(self):
        return (paired_variables.holds_value(self.param)
                and paired_variables.holds_value(self.other))

    def step_master(self, copy_value, other_value):
        return jax_split.join(ops.stop_gradient(copy_value), other_value)

    def assign_master(self, value):
        """Split ``value`` (cast to float32) into the copy and the remainder (exact but for a
        tie above an even copy: 1 ulp toward it)."""
        copy, remainder = jax_split.split(ops.cast(value, MASTER_DTYPE))
        paired_variables.raw_assign(self.param, copy)
        paired_variables.raw_assign(self.other, remainder)

    def refresh(self):
        """Nothing: the copy is the master's top half."""

    def unchanged_copy(self):
        """The copy itself (the master's top half), or None while the copy or the remainder
        holds no value (in ``fit``'s sync)."""
        if not (paired_variables.holds_value(self.param)
                and paired_variables.holds_value(self.other)):
            return None
        return self.param.value

    def assign_keeping(self, value, kept):
        """Assign the bfloat16 ``value`` (remainder 0) but keep copy and remainder where the
        mask ``kept`` is true (not re-split: the stored halves stay bit for bit)."""
        copy, remainder = jax_split.split(ops.cast(value, MASTER_DTYPE))
        paired_variables.raw_assign(self.param, ops.where(kept, self.param.value, copy))
        paired_variables.raw_assign(self.other, ops.where(kept, self.other.value, remainder))

    def check_copy_matches_master(self, master):
        """Nothing to check: the copy is the master's top half."""

    def open_step(self):
        paired_variables.raw_assign(self.scratch, self.master_tensor())

    def close_step(self, rounding=None):
        self.assign_master(self.scratch.value)
        if not internals.in_stateless_scope():  # else: a value of that scope only
            internals.release_value(self.scratch)


# -- master="stochastic": begin ------------------------------------------------------------
class StochasticPair(StochasticRoles, SplitPair):
    """``master="stochastic"``: ``param`` is the bfloat16 weight, ``other`` an empty int16
    placeholder (``blob_copy["int16"]``, no element). No master: the scratch fp32 variable
    the inner optimizer updates holds the widened weight during a step only, and
    ``close_step`` rounds the update back stochastically (``tfinit._stochastic_rounding``;
    ``stream``: set by the optimizer that builds for it). Writes other than the optimizer's
    (``assign_master``: files, ``set_master_weights``) round to nearest."""

    keeps_unchanged_masters = False

    @classmethod
    def made_from(cls, variable, spec):
        copy = ops.cast(variable.value, spec.compute_dtype)
        with _path_of(variable):
            placeholder = keras.Variable(np.zeros((0,), np.int16), dtype="int16",
                                         trainable=False, name=variable.name + spec.other_suffix)
        with _path_of(variable):
            scratch = keras.Variable(ops.zeros(variable.shape, MASTER_DTYPE),
                                     dtype=MASTER_DTYPE, trainable=False, name=variable.name,
                                     **_layout_of(variable))
        internals.release_value(scratch)
        internals.set_variable_dtype(variable, spec.compute_dtype, copy)
        return cls(variable, placeholder, spec, scratch)

    def master_tensor(self):
        return _stochastic_rounding.widen(self.param.value)

    def holds_master(self):
        return paired_variables.holds_value(self.param)

    def step_master(self, copy_value, other_value):
        return _stochastic_rounding.widen(ops.stop_gradient(copy_value))

    def assign_master(self, value):
        """The weight <- ``value`` rounded to nearest bfloat16 (there is no master)."""
        paired_variables.raw_assign(self.param, ops.cast(ops.cast(value, MASTER_DTYPE),
                                                         self.spec.compute_dtype))

    def unchanged_copy(self):
        return self.param.value if paired_variables.holds_value(self.param) else None

    def assign_keeping(self, value, kept):
        paired_variables.raw_assign(self.param, ops.where(
            kept, self.param.value, ops.cast(value, self.spec.compute_dtype)))

    def close_step(self, rounding=None):
        seed, step = rounding
        paired_variables.raw_assign(self.param, _stochastic_rounding.round_to_bfloat16(
            self.scratch.value, seed, step, self.stream))
        if not internals.in_stateless_scope():  # else: a value of that scope only
            internals.release_value(self.scratch)
# -- master="stochastic": end --------------------------------------------------------------


def _layout_of(variable):
    """The ``keras.Variable`` arguments that give a pair's other variable the layer variable's
    layout (under a ``keras.distribution`` Keras gave it one; the inner optimizer's state
    follows its target's layout), so no added array is laid out otherwise than the variable
    it pairs with; none without a layout."""
    layout = internals.variable_layout(variable)
    return {} if layout is None else {"layout": layout}


def _numpy_dtype(dtype):
    if keras.backend.standardize_dtype(dtype) == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(keras.backend.standardize_dtype(dtype))


def pair_pending():
    """Pair the float32 trainable weights of every layer built in a scope and not paired yet
    (a layer whose weights Keras has not created yet waits for a later call)."""
    for policy in pair_policy.policies_to_pair():
        waiting = False
        layers = pair_policy.layers_to_pair(policy)
        for layer in layers + _quantized_from(policy, layers):
            if pair_policy.use_normalization_policy(layer, policy):
                continue
            variables = internals.own_trainable_variables(layer)
            if not layer.built or not all(internals.is_initialized(v) for v in variables):
                waiting = True
                continue
            for variable in variables:
                if (pair_of(variable) is None and variable.dtype == MASTER_DTYPE
                        and pair_kinds.pairs_up(
                            policy.spec, _asked_dtype(layer, variable, policy.spec), variable,
                            added_to_built_layer=_lora_weight(layer, variable))):
                    pair = _make_pair(variable, policy.spec)
                    pair.note_layer(layer)
                    if pair.computes_with_copy:
                        save_hooks.install_layer_hooks(layer)
        if not waiting:
            pair_policy.done_pairing(policy)


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


def _asked_dtype(layer, variable, spec):
    """The dtype ``layer`` (holding the scope's policy) asked for ``variable`` in. Its weights
    are all built in float32 here (the exact fp32 masters), so: the policy's own dtype (the
    compute dtype in pseudo_fp16), but float32 for the weights Keras makes float32 on
    purpose (uncast ones, float8 scales; LoRA's)."""
    if not internals.autocasts(variable) or _lora_weight(layer, variable):
        return MASTER_DTYPE
    return spec.compute_dtype if spec.is_pseudo else MASTER_DTYPE


def _lora_weight(layer, variable):
    """Whether ``variable`` is a LoRA weight ``layer.enable_lora`` added (Keras makes them
    float32 on purpose, against under- and overflow while fine-tuning): it stays as Keras made
    it, as on TensorFlow, where float32 weights added to a built layer are left alone."""
    return bool(getattr(layer, "lora_enabled", False)) and variable.name.startswith("lora_")


def _make_pair(variable, spec):
    """Pair the layer's fp32 ``variable``: a record of ``spec``'s kind (decided by
    ``pair_kinds.pair_class``) on the variable, which becomes a :class:`PairedVariable`."""
    kind = pair_class(spec, pseudo_fp16=PseudoFP16Pair, reverse=ReversePair,
                      split=SplitPair, stochastic=StochasticPair)
    pair = kind.made_from(variable, spec)
    if pair.computes_with_copy:  # Keras's optimizers constrain what they update: the master
        pair.master.constraint = variable.constraint
    setattr(variable, pair_kinds.INFO_ATTRIBUTE, pair)
    internals.make_instance_of(variable, paired_variables.PairedVariable)
    return pair


def _path_of(variable):
    """A name scope in which a Keras variable named ``variable.name`` gets ``variable.path``
    (and one named ``variable.name + suffix`` the path beside it: every variable a pair adds
    has a unique path, the same in every process that builds the model alike, which
    ``get_state_tree``, ``OrbaxCheckpoint`` and ``BackupAndRestore`` key by).

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
    """The :class:`Pair` of a paired Keras variable, or None."""
    return pair_kinds.record_of(variable)


def pairs_of(variables):
    """The distinct pairs among ``variables``, in order."""
    return pair_kinds.pairs_of(variables, pair_of)


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
    return [np.asarray(shard_layouts.to_numpy(value))]


def master_for_file(value):
    """What a weights file stores for ``value`` (see ``weight_files.master_or_value``)."""
    return weight_files.master_or_value(value, pair_of)

"""Master/copy pairs on TensorFlow: how a pair's ``tf.Variable`` objects hold its master.

A paired variable is the backend ``tf.Variable`` (or distributed variable) that Keras or user
code holds. The one thing tfinit attaches to it is its pair record, whose kind (pseudo_fp16,
reverse, split) was decided once when the pair was made (:func:`make_pair`, through
:func:`~tfinit.mixed_precision._common.pair_kinds.pair_class`); the roles of its two variables are
the backend-neutral ones of :mod:`~tfinit.mixed_precision._common.pair_kinds`:

- :class:`PseudoFP16Pair`: ``param`` is the 16-bit variable, ``blob_copy[tf.float32]`` the
  master (Caffe2's PseudoFP16Initializer).
- :class:`ReversePair`: ``param`` is the fp32 variable (the master), ``blob_copy[16-bit]`` the
  copy (Caffe2's ReversePseudoFP16Initializer).
- :class:`SplitPair` (pseudo_fp16, ``master="split"``): ``param`` is the bfloat16 variable,
  ``blob_copy[tf.int16]`` the remainder; the master is rebuilt from the two
  (``tfinit._split_master``) and no fp32 variable exists between steps.

Every read and write of a master goes through :meth:`Pair.master_value` /
:meth:`Pair.assign_master` / :meth:`Pair.add_to_master`, whichever way the pair stores it.
"""

import contextlib

import numpy as np
import tensorflow as tf

from tfinit import _keras_internals as internals
from tfinit import _stochastic_rounding
from tfinit._split_master import tensorflow as tf_split
from tfinit.mixed_precision._common import pair_kinds
from tfinit.mixed_precision._common import weight_files
from tfinit.mixed_precision._common.pair_kinds import (PairRecord, PseudoFP16Roles, ReverseRoles,
                                                SplitRoles, StochasticRoles, pair_class)

backend_variable = internals.backend_variable
variable_label = pair_kinds.variable_label


class Pair(PairRecord):
    """How a pair of ``tf.Variable`` objects stores its fp32 master (one kind's roles mixed in).

    Args:
        param: the variable the code holds (a Keras variable, or the ``tf.Variable``).
        shape: its shape.
        blob_copy: ``{dtype: variable}``, the pair's other variable.
        name: the parameter's name.
        spec: the pair's :class:`~tfinit._precision.PairSpec`.
    """

    def __init__(self, param, shape, blob_copy, *, name, spec):
        super().__init__(param, shape, blob_copy=blob_copy, name=name)
        self.spec = spec
        #: the master as the Keras variable an optimizer updates
        #: (``paired_variables.master_variable``)
        self.master_variable = None

    @property
    def held(self):
        return backend_variable(self.param)

    @property
    def other(self):
        """The ``blob_copy`` variable (the master, the copy or the remainder)."""
        (other,) = self.blob_copy.values()
        return backend_variable(other)

    def master_value(self, parts=None):
        """The exact fp32 master as a tensor; ``parts`` are one replica's variables in
        :meth:`stored` order (default: the pair's own)."""
        return (parts or [self.master])[0].read_value()

    def master_array(self):
        """The exact fp32 master (numpy).

        Raises:
            ValueError: the copy was changed without its master (see
                :func:`check_copy_matches_master`).
        """
        master = self.master_value()
        check_copy_matches_master(self, master)
        return master.numpy()

    def assign_master(self, value):
        """Set the master to ``value`` (cast to float32) exactly and re-make the copy."""
        self.master.assign(tf.cast(value, tf.float32))
        return refresh([self])

    def add_to_master(self, delta):
        """master += ``delta`` (float32 arithmetic) and re-make the copy."""
        self.master.assign_add(tf.cast(delta, tf.float32))
        return refresh([self])

    def refresh_updates(self):
        """The ``(variable, fn, args)`` updates that re-make the copy from the master."""
        return [(self.copy, _assign_cast, (self.master,))]

    def optimized_variable(self):
        """The fp32 ``tf.Variable`` an optimizer updates in place of the pair."""
        return self.master

    def checkpoint_tensors(self, tf_var):
        """What ``tf.train.Checkpoint`` writes under ``tf_var``'s key: the exact master
        (``tf.saved_model.save`` writes every variable as it is)."""
        if internals.in_saved_model_save():
            return internals.serialize_variable(tf_var)
        check_copy_matches_master(self)
        return internals.serialize_variable(self.master)

    def restore_tensors(self, tensors):
        """Restore the master bit-exactly from checkpoint ``tensors``; re-make the copy."""
        op = internals.restore_variable(self.master, tensors)
        with tf.control_dependencies(_deps(op)):
            return _assign_cast(self.copy, self.master.read_value())

    def file_value(self):
        return self.master_array()


class PseudoFP16Pair(PseudoFP16Roles, Pair):
    """The code holds the 16-bit copy; the fp32 master is ``blob_copy[tf.float32]``."""


class ReversePair(ReverseRoles, Pair):
    """The code holds the fp32 master; the 16-bit copy is ``blob_copy[compute_dtype]``."""

    def checkpoint_tensors(self, tf_var):
        return internals.serialize_variable(tf_var)  # the variable is the master


class SplitPair(SplitRoles, Pair):
    """The code holds the bfloat16 copy, the master's top half; ``blob_copy[tf.int16]`` is the
    remainder. No fp32 variable between steps: an optimizer updates a scratch one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: whether the scratch keeps its fp32 value between steps (XLA)
        self.scratch_kept = False

    @property
    def master(self):
        raise TypeError(f"Pair {self.name!r} stores its master split (bfloat16 copy + "
                        "int16 remainder): use master_value() / assign_master().")

    def master_value(self, parts=None):
        copy, remainder = parts or [self.copy, self.remainder]
        return tf_split.join(copy.read_value(), remainder.read_value())

    def assign_master(self, value):
        copy, remainder = tf_split.split(tf.cast(value, tf.float32))
        ops = [self.copy.assign(copy), self.remainder.assign(remainder)]
        if self.scratch_kept:
            ops.append(_scratch(self).assign(tf_split.join(copy, remainder)))
        return tf.group(*ops)

    def add_to_master(self, delta):
        return self.assign_master(self.master_value() + tf.cast(delta, tf.float32))

    def refresh_updates(self):
        return []  # the copy is always the master's top half

    def optimized_variable(self):
        return _new_scratch(self)

    def checkpoint_tensors(self, tf_var):
        if internals.in_saved_model_save():
            return internals.serialize_variable(tf_var)
        master = self.master_value()
        check_copy_matches_master(self, master)
        return {"VARIABLE_VALUE": master}

    def restore_tensors(self, tensors):
        return self.assign_master(tensors["VARIABLE_VALUE"])


# -- master="stochastic": begin ------------------------------------------------------------
class StochasticPair(StochasticRoles, SplitPair):
    """``master="stochastic"``: the code holds the bfloat16 weight; ``blob_copy[tf.int16]`` is
    an empty placeholder. No master: an optimizer updates a scratch fp32 variable holding
    the widened weight during a step, rounded back stochastically after it
    (:func:`close_masters`; ``stream``: set by the optimizer that builds for it). Writes
    other than the optimizer's round to nearest."""

    def master_value(self, parts=None):
        (copy, *_) = parts or [self.copy]
        return _stochastic_rounding.widen(copy.read_value())

    def assign_master(self, value):
        copy = tf.cast(tf.cast(value, tf.float32), tf.bfloat16)
        ops = [self.copy.assign(copy)]
        if self.scratch_kept:
            ops.append(_scratch(self).assign(_stochastic_rounding.widen(copy)))
        return tf.group(*ops)


def _stochastic_pairs(pairs):
    return [pair for pair in pairs if pair.rounds_stochastically]


def _open_widened(scratch, copy):
    return scratch.assign(_stochastic_rounding.widen(copy.read_value()))


# One fused loop (XLA; the same bits as the unfused ops, which the numpy-reference test checks
# on every backend): unfused, the hash's passes cost a step about 2x.
# (traced per shape: the hash needs the static element count)
_round = tf.function(_stochastic_rounding.round_to_bfloat16, jit_compile=True)


def _close_rounded(copy, scratch, seed, step, stream, kept):
    # the scratch's shape is unknown (it is empty between steps): the copy's is static
    updated = tf.reshape(scratch.read_value(), copy.shape)
    rounded = _round(updated, tf.constant(seed, tf.int32), tf.cast(step, tf.int32),
                     tf.constant(stream, tf.int32))
    if kept:
        return tf.group(copy.assign(rounded),
                        scratch.assign(_stochastic_rounding.widen(rounded)))
    with tf.control_dependencies([copy.assign(rounded)]):
        return empty(scratch)
# -- master="stochastic": end --------------------------------------------------------------


def make_pair(param, shape, blob_copy, *, name, spec):
    """The pair record of ``spec``'s kind (decided by ``pair_kinds.pair_class``)."""
    kind = pair_class(spec, pseudo_fp16=PseudoFP16Pair, reverse=ReversePair, split=SplitPair,
                      stochastic=StochasticPair)
    return kind(param, shape, blob_copy, name=name, spec=spec)


def check_copy_matches_master(pair, master=None):
    """Refuse to save a pair whose 16-bit copy was changed behind its master's back
    (``master``: the pair's master value, when the caller has read it already).

    Raises:
        ValueError: ``copy != cast(master)`` (e.g. a plain Keras optimizer trained the copy);
            saving the master would silently drop those updates.
    """
    if not tf.executing_eagerly():
        return
    master = pair.master_value() if master is None else master
    cast = tf.cast(master, pair.copy.dtype).numpy()
    if cast.tobytes() != pair.copy.numpy().tobytes():
        raise ValueError(
            f"Variable {pair.name!r}: its 16-bit value was changed without its fp32 master "
            "(a plain Keras optimizer updates only the 16-bit variable), so saving the master "
            "would drop those updates. Train paired models with "
            "tfinit.mixed_precision.MasterWeightOptimizer, or call "
            "tfinit.mixed_precision.set_master_weights after changing weights by hand."
        )


def _deps(op):
    return [] if op is None or tf.executing_eagerly() else tf.nest.flatten(op)


def attach(tf_var, pair):
    """Record ``pair`` (the variable's one tfinit record) on the backend variable."""
    setattr(tf_var, pair_kinds.INFO_ATTRIBUTE, pair)


def pair_of(variable):
    """The :class:`Pair` of a paired variable (Keras, tf or distributed), or None."""
    tf_var = backend_variable(variable)
    pair = pair_kinds.record_of(tf_var)
    if pair is None:
        pair = pair_kinds.record_of(internals.distributed_container(tf_var))
    return pair


def _pair_of_info(info):
    if not isinstance(info, Pair):
        raise ValueError(f"ParameterInfo {info.name!r} is not a master/copy pair.")
    return info


def master_of(info):
    """The fp32 variable of an fp32-master pair."""
    return _pair_of_info(info).master


def copy_of(info):
    """The 16-bit variable the master's value is re-cast into."""
    return _pair_of_info(info).copy


def _assign_cast(copy, master):
    return copy.assign(tf.cast(master, copy.dtype))


# The rebuild and the split as one fused loop each (XLA; the same bits as the unfused ops,
# tests/test_split_master.py): unfused, their seven elementwise passes would cost a CPU step
# of a 1M-parameter MLP about 40 %.
_join = tf.function(tf_split.join, jit_compile=True, reduce_retracing=True)
_split = tf.function(tf_split.split, jit_compile=True, reduce_retracing=True)


@tf.function(jit_compile=True, reduce_retracing=True)
def _join_all(copies, remainders):
    # One compiled call for every pair of a model (a call per pair costs its launch).
    return [tf_split.join(c, r) for c, r in zip(copies, remainders, strict=True)]


@tf.function(jit_compile=True, reduce_retracing=True)
def _split_all(masters):
    return [tf_split.split(m) for m in masters]


def _open_split(scratch, copy, remainder):
    return scratch.assign(_join(copy.read_value(), remainder.read_value()))


def _close_split(copy, remainder, scratch):
    new_copy, new_remainder = _split(scratch.read_value())
    with tf.control_dependencies([copy.assign(new_copy), remainder.assign(new_remainder)]):
        return empty(scratch)


def _close_split_kept(copy, remainder, scratch):
    new_copy, new_remainder = tf_split.split(scratch.read_value())
    # The kept scratch is the master (copy, remainder) hold: a tie moves 1 ulp here too.
    return tf.group(copy.assign(new_copy), remainder.assign(new_remainder),
                    scratch.assign(tf_split.join(new_copy, new_remainder)))


def components(variable):
    """The per-replica (local) components of a variable; a plain variable is its own one."""
    variable = backend_variable(variable)
    values = getattr(variable, "values", None)
    return list(values) if values is not None and not callable(values) else [variable]


def replica_arrays(variable):
    """The per-replica values of ``variable`` (numpy), in its components' order."""
    return [np.asarray(component.numpy()) for component in components(variable)]


def keep_scratches(pairs):
    """For a step XLA compiles: XLA cannot change a variable's shape, so each split pair's
    scratch is filled with its master now (eagerly, before the compiled step first runs) and
    keeps the exact master from then on (4 more bytes per parameter): every write of the
    master (:meth:`Pair.assign_master`, each step) writes it too."""
    for pair in _split_pairs(pairs):
        if not pair.scratch_kept:
            with tf.init_scope():
                for scratch, copy, remainder in zip(components(_scratch(pair)),
                                                    components(pair.copy),
                                                    components(pair.remainder), strict=True):
                    _open_split(scratch, copy, remainder)
            pair.scratch_kept = True
    for pair in _stochastic_pairs(pairs):
        if not pair.scratch_kept:
            with tf.init_scope():
                for scratch, copy in zip(components(_scratch(pair)), components(pair.copy),
                                         strict=True):
                    _open_widened(scratch, copy)
            pair.scratch_kept = True


def empty_value(rank):
    """The value a split pair's scratch variable holds between steps: no element (a scalar
    pair's holds its one element)."""
    return tf.zeros([0] * rank if rank else [], tf.float32)


def empty(scratch):
    """Drop the fp32 value a split pair's scratch variable holds."""
    return scratch.assign(empty_value(scratch.shape.rank))


def _split_pairs(pairs):
    return [pair for pair in pairs if pair.stores_master_split]


def _scratch(pair):
    return backend_variable(pair.master_variable)


def _new_scratch(pair):
    """An fp32 variable for a split pair's master, created where the pair lives, empty."""
    copy = pair.copy
    owner = internals.owning_strategy(copy)
    with owner.scope() if owner is not None else contextlib.nullcontext():
        # Known rank, unknown dimensions: it holds an empty tensor of that rank between steps
        # (the Keras variable around it has the full shape the optimizer's slots are built from).
        return tf.Variable(empty_value(copy.shape.rank), trainable=False,
                           shape=tf.TensorShape([None] * copy.shape.rank),
                           name=f"{pair.name}_fp32_scratch")


def _run(updates):
    """Run ``(variable, fn, args)`` updates per replica, in any distribution context."""
    if not updates:
        return None

    def update(strategy, updates):
        for variable, fn, args in updates:
            strategy.extended.update(variable, fn, args=args, group=False)

    strategy = tf.distribute.get_strategy()
    owner = internals.owning_strategy(updates[0][0])
    if owner is not None and owner is not strategy:
        # Distributed pairs refreshed outside their strategy's scope (e.g. Keras's end-of-fit
        # finalize_variable_values, or after fit returns): update them through their owner.
        with owner.scope():
            update(owner, updates)
    elif tf.distribute.in_cross_replica_context():
        update(strategy, updates)
    else:
        internals.maybe_merge_call(update, strategy, updates)
    return None


def refresh(pairs):
    """copy <- cast(master) for each fp32-master pair, in any distribution context (a split
    pair's copy is always its master's top half: nothing to do)."""
    return _run([update for pair in pairs for update in pair.refresh_updates()])


def _one_device(pairs):
    """Whether ``pairs`` are updated in one call per step: no distribution strategy."""
    return bool(pairs) and not tf.distribute.has_strategy() and all(
        internals.owning_strategy(p.copy) is None for p in pairs)


def open_masters(pairs):
    """Before an optimizer step: each split pair's scratch variable <- its exact master (a
    kept scratch holds it already: refilling it inside an XLA step would let XLA fuse the
    rebuild into the optimizer's reductions, which can then sum in another order)."""
    _run([(_scratch(pair), _open_widened, (pair.copy,))
          for pair in _stochastic_pairs(pairs) if not pair.scratch_kept])
    pairs = [pair for pair in _split_pairs(pairs) if not pair.scratch_kept]
    if _one_device(pairs):
        masters = _join_all([p.copy.read_value() for p in pairs],
                            [p.remainder.read_value() for p in pairs])
        for pair, master in zip(pairs, masters, strict=True):
            _scratch(pair).assign(master)
        return None
    return _run([(_scratch(pair), _open_split, (pair.copy, pair.remainder)) for pair in pairs])


def close_masters(pairs, rounding=None):
    """After an optimizer step: copies re-made from the updated masters; each split pair's
    master split back into (copy, remainder) and its scratch emptied (or kept, under XLA);
    each stochastic pair's update rounded into its weight with ``rounding`` (the optimizer's
    ``(seed, step)``)."""
    refresh(pairs)
    if rounding is not None:
        seed, step = rounding
        _run([(pair.copy, _close_rounded,
               (_scratch(pair), seed, step, pair.stream, pair.scratch_kept))
              for pair in _stochastic_pairs(pairs)])
    kept = [pair for pair in _split_pairs(pairs) if pair.scratch_kept]
    emptied = [pair for pair in _split_pairs(pairs) if not pair.scratch_kept]
    if _one_device(emptied):
        halves = _split_all([_scratch(p).read_value() for p in emptied])
        for pair, (copy, remainder) in zip(emptied, halves, strict=True):
            with tf.control_dependencies([pair.copy.assign(copy),
                                          pair.remainder.assign(remainder)]):
                empty(_scratch(pair))
        emptied = []
    return _run([(pair.copy, _close_split, (pair.remainder, _scratch(pair)))
                 for pair in emptied]
                + [(pair.copy, _close_split_kept, (pair.remainder, _scratch(pair)))
                   for pair in kept])


def pairs_of(variables):
    """The distinct pairs among ``variables``, in order."""
    return pair_kinds.pairs_of(variables, pair_of)


def master_for_file(value):
    """What a weights file stores for ``value`` (see ``weight_files.master_or_value``)."""
    return weight_files.master_or_value(value, pair_of)


def pair_pending():
    """Nothing: on TensorFlow a pair is made when its variable is created."""
    return None  # a statement: AutoGraph cannot convert a docstring-only body

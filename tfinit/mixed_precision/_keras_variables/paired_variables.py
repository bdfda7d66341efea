"""The Keras variables of a pair on the ``keras.Variable`` backends (JAX, torch):
``PairedVariable``, the class a paired layer variable takes (every write reaches the
master), and ``MasterPenalty``, a regularizer computed on the master.

A penalty in ``fit``'s compiled JAX step reads the master's value of the step
(:func:`step_values`); what JAX and torch do differently is asked of ``active``.
"""

import contextlib
import threading

import keras
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import MASTER_DTYPE
from tfinit.mixed_precision._common import pair_kinds
from tfinit.mixed_precision._keras_variables import shard_layouts
from tfinit.mixed_precision._keras_variables import active


def raw_assign(variable, value):
    """Keras's own assign (the paired variable's assign sets its master), of ``value`` laid
    out as ``variable`` is (in a compiled step: a copy made from a master sharded over
    ``shard_over`` is gathered there, in 16 bits)."""
    keras.Variable.assign(variable, shard_layouts.laid_out(variable, value))


class PairedVariable(pair_kinds.PairedVariableRules, internals.WideningKerasVariable):
    """The class of a paired Keras variable: every write reaches the master.

    ``assign`` (``set_weights``, a weights file's load, user code, an optimizer updating a
    reverse master) sets the fp32 master to the value exactly and re-casts the copy, so
    ``set_weights(get_weights())`` is lossless and no write leaves a stale copy;
    ``assign_add`` / ``assign_sub`` add to the master. Reads are Keras's own, but for a read
    Keras mixed makes uncast in float32 (:meth:`wide_layer_read`). A penalty of a
    pseudo_fp16 variable is computed on its master (:class:`MasterPenalty`), and a plain
    optimizer is refused where it would update the copy without its master
    (``pair_kinds.PairedVariableRules``).

    A 16-bit value given to a pseudo_fp16 copy (eager) touches only the elements it changes,
    as on TensorFlow: where its bits are ``cast(master)``'s the master is kept, so
    ``set_weights(get_weights())`` leaves every master bit-identical. Keras's JAX trainer
    writing a compiled step's values back (after ``fit``, ``evaluate``, ``predict`` and the
    per-batch calls) stores them as Keras does, the master left alone
    (:func:`_written_back_from_a_step`): a frozen paired variable (``trainable = False``, a
    LoRA-frozen kernel) is no optimizer state, and no call that does not train changes a
    master.
    """

    def pair(self):
        return pair_kinds.record_of(self)

    def wide_layer_read(self, value):
        """A read Keras mixed makes uncast in float32 (``pair.reads_wide()``): the master's
        value, whose gradient reaches the copy; the copy widened where the computation does
        not carry the master (JAX's compiled test and predict steps)."""
        pair = pair_kinds.record_of(self)
        if pair is None or not pair.reads_wide():
            return None
        master = _master_of_read(pair, value)
        if master is None:
            return ops.cast(value, MASTER_DTYPE)
        return _master_valued(master, value)

    def penalty_on_master(self, penalty):
        return MasterPenalty(penalty, self)

    def assign(self, value):
        if active.is_deleted(value) or _written_back_from_a_step(self, value):
            # Keras's JAX trainer writing back a step's values (after a step that raised: the
            # arrays that step consumed): stored as Keras stores them, the master left alone
            # (and the step's own exception propagates).
            raw_assign(self, value)
            return value
        pair = pair_kinds.record_of(self)
        kept = _unchanged_elements(pair, value)
        if kept is None:
            pair.assign_master(value)
        else:
            pair.assign_keeping(value, kept)
        return value

    def assign_add(self, value):
        pair = pair_kinds.record_of(self)
        pair.assign_master(ops.add(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value

    def assign_sub(self, value):
        pair = pair_kinds.record_of(self)
        pair.assign_master(ops.subtract(pair.master_tensor(), ops.cast(value, MASTER_DTYPE)))
        return value


def holds_value(variable):
    """Whether ``variable`` holds a value to compute with: not while Keras's ``fit`` on JAX
    has taken it out for its compiled step (None), nor while it holds an array a compiled
    step consumed (donated): after a step that raised, and, after ``train_on_batch``'s step
    (which leaves the values in the variables), until Keras has synced it back."""
    return internals.is_initialized(variable) and not active.is_deleted(variable.value)


def _written_back_from_a_step(variable, value):
    """Whether assigning ``value`` to ``variable`` is Keras's JAX trainer writing back what
    its compiled step returned: eager, outside a stateless scope, to a variable that holds no
    value because the trainer took it out for the step (``fit``, ``evaluate``, ``predict``)
    or the step consumed it (``train_on_batch``, ``test_on_batch``, ``predict_on_batch``).

    Such a value is stored as is, the pair's other variable left alone: the step computed the
    copy from the master (``close_step``: ``cast(master)``, a split master's top half), and
    where it trained the master, the master (or the remainder) is optimizer state the same
    sync writes next; where it did not (a call that does not train, a frozen variable), the
    value is the copy the step was given, so the master is the one it had. Re-making the
    master from the 16-bit value instead would round a split master's low half away (its
    remainder: the sync emptied the copy it would be compared with) and re-split every
    variable eagerly after every per-batch call."""
    return (not holds_value(variable) and not active.is_traced(value)
            and not internals.in_stateless_scope())


def _unchanged_elements(pair, value):
    """Where an assign of ``value`` keeps the master: None (nowhere), or a mask of the
    elements of a 16-bit ``value`` (eager, outside a stateless scope) given to a pseudo_fp16
    pair (fp32 or split master) whose bits are the copy's its master makes
    (``pair.unchanged_copy()``). So ``set_weights(get_weights())`` and Keras's
    ``set_state_tree`` (whatever order it assigns the copies and the optimizer's variables
    in) leave every master bit-identical.

    A master holding no value is not compared (``unchanged_copy()`` is None): Keras's JAX
    trainer syncs the model's variables back before the optimizer's, so while it assigns the
    copy the master, optimizer state of the step, is empty (``fit``) or the array the step
    consumed (``train_on_batch``); its own sync, next, sets it."""
    copy = pair.copy
    if (not pair.keeps_unchanged_masters or active.is_traced(value)
            or internals.in_stateless_scope() or not hasattr(value, "dtype")
            or keras.backend.standardize_dtype(value.dtype) != copy.dtype
            or tuple(value.shape) != tuple(copy.shape)):
        return None
    reference = pair.unchanged_copy()
    if reference is None:
        return None
    return ops.equal(ops.view(ops.convert_to_tensor(value), "int16"),
                     ops.view(reference, "int16"))


def _master_of_read(pair, copy_value):
    """The fp32 master for a read of ``pair``'s copy whose value is ``copy_value``: in
    ``fit``'s compiled step the step's value (:func:`step_values`), eagerly the variable's;
    None in a compiled step that does not carry it (its value there would be a constant of
    the compiled function, stale after the next step)."""
    other = None
    if internals.in_stateless_scope():
        other = (getattr(_STEP, "values", None) or {}).get(id(pair.other))
    if other is None:
        if active.is_traced(copy_value) or not holds_value(pair.other):
            return None
        other = pair.other.value
    return pair.step_master(copy_value, other)


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
    if len(values) != len(variables):  # the only caller: the model's compute_loss_and_updates
        raise ValueError(
            "compute_loss_and_updates: Argument `optimizer_variables` must hold one value per "
            f"variable of the model's optimizer ({len(variables)}). Received: {len(values)} "
            "values.")
    _STEP.values = {id(v): value for v, value in zip(variables, values, strict=True)}
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
        pair = pair_kinds.record_of(self.variable)
        if x is self.variable:
            if not active.STEP_DIFFERENTIATES_LAYER_LOSSES:
                return self.penalty(pair.master_tensor())
            # the master's value, whose gradient reaches the copy the optimizer is given the
            # gradient of
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

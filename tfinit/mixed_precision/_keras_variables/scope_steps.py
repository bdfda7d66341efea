"""``scope``'s steps on Keras's JAX and torch backends: layers constructed inside pair their
trainable weights once built.

There is no variable creator here (``Layer.add_weight`` makes a plain backend variable), so
the scope's ``PairPolicy`` carries the rules: a layer constructed inside (or rebuilt from a
saved config inside) builds its weights in float32 (pseudo_fp16: the exact fp32 initializer
values; reverse: as Keras ``mixed_*``); its float32 trainable weights pair up
(``pair_records.pair_pending``) when the ``with`` block exits, or when anything asks for a pair
(``parameter_info``, the optimizer's build, ...), whichever comes first. A layer built after
the block builds inside the same scope, as on TensorFlow. The same step names as
``_tensorflow.scope_steps``.
"""

import contextlib
import functools

import keras

from tfinit import _keras_internals as internals
from tfinit.mixed_precision._keras_variables import active, pair_records, paired_variables

_WHO = "tfinit.mixed_precision.scope"


def check(spec):
    """Refuse what this backend cannot pair: a split or stochastic master on torch."""
    if (spec.is_split or spec.is_stochastic) and not active.SPLITS_MASTERS:
        raise ValueError(
            f"{_WHO}: Argument `master` must be 'fp32' on Keras's "
            f"{keras.backend.backend()} backend (the split master's bit arithmetic, and the "
            "scratch fp32 master a split or stochastic pair's step updates, run on "
            f"TensorFlow and JAX only). Received: master={spec.master.value!r}")


def strategy():
    """No tf.distribute strategy here."""
    return None


#: no variable creator: the variables are created as Keras makes them (``creating(state)``)
creating = contextlib.nullcontext


def after_build(state, layer):
    """A layer built after the ``with`` block pairs its weights now."""
    pair_records.pair_pending()


def after_exit():
    """The layers built inside pair their weights when the ``with`` block exits."""
    pair_records.pair_pending()


def adopt_model(model):
    """A model constructed inside: the masters of fit's compiled step (JAX), layers first
    in a state tree."""
    if active.STEP_HANDS_IN_MASTERS:
        _wrap_loss_step(model)
    _assign_layers_first(model)


#: the order ``set_state_tree`` assigns the parts of a state tree in (others after them)
_STATE_ORDER = ("trainable_variables", "non_trainable_variables", "optimizer_variables",
                "metrics_variables")


def _assign_layers_first(model):
    """Keras's ``set_state_tree`` assigns the parts of a tree in the order of its keys, and
    a tree Orbax restores has them sorted (the optimizer's before the layers'); a split pair's
    copy assigned after its remainder would set that remainder to zero. So the model assigns
    the layers' variables first, then the optimizer's (the masters and remainders it
    carries), as Keras's ``fit`` syncs them back."""
    if internals.has_object_method(model, "set_state_tree"):
        return
    set_state_tree = model.set_state_tree

    @functools.wraps(set_state_tree)
    def set_state_tree_layers_first(state_tree):
        if isinstance(state_tree, dict):
            rank = {key: index for index, key in enumerate(_STATE_ORDER)}
            state_tree = dict(sorted(state_tree.items(),
                                     key=lambda item: rank.get(item[0], len(rank))))
        return set_state_tree(state_tree)

    internals.set_object_method(model, "set_state_tree", set_state_tree_layers_first)


def _wrap_loss_step(model):
    """``fit``'s compiled step computes the loss with the masters' values of the step (they
    are optimizer state, which Keras hands ``compute_loss_and_updates`` only for scaling), so
    a pseudo_fp16 variable's regularizer reads its master (``paired_variables.MasterPenalty``)."""
    if internals.has_object_method(model, "compute_loss_and_updates"):
        return
    compute = model.compute_loss_and_updates

    @functools.wraps(compute)
    def compute_loss_and_updates(*args, optimizer_variables=None, **kwargs):
        if optimizer_variables is None or model.optimizer is None:
            return compute(*args, optimizer_variables=optimizer_variables, **kwargs)
        with paired_variables.step_values(model.optimizer.variables, optimizer_variables):
            return compute(*args, optimizer_variables=optimizer_variables, **kwargs)

    internals.set_object_method(model, "compute_loss_and_updates", compute_loss_and_updates)
    evaluate = model.evaluate

    @functools.wraps(evaluate)
    def evaluate_refusing_master_penalties(*args, **kwargs):
        # Refused before Keras's step drops the variables' values (a refusal raised inside
        # the compiled test step would leave the model without them).
        for variable in model.trainable_variables:
            if isinstance(variable.regularizer, paired_variables.MasterPenalty):
                raise ValueError(
                    f"evaluate: the regularizer of variable {variable.path!r} is computed on "
                    "its fp32 master, which Keras's compiled test step does not carry on JAX "
                    "(computing it on the 16-bit copy would differ from Keras mixed). Read "
                    "the penalty with `model.losses`, or evaluate a model without it.")
        return evaluate(*args, **kwargs)

    internals.set_object_method(model, "evaluate", evaluate_refusing_master_penalties)

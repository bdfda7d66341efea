"""``scope`` on Keras's JAX backend: layers constructed inside pair their trainable weights.

There is no variable creator on JAX (``Layer.add_weight`` makes a plain backend variable), so
the scope's ``PairPolicy`` carries the rules: a layer constructed inside (or rebuilt from a
saved config inside) builds its weights in float32 (pseudo_fp16: the exact fp32 initializer
values; reverse: as Keras ``mixed_*``); its float32 trainable weights pair up
(``pair_records.pair_pending``) when the ``with`` block exits, or when anything asks for a pair
(``parameter_info``, the optimizer's build, ...), whichever comes first. A layer built after
the block builds inside the same scope, as on TensorFlow.
"""

import contextlib
import functools

import keras

from tfinit import _keras_internals as internals
from tfinit._precision import pair_spec
from tfinit.mixed_precision._common import scope_hooks, scope_stack
from tfinit.mixed_precision._common.pair_policy import PairPolicy
from tfinit.mixed_precision._keras_variables import active, pair_records, paired_variables
from tfinit.mixed_precision._keras_variables.optimizer import MasterWeightOptimizer

_WHO = "tfinit.mixed_precision.scope"


@contextlib.contextmanager
def scope(mode="pseudo_fp16", compute_dtype="float16", master="fp32"):
    """Pair the trainable floating variables of layers constructed inside with fp32 masters.

    The TensorFlow backend's contract, on JAX: pseudo_fp16 gives each layer a 16-bit
    variable made as the cast of the exact fp32 initializer value (the master,
    ``parameter_info(v).blob_copy["float32"]``); reverse keeps the fp32 variable (the master)
    and a 16-bit copy (``blob_copy[compute_dtype]``). ``compile`` on a model constructed
    inside wraps a plain optimizer in ``MasterWeightOptimizer``.

    Args:
        mode: ``"pseudo_fp16"`` or ``"reverse"``.
        compute_dtype: ``"float16"`` or ``"bfloat16"``.
        master: ``"fp32"``, or ``"split"`` (pseudo_fp16 with bfloat16 only): the master is
            stored as the bfloat16 variable plus an int16 remainder (``blob_copy["int16"]``),
            no fp32 variable between steps; or ``"stochastic"`` (the same dtypes): no
            master, the bfloat16 weight takes the optimizer's fp32 update with stochastic
            rounding (``tfinit._stochastic_rounding``).

    Returns:
        A context manager (yields ``None``).

    Raises:
        ValueError: a bad ``mode``, ``compute_dtype`` or ``master`` (``"split"`` and
            ``"stochastic"`` on torch).

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> kernel = model.layers[0].kernel
    >>> kernel.dtype, mp.parameter_info(kernel).blob_copy["float32"].dtype
    ('bfloat16', 'float32')
    """
    spec = pair_spec(mode, compute_dtype, _WHO, master)
    if (spec.is_split or spec.is_stochastic) and not active.SPLITS_MASTERS:
        raise ValueError(
            f"{_WHO}: Argument `master` must be 'fp32' on Keras's "
            f"{keras.backend.backend()} backend (the split master's bit arithmetic, and the "
            "scratch fp32 master a split or stochastic pair's step updates, run on "
            f"TensorFlow and JAX only). Received: master={master!r}")
    policy = PairPolicy(spec.compute_dtype, spec.mode)
    policy.spec = spec  # how the master is stored included (master="split")
    state = scope_stack.ScopeState(spec, None, policy)
    try:
        with scope_hooks.activated(state):  # no variable creator on JAX and torch
            yield
    finally:
        _adopt_constructed_layers(state)
        pair_records.pair_pending()


def _adopt_constructed_layers(state):
    scope_hooks.adopt_constructed_layers(
        state, MasterWeightOptimizer,
        after_build=lambda state, layer: pair_records.pair_pending(),
        adopt_model=_adopt_model)


def _adopt_model(model):
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

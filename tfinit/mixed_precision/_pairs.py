"""Master/copy pairs: where a variable's ParameterInfo lives and how copies are refreshed.

A paired variable is the backend ``tf.Variable`` (or distributed variable) that Keras
or user code holds. Its ``ParameterInfo`` and :class:`PairSpec` hang on it:

- pseudo_fp16: ``info.param`` is the 16-bit variable, ``blob_copy[tf.float32]`` the master.
- reverse: ``info.param`` is the fp32 variable (the master), ``blob_copy[16-bit]`` the copy.
"""

import keras
import tensorflow as tf

from tfinit import _keras_internals as internals

# The attribute tfinit sets on the tf.Variables it pairs (its own name, on its own objects).
_INFO_ATTRIBUTE = "_tfinit_info"

backend_variable = internals.backend_variable


class Pair:
    """A pair's ParameterInfo with its spec: which variable is the master, which the copy."""

    __slots__ = ("info", "spec", "master_variable")

    def __init__(self, info, spec):
        self.info = info
        self.spec = spec
        #: the master as the Keras variable an optimizer updates (``_variable.master_variable``)
        self.master_variable = None

    @property
    def master(self):
        """The fp32 variable the optimizer updates."""
        if self.spec.is_pseudo:
            (master,) = self.info.blob_copy.values()
            return backend_variable(master)
        return backend_variable(self.info.param)

    @property
    def copy(self):
        """The 16-bit variable refreshed from the master."""
        if self.spec.is_pseudo:
            return backend_variable(self.info.param)
        (copy,) = self.info.blob_copy.values()
        return backend_variable(copy)

    @property
    def name(self):
        return self.info.name


def attach(tf_var, pair):
    """Record ``pair`` on the backend variable the code holds."""
    setattr(tf_var, _INFO_ATTRIBUTE, pair)


def pair_of(variable):
    """The :class:`Pair` of a paired variable (Keras, tf or distributed), or None."""
    tf_var = backend_variable(variable)
    pair = getattr(tf_var, _INFO_ATTRIBUTE, None)
    if pair is None:
        container = internals.distributed_container(tf_var)
        pair = getattr(container, _INFO_ATTRIBUTE, None)
    return pair


def lookup(variable):
    """The ParameterInfo of a paired variable, or None."""
    pair = pair_of(variable)
    return None if pair is None else pair.info


def _pair_of_info(info):
    pair = pair_of(info.param)
    if pair is None:
        raise ValueError(f"ParameterInfo {info.name!r} is not a master/copy pair.")
    return pair


def master_of(info):
    """The fp32 variable the optimizer updates."""
    return _pair_of_info(info).master


def copy_of(info):
    """The 16-bit variable refreshed from the master."""
    return _pair_of_info(info).copy


def variable_label(variable):
    """How error messages name a variable: its Keras path, else its name."""
    return getattr(variable, "path", None) or getattr(variable, "name", None) or repr(variable)


def parameter_info(variable):
    """The ``ParameterInfo`` of a variable created in ``tfinit.mixed_precision.scope``.

    Args:
        variable: a Keras variable or ``tf.Variable``.

    Returns:
        The ``ParameterInfo``: ``param`` is the variable the code sees, ``blob_copy`` maps the
        other dtype (``tf.float32`` in pseudo_fp16, the 16-bit dtype in reverse) to the other
        variable.

    Raises:
        ValueError: the variable has no master/copy pair.
    """
    info = lookup(variable)
    if info is None:
        raise ValueError(
            f"Variable {variable_label(variable)!r} has no fp32 master/16-bit copy pair: it "
            "was not created inside tfinit.mixed_precision.scope(...) (or it is not a "
            "trainable floating variable). Build the layer/module inside the scope."
        )
    return info


def _assign_cast(copy, master):
    return copy.assign(tf.cast(master, copy.dtype))


def refresh(pairs):
    """copy <- cast(master) for each pair, in any distribution context."""
    targets = [(pair.copy, pair.master) for pair in pairs]
    if not targets:
        return

    def update(strategy, targets):
        for copy, master in targets:
            strategy.extended.update(copy, _assign_cast, args=(master,), group=False)

    strategy = tf.distribute.get_strategy()
    owner = getattr(targets[0][0], "_distribute_strategy", None)
    if owner is not None and owner is not strategy:
        # Distributed pairs refreshed outside their strategy's scope (e.g. Keras's end-of-fit
        # finalize_variable_values, or after fit returns): update them through their owner.
        with owner.scope():
            update(owner, targets)
    elif tf.distribute.in_cross_replica_context():
        update(strategy, targets)
    else:
        internals.maybe_merge_call(update, strategy, targets)


def variables_of(target, who):
    """The variables of a Keras model/layer, a ``tf.Module``, one variable or an iterable."""
    if isinstance(target, (keras.Variable, tf.Variable)):
        return [target]
    if isinstance(target, keras.layers.Layer):
        return list(target.weights)
    if isinstance(target, tf.Module) or hasattr(target, "variables"):
        return list(target.variables)
    try:
        return list(target)
    except TypeError:
        raise TypeError(
            f"{who} expects a Keras model/layer, a tf.Module, a variable or an "
            f"iterable of variables. Received: {type(target).__name__}"
        ) from None


def pairs_of(variables):
    """The distinct pairs among ``variables``, in order."""
    pairs, seen = [], set()
    for variable in variables:
        pair = pair_of(variable)
        if pair is not None and id(pair) not in seen:
            seen.add(id(pair))
            pairs.append(pair)
    return pairs


def sync_copies(model_or_variables):
    """Refresh every 16-bit copy from its fp32 master; returns how many were refreshed.

    Accepts a Keras layer/model, a ``tf.Module``, one variable or an iterable of them.
    Call it after assigning masters by hand (restores through tfinit hooks and
    ``MasterWeightOptimizer`` steps refresh copies themselves).
    """
    pairs = pairs_of(variables_of(model_or_variables, "sync_copies"))
    refresh(pairs)
    return len(pairs)

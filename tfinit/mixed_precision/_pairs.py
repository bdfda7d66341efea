"""Master/copy pairs: where a variable's ParameterInfo lives and how copies are refreshed.

A paired variable is the backend ``tf.Variable`` (or distributed variable) that Keras
or user code holds. Its ``ParameterInfo`` hangs on it as ``_tfinit_info``:

- pseudo_fp16: ``info.param`` is the 16-bit variable, ``blob_copy[tf.float32]`` the master.
- reverse: ``info.param`` is the fp32 variable (the master), ``blob_copy[16-bit]`` the copy.
"""

import keras
import tensorflow as tf


def backend_variable(variable):
    """The ``tf.Variable`` behind a Keras variable (or the variable itself)."""
    if isinstance(variable, keras.Variable):
        return variable._value
    return variable


def lookup(variable):
    """The ParameterInfo of a paired variable, or None."""
    tf_var = backend_variable(variable)
    info = getattr(tf_var, "_tfinit_info", None)
    if info is None and hasattr(tf_var, "_distributed_container"):
        info = getattr(tf_var._distributed_container(), "_tfinit_info", None)
    return info


def parameter_info(variable):
    """The ``ParameterInfo`` of a variable created in ``tfinit.mixed_precision.scope``.

    Works for Keras variables and ``tf.Variable``s. Raises ``ValueError`` for a variable
    that has no master/copy pair.
    """
    info = lookup(variable)
    if info is None:
        name = getattr(variable, "path", None) or getattr(variable, "name", variable)
        raise ValueError(
            f"Variable {name!r} has no fp32 master/16-bit copy pair: it was not created "
            "inside tfinit.mixed_precision.scope(...) (or it is not a trainable floating "
            "variable). Build the layer/module inside the scope."
        )
    return info


def is_pseudo(info):
    return tf.float32 in info.blob_copy


def master_of(info):
    """The fp32 variable the optimizer updates."""
    if is_pseudo(info):
        return backend_variable(info.blob_copy[tf.float32])
    return backend_variable(info.param)


def copy_of(info):
    """The 16-bit variable refreshed from the master."""
    if is_pseudo(info):
        return backend_variable(info.param)
    (copy,) = info.blob_copy.values()
    return backend_variable(copy)


def _assign_cast(copy, master):
    return copy.assign(tf.cast(master, copy.dtype))


def refresh(infos):
    """copy <- cast(master) for each info, in any distribution context."""
    pairs = [(copy_of(info), master_of(info)) for info in infos]
    if not pairs:
        return

    def update(strategy, pairs):
        for copy, master in pairs:
            strategy.extended.update(copy, _assign_cast, args=(master,), group=False)

    strategy = tf.distribute.get_strategy()
    owner = getattr(pairs[0][0], "_distribute_strategy", None)
    if owner is not None and owner is not strategy:
        # Distributed pairs refreshed outside their strategy's scope (e.g. Keras's end-of-fit
        # finalize_variable_values, or after fit returns): update them through their owner.
        with owner.scope():
            update(owner, pairs)
    elif tf.distribute.in_cross_replica_context():
        update(strategy, pairs)
    else:
        tf.__internal__.distribute.interim.maybe_merge_call(update, strategy, pairs)


def variables_of(target, who):
    """The variables of a Keras model/layer, a ``tf.Module``, one variable or an iterable."""
    if isinstance(target, (keras.Variable, tf.Variable)):
        return [target]
    if isinstance(target, (keras.layers.Layer, tf.Module)) or hasattr(target, "variables"):
        return list(target.variables)
    try:
        return list(target)
    except TypeError:
        raise TypeError(
            f"{who} expects a Keras model/layer, a tf.Module, a variable or an "
            f"iterable of variables; got {type(target).__name__}."
        ) from None


def sync_copies(model_or_variables):
    """Refresh every 16-bit copy from its fp32 master; returns how many were refreshed.

    Accepts a Keras layer/model, a ``tf.Module``, one variable or an iterable of them.
    Call it after assigning masters by hand (restores through tfinit hooks and
    ``MasterWeightOptimizer`` steps refresh copies themselves).
    """
    infos, seen = [], set()
    for variable in variables_of(model_or_variables, "sync_copies"):
        info = lookup(variable)
        if info is not None and id(info) not in seen:
            seen.add(id(info))
            infos.append(info)
    refresh(infos)
    return len(infos)

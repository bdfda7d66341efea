"""Whether the local replicas of paired variables agree, bit for bit."""

import numpy as np

from tfinit.mixed_precision import _pairs, _replica_checks


def replica_mismatches(model_or_variables):
    """Describe every way the local replicas disagree; an empty list means consistent.

    Checks, for a Keras model/layer, ``tf.Module`` or iterable of variables: every replica
    holds bit-identical values of each variable, master and 16-bit copy (split pairs: copy
    and remainder); and on every replica each copy equals ``cast(master)`` bit for bit.
    Under MultiWorkerMirroredStrategy this covers one worker's replicas; compare workers by
    their masters' bytes. Also ``tfinit.distribute.replica_mismatches``.

    Args:
        model_or_variables: a Keras layer/model, a ``tf.Module``, one variable or an
            iterable of them (distributed or not; a plain variable is its own one replica).

    Returns:
        A list of strings, one per disagreement, each naming the variable (its Keras path)
        and what differs; ``[]`` when everything agrees.

    Raises:
        TypeError: ``model_or_variables`` is none of these.

    Example:

    >>> import keras
    >>> import tensorflow as tf
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")],
    ...                              name="model")
    >>> mp.replica_mismatches(model)
    []
    >>> master = mp.parameter_info(model.layers[0].kernel).blob_copy[tf.float32]
    >>> _ = master.assign(master + 0.125)               # by hand, without sync_copies
    >>> mp.replica_mismatches(model)
    ['model/dense/kernel: copy != cast(master) on replica 0']
    """
    problems, seen = [], set()
    for variable in _pairs.variables_of(model_or_variables, "replica_mismatches"):
        pair = _pairs.pair_of(variable)
        if pair is None:
            members = [("variable", variable)]
        elif id(pair) in seen:
            continue
        else:
            seen.add(id(pair))
            members = pair.stored()
        per_member = [_pairs.components(member) for _, member in members]
        replicas = [(role, [np.asarray(c.numpy()) for c in components])
                    for (role, _), components in zip(members, per_member)]
        masters = None if pair is None else [
            np.asarray(pair.master_value(list(parts)), np.float32) for parts in zip(*per_member)]
        problems += _replica_checks.mismatches(_pairs.variable_label(variable), replicas, masters)
    return problems

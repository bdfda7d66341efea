"""Whether the device replicas of paired variables agree, bit for bit, on Keras's JAX backend.

Under ``keras.distribution`` a variable's value is one ``jax.Array``; with a replicated layout
(``DataParallel``) every device holds a whole replica of it, one addressable shard each. A value
laid out in pieces (``ModelParallel``'s sharded weights) has no replicas to compare: it is read
whole, as one.
"""

import numpy as np
from keras import ops

from tfinit.mixed_precision import _jax_pairs, _replica_checks


def _replicas(value):
    """The per-device replicas of ``value`` (numpy; replica ``k`` on the ``k``-th device by id),
    or the whole value as the one replica."""
    sharding = getattr(value, "sharding", None)
    if sharding is not None and sharding.is_fully_replicated and len(sharding.device_set) > 1:
        shards = sorted(value.addressable_shards, key=lambda shard: shard.device.id)
        return [np.asarray(shard.data) for shard in shards]
    return [np.asarray(ops.convert_to_numpy(value))]


def replica_mismatches(model_or_variables):
    """Describe every way the device replicas disagree; an empty list means consistent.

    Checks, for a Keras model/layer, one variable or an iterable of variables: every device
    holds bit-identical replicas of each variable, master and 16-bit copy (split pairs: copy
    and remainder); and on every device each copy equals ``cast(master)`` bit for bit (a split
    pair's copy is its master's top half by construction). Under a multi-process
    distribution this covers this process's devices.

    Args:
        model_or_variables: a Keras layer/model, one variable or an iterable of them
            (distributed or not; an undistributed variable is its own one replica).

    Returns:
        A list of strings, one per disagreement, each naming the variable (its Keras path)
        and what differs; ``[]`` when everything agrees.

    Raises:
        TypeError: ``model_or_variables`` is none of these.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")],
    ...                              name="model")
    >>> mp.replica_mismatches(model)
    []
    >>> master = mp.parameter_info(model.layers[0].kernel).blob_copy["float32"]
    >>> _ = keras.Variable.assign(master, master + 0.125)   # by hand, without sync_copies
    >>> mp.replica_mismatches(model)
    ['model/dense/kernel: copy != cast(master) on replica 0']
    """
    problems, seen = [], set()
    for variable in _jax_pairs.variables_of(model_or_variables, "replica_mismatches"):
        pair = _jax_pairs.pair_of(variable)
        if pair is None:
            members = [("variable", variable)]
        elif id(pair) in seen:
            continue
        else:
            seen.add(id(pair))
            members = ([("copy", pair.param), ("remainder", pair.remainder)]
                       if isinstance(pair, _jax_pairs.SplitJaxPair)
                       else [("copy", pair.copy), ("master", pair.master)])
        replicas = [(role, _replicas(member.value)) for role, member in members]
        masters = dict(replicas).get("master")  # a split copy is its master's top half
        name = (pair.param if pair is not None else variable).path
        problems += _replica_checks.mismatches(name, replicas, masters)
    return problems

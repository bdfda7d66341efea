"""Whether the local replicas of paired variables agree, bit for bit (every backend).

On TensorFlow a distributed variable's replicas are its per-replica components; under
``keras.distribution`` on JAX a variable's value is one ``jax.Array``, and with a replicated
layout (``DataParallel``) each device holds a whole replica of it. A value laid out in pieces
(``ModelParallel``'s sharded weights) has no replicas to compare: it is read whole, as one.
"""

from tfinit.mixed_precision._common import pair_kinds
from tfinit.mixed_precision import _chosen_backend
from tfinit.mixed_precision._common import replica_report


def replica_mismatches(model_or_variables):
    """Describe every way the local replicas disagree; an empty list means consistent.

    Checks, for a Keras model/layer, ``tf.Module`` or iterable of variables: every replica
    holds bit-identical values of each variable, master and 16-bit copy (split pairs: copy
    and remainder); and on every replica each copy equals ``cast(master)`` bit for bit (a
    split pair's copy is its master's top half by construction). Under
    MultiWorkerMirroredStrategy, or a multi-process ``keras.distribution``, this covers this
    process's replicas; compare processes by their masters' bytes. Also
    ``tfinit.distribute.replica_mismatches`` on TensorFlow.

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
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")],
    ...                              name="model")
    >>> mp.replica_mismatches(model)
    []
    >>> master = mp.parameter_info(model.layers[0].kernel).blob_copy["float32"]
    >>> _ = master.assign(keras.ops.convert_to_numpy(master) + 0.125)  # without sync_copies
    >>> mp.replica_mismatches(model)
    ['model/dense/kernel: copy != cast(master) on replica 0']
    """
    _chosen_backend.pair_pending()
    problems, seen = [], set()
    for variable in pair_kinds.variables_of(model_or_variables, "replica_mismatches"):
        pair = _chosen_backend.pair_of(variable)
        if pair is None:
            members = [("variable", variable)]
        elif id(pair) in seen:
            continue
        else:
            seen.add(id(pair))
            members = pair.stored()
        replicas = [(role, _chosen_backend.replica_arrays(member)) for role, member in members]
        masters = dict(replicas).get("master")  # a split copy is its master's top half
        name = pair_kinds.variable_label(pair.param if pair is not None else variable)
        problems += replica_report.mismatches(name, replicas, masters)
    return problems

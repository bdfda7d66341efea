"""``get_master_weights`` / ``set_master_weights`` / ``save_weights`` on Keras's JAX backend."""

import numpy as np
from keras import ops

from tfinit.mixed_precision import _jax_pairs, _weight_files


def get_master_weights(model_or_layer):
    """The master-aware ``get_weights``: one numpy array per ``model.weights`` entry.

    Args:
        model_or_layer: a Keras model or layer.

    Returns:
        A list of numpy arrays: the fp32 master of a paired variable, the value of any other.

    Raises:
        TypeError: not a Keras layer, variable or iterable of variables.
        ValueError: a paired 16-bit variable was changed without its master.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    ...     dense = keras.layers.Dense(1, kernel_initializer="ones")
    ...     dense.build((None, 2))
    >>> [w.dtype.name for w in mp.get_master_weights(dense)]
    ['float32', 'float32']
    """
    weights = []
    for variable in _jax_pairs.variables_of(model_or_layer, "get_master_weights"):
        pair = _jax_pairs.pair_of(variable)
        if pair is None:
            weights.append(np.asarray(ops.convert_to_numpy(variable.value)))
        else:
            pair.check_copy_matches_master()
            weights.append(pair.master_value())
    return weights


def set_master_weights(model_or_layer, weights):
    """The master-aware ``set_weights``: masters set exactly, copies re-cast.

    Args:
        model_or_layer: a Keras model or layer.
        weights: one array per ``model.weights`` entry, in that order (fp32 for a pair).

    Raises:
        ValueError: a wrong number of arrays, or a shape that does not match.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     dense = keras.layers.Dense(1, use_bias=False)
    ...     dense.build((None, 2))
    >>> mp.set_master_weights(dense, [np.array([[0.1], [0.2]], np.float32)])
    >>> mp.get_master_weights(dense)[0].ravel(), keras.ops.convert_to_numpy(dense.kernel).ravel()
    (array([0.1, 0.2], dtype=float32), array([0.1, 0.2], dtype=float16))
    """
    variables = _jax_pairs.variables_of(model_or_layer, "set_master_weights")
    weights = list(weights)
    if len(weights) != len(variables):
        raise ValueError(
            f"set_master_weights: Argument `weights` must hold {len(variables)} arrays, one "
            f"per weight of the model. Received: {len(weights)} arrays.")
    for variable, value in zip(variables, weights):
        value = np.asarray(value)
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"set_master_weights: weight {variable.path!r} has shape {variable.shape}. "
                f"Received: an array of shape {value.shape}.")
        pair = _jax_pairs.pair_of(variable)
        if pair is None:
            variable.assign(value)
        else:
            pair.assign_master(value)


def save_weights(model, filepath, dtype=None):
    """Write a plain Keras ``.weights.h5`` file of ``model`` with every float in ``dtype``.

    As on TensorFlow: ``model.save_weights`` of a paired model writes fp32 masters; this one
    writes them in one chosen dtype, so a plain Keras model of that dtype (no scope) loads
    the file.

    Args:
        model: a Keras model (paired or not).
        filepath: the ``.weights.h5`` path.
        dtype: ``None`` or ``"float32"``: the fp32 masters (what ``model.save_weights`` also
            writes); ``"float16"`` / ``"bfloat16"``: the masters rounded to nearest, for a
            plain Keras model of that dtype. Non-float weights are written as they are.

    Returns:
        None.

    Raises:
        ValueError: ``dtype`` is not one of these, ``filepath`` does not end in
            ``.weights.h5``, or a paired 16-bit variable was changed without its master.

    Example:

    >>> import os, tempfile
    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> mp.set_master_weights(model, [np.full((2, 1), 1.001, "float32"), np.zeros(1)])
    >>> path = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
    >>> mp.save_weights(model, path, dtype="float16")
    >>> plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, dtype="float16")])
    >>> plain.load_weights(path)                        # a plain float16 model, no scope
    >>> plain.get_weights()[0].ravel()                  # the master rounded, not bfloat16's
    array([1.001, 1.001], dtype=float16)
    """
    _jax_pairs.pair_pending()
    _weight_files.write_weights_file(model, filepath, dtype, _jax_pairs.master_for_file)

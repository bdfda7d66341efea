"""The master-aware mirror of ``get_weights`` / ``set_weights``, and plain weight files."""

import keras
import numpy as np
import tensorflow as tf

from tfinit.mixed_precision import _checkpoint, _pairs, _weight_files


def _weights(model_or_layer, who):
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise TypeError(
            f"{who}: argument `model_or_layer` must be a Keras model or layer. "
            f"Received: {type(model_or_layer).__name__}"
        )
    return list(model_or_layer.weights)


def get_master_weights(model_or_layer):
    """One numpy array per ``model_or_layer.weights`` entry, masters in place of copies.

    The master-aware ``get_weights``: the fp32 master of a paired variable (in both modes;
    a split pair's rebuilt exactly), the value of any other variable. ``get_weights`` itself
    gives each variable's own dtype (the 16-bit copy in pseudo_fp16).

    Args:
        model_or_layer: a Keras model or layer.

    Returns:
        A list of numpy arrays, in ``model_or_layer.weights`` order.

    Raises:
        TypeError: ``model_or_layer`` is not a Keras model or layer.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> mp.set_master_weights(model, [np.full((2, 1), 1.0001, "float32"), np.zeros(1)])
    >>> [w.dtype.name for w in mp.get_master_weights(model)]
    ['float32', 'float32']
    >>> mp.get_master_weights(model)[0].ravel()        # the masters, exactly
    array([1.0001, 1.0001], dtype=float32)
    >>> model.get_weights()[0].ravel()                  # the float16 copies
    array([1., 1.], dtype=float16)
    """
    arrays = []
    for variable in _weights(model_or_layer, "get_master_weights"):
        pair = _pairs.pair_of(variable)
        arrays.append(pair.master_value().numpy() if pair is not None else np.asarray(variable))
    return arrays


def set_master_weights(model_or_layer, arrays):
    """Set every weight from ``arrays`` (as from :func:`get_master_weights`) exactly.

    The master-aware ``set_weights``: a paired variable's fp32 master is set to its array
    (never rounded through 16 bits) and its copy re-cast, as a Caffe2 restore of the fp32
    blob followed by the ``FloatToHalf`` copy; any other variable is assigned as
    ``set_weights`` would.

    Args:
        model_or_layer: a Keras model or layer.
        arrays: one array per ``model_or_layer.weights`` entry, in that order (fp32 for
            paired variables; 16-bit arrays are widened exactly).

    Returns:
        None.

    Raises:
        TypeError: ``model_or_layer`` is not a Keras model or layer.
        ValueError: the number of arrays, or one array's shape, does not match; the message
            names the variable.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> best = mp.get_master_weights(model)
    >>> model.set_weights([np.ones((2, 1)), np.ones(1)])  # as a bad epoch would
    >>> mp.set_master_weights(model, best)                 # exactly, copies re-cast
    >>> all(np.array_equal(a, b) for a, b in zip(mp.get_master_weights(model), best))
    True
    >>> mp.set_master_weights(model, best[:1])
    Traceback (most recent call last):
    ...
    ValueError: set_master_weights: 'sequential...' has 2 weights; received 1 arrays.
    """
    variables = _weights(model_or_layer, "set_master_weights")
    arrays = list(arrays)
    if len(arrays) != len(variables):
        raise ValueError(
            f"set_master_weights: {model_or_layer.name!r} has {len(variables)} weights; "
            f"received {len(arrays)} arrays."
        )
    for variable, array in zip(variables, arrays):
        array = np.asarray(array)
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(
                f"set_master_weights: variable {_pairs.variable_label(variable)!r} has shape "
                f"{tuple(variable.shape)}; received an array of shape {tuple(array.shape)}."
            )
        pair = _pairs.pair_of(variable)
        if pair is None:
            variable.assign(array)
            continue
        pair.assign_master(tf.cast(array, tf.float32))


def save_weights(model, filepath, dtype=None):
    """Write a plain Keras ``.weights.h5`` file of ``model`` with every float in ``dtype``.

    ``model.save_weights`` of a paired model also writes fp32 masters; this one writes them
    in one chosen dtype, so a plain Keras model of that dtype (no scope) loads the file.

    Args:
        model: a Keras model (paired or not).
        filepath: the ``.weights.h5`` path.
        dtype: ``None`` or ``"float32"``: the fp32 masters (what ``model.save_weights`` also
            writes); ``"float16"`` / ``"bfloat16"``: the masters rounded to nearest, for a
            plain Keras model of that dtype. Non-float weights are written as they are.

    Returns:
        None.

    Raises:
        ValueError: ``dtype`` is not one of these, or ``filepath`` does not end in
            ``.weights.h5``.

    Example:

    >>> import os, tempfile
    >>> import keras
    >>> import numpy as np
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> mp.set_master_weights(model, [np.full((2, 1), 1.0001, "float32"), np.zeros(1)])
    >>> path = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
    >>> mp.save_weights(model, path, dtype="float16")
    >>> plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, dtype="float16")])
    >>> plain.load_weights(path)                        # a plain float16 model, no scope
    >>> plain.get_weights()[0].ravel()
    array([1., 1.], dtype=float16)
    """
    _weight_files.write_weights_file(model, filepath, dtype, _checkpoint.masters_for_saving)

"""The public master-weight functions, one code path on every backend.

``parameter_info``, ``sync_copies``, ``get_master_weights``, ``set_master_weights`` and
``save_weights`` ask only a variable's pair record
(:mod:`~tfinit.mixed_precision._common.pair_kinds`): its master, copy and file value, whichever
kind it is, and the chosen backend's pair functions (``_chosen_backend``): ``_tensorflow``'s
on TensorFlow (``tf.Variable`` objects, ``tf.distribute``), ``_keras_variables``' on JAX and
torch, whose pairs are made from built layers (``pair_pending``).
"""

import keras
import numpy as np

from tfinit.mixed_precision._common import pair_kinds
from tfinit.mixed_precision import _chosen_backend
from tfinit.mixed_precision._common import weight_files


def _pairs_in(target, who):
    _chosen_backend.pair_pending()
    return pair_kinds.pairs_of(pair_kinds.variables_of(target, who), _chosen_backend.pair_of)


def parameter_info(variable):
    """The ``ParameterInfo`` of a variable created in ``tfinit.mixed_precision.scope``.

    Caffe2's ``ParameterInfo`` of a PseudoFP16 parameter: ``param`` is the blob the net
    computes with and ``blob_copy`` maps a dtype to the other blob of the pair.

    Args:
        variable: a Keras variable (or, on TensorFlow, a ``tf.Variable``).

    Returns:
        The ``ParameterInfo``: ``param`` is the variable the code sees, ``blob_copy`` maps the
        other dtype (``"float32"`` in pseudo_fp16, the 16-bit dtype in reverse, ``"int16"``
        with ``master="split"``: the remainder) to the other variable. Keys are dtypes in any
        form Keras takes (``"float32"``, ``np.float32``, ``tf.float32`` on TensorFlow).

    Raises:
        ValueError: the variable has no master/copy pair.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     dense = keras.layers.Dense(2, kernel_initializer="ones")
    ...     dense.build((None, 3))
    >>> info = mp.parameter_info(dense.kernel)
    >>> info
    ParameterInfo(name='kernel', shape=(3, 2), dtype=float16, blob_copy={'float32': ...}, ...)
    >>> info.param is dense.kernel
    True
    >>> master = info.blob_copy["float32"]
    >>> keras.ops.convert_to_numpy(master)[0]
    array([1., 1.], dtype=float32)
    >>> mp.parameter_info(keras.Variable(1.0))
    Traceback (most recent call last):
    ...
    ValueError: Variable ... has no fp32 master/16-bit copy pair: ...
    """
    _chosen_backend.pair_pending()
    pair = _chosen_backend.pair_of(variable)
    if pair is None:
        raise ValueError(
            f"Variable {pair_kinds.variable_label(variable)!r} has no fp32 master/16-bit copy "
            "pair: it was not created inside tfinit.mixed_precision.scope(...) (or it is not "
            "a trainable floating variable). Build the layer/model inside the scope."
        )
    return pair


def sync_copies(model_or_variables):
    """Refresh every 16-bit copy from its fp32 master (``copy = cast(master)``).

    Call it after assigning masters by hand (restores through tfinit's hooks,
    ``set_master_weights`` and ``MasterWeightOptimizer`` steps refresh copies themselves).
    A split pair's copy is always its master's top half: nothing to refresh.

    Args:
        model_or_variables: a Keras layer/model, a ``tf.Module``, one variable or an
            iterable of them.

    Returns:
        The number of distinct pairs among them (those refreshed, split pairs included).

    Raises:
        TypeError: ``model_or_variables`` is none of these.

    Example:

    >>> import keras
    >>> from tfinit import mixed_precision as mp
    >>> with mp.scope("pseudo_fp16", compute_dtype="float16"):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> kernel = model.layers[0].kernel
    >>> _ = mp.parameter_info(kernel).blob_copy["float32"].assign([[0.5], [2.0]])
    >>> mp.sync_copies(model)                           # kernel and bias
    2
    >>> keras.ops.convert_to_numpy(kernel).ravel()
    array([0.5, 2. ], dtype=float16)
    """
    pairs = _pairs_in(model_or_variables, "sync_copies")
    _chosen_backend.refresh(pairs)
    return len(pairs)


def _weights(model_or_layer, who):
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise TypeError(
            f"{who}: Argument `model_or_layer` must be a Keras model or layer. "
            f"Received: {type(model_or_layer).__name__}"
        )
    _chosen_backend.pair_pending()
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
        ValueError: a paired 16-bit variable was changed without its master (a plain
            optimizer trained it): its master would drop that change.

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
        pair = _chosen_backend.pair_of(variable)
        arrays.append(pair.master_array() if pair is not None else np.asarray(variable))
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
    ValueError: set_master_weights: Argument `arrays` must hold 2 arrays, one per weight of ...
    """
    variables = _weights(model_or_layer, "set_master_weights")
    arrays = list(arrays)
    if len(arrays) != len(variables):
        raise ValueError(
            f"set_master_weights: Argument `arrays` must hold {len(variables)} arrays, one per "
            f"weight of {model_or_layer.name!r}. Received: {len(arrays)} arrays."
        )
    for variable, array in zip(variables, arrays, strict=True):
        array = np.asarray(array)
        if tuple(array.shape) != tuple(variable.shape):
            raise ValueError(
                f"set_master_weights: variable {pair_kinds.variable_label(variable)!r} has "
                f"shape {tuple(variable.shape)}. Received: an array of shape "
                f"{tuple(array.shape)}."
            )
        pair = _chosen_backend.pair_of(variable)
        if pair is None:
            variable.assign(array)
        else:
            pair.assign_master(array)


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
        ValueError: ``dtype`` is not one of these, ``filepath`` does not end in
            ``.weights.h5``, or a paired 16-bit variable was changed without its master.

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
    _chosen_backend.pair_pending()
    weight_files.write_weights_file(model, filepath, dtype, _chosen_backend.master_for_file)

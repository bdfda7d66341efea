"""Keras weight files seen through conversions: the backend-neutral part (no TensorFlow).

- :class:`StoreView`: a Keras weights store (``.weights.h5`` / ``.keras``) whose writes and
  reads pass through conversions (the layer hooks that store pseudo_fp16 masters use it on
  both backends).
- :func:`write_weights_file`: the body of ``save_weights(model, path, dtype)`` on every
  backend: each layer writes its masters, converted to one dtype, into a plain Keras file.
  The backend's module passes ``master_of`` (what a pair stores: its fp32 master).
"""

import contextlib

import numpy as np
from keras import ops

from tfinit import _keras_internals as internals
from tfinit._precision import COMPUTE_DTYPES, MASTER_DTYPE, dtype_name


def master_or_value(value, pair_of):
    """What a Keras weights file stores for ``value``: its pair's ``file_value()`` (the exact
    fp32 master) where the layer computes with a copy, else ``value`` itself.

    Args:
        value: what a layer's ``save_own_variables`` writes (a variable, or an array).
        pair_of: the backend's lookup of a variable's pair record.

    Raises:
        ValueError: the pair's 16-bit copy was changed without its master.
    """
    pair = pair_of(value) if hasattr(value, "shape") else None
    stored = None if pair is None else pair.file_value()
    return value if stored is None else stored


class StoreView:
    """A Keras weights store seen through ``write``/``read`` conversions of its values."""

    def __init__(self, store, write=None, read=None):
        self._store = store
        self._write = write
        self._read = read

    def __setitem__(self, key, value):
        self._store[key] = self._write(value) if self._write else value

    def __getitem__(self, key):
        value = self._store[key]
        return self._read(value) if self._read else value

    def __contains__(self, key):
        return key in self._store

    def keys(self):
        return self._store.keys()

    def __len__(self):
        return len(self._store.keys())

    def __iter__(self):
        return iter(self._store.keys())

    def __getattr__(self, name):
        return getattr(self._store, name)


def save_dtype(dtype, filepath, who="save_weights"):
    """The dtype name ``save_weights`` writes floats in, after checking its arguments.

    Raises:
        ValueError: ``dtype`` is not None or a float dtype tfinit knows, or ``filepath``
            does not end in ``.weights.h5``.
    """
    target = MASTER_DTYPE if dtype is None else dtype_name(dtype)
    if target not in (MASTER_DTYPE,) + COMPUTE_DTYPES:
        raise ValueError(
            f"{who}: argument `dtype` must be None, 'float32', 'float16' or "
            f"'bfloat16'. Received: dtype={dtype!r}"
        )
    if not str(filepath).endswith(".weights.h5"):
        raise ValueError(
            f"{who}: argument `filepath` must end in '.weights.h5'. "
            f"Received: filepath={filepath!r}"
        )
    return target


def write_weights_file(model, filepath, dtype, master_of):
    """``model.save_weights(filepath)`` with every float written as ``master_of(value)`` in
    ``dtype`` (non-float values as they are); see ``save_weights`` for the arguments."""
    target = save_dtype(dtype, filepath)

    def convert(value):
        array = np.asarray(master_of(value))
        if array.dtype.kind == "f" or dtype_name(array.dtype) in COMPUTE_DTYPES:
            return np.asarray(ops.convert_to_numpy(ops.cast(array, target)))
        return array

    with _converted_store_writes(model, convert):
        model.save_weights(filepath)


@contextlib.contextmanager
def _converted_store_writes(model, convert):
    """While open, every layer of ``model`` writes ``convert(value)`` into weight files."""
    restored = []
    try:
        for layer in internals.all_layers(model):
            save = layer.save_own_variables

            def save_converted(store, _save=save):
                return _save(StoreView(store, write=convert))

            had_own = internals.has_object_method(layer, "save_own_variables")
            internals.set_object_method(layer, "save_own_variables", save_converted)
            restored.append((layer, save if had_own else None))
        yield
    finally:
        for layer, save in restored:
            if save is None:
                internals.unset_object_method(layer, "save_own_variables")
            else:
                internals.set_object_method(layer, "save_own_variables", save)

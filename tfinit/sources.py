"""Where ``ExternalInitializer`` finds parameter values.

One class per kind of source, all with the same small interface:

- ``names()``: the names that can be asked for (sorted);
- ``get(name)``: the value as a numpy array, or a ``tf.Tensor`` where reading straight into
  TensorFlow memory saves copies (checkpoints); ``KeyError`` naming the parameter and the
  source, with a few present names, when it is not there;
- ``str(source)``: what the source is, for error messages.

Kinds: ``MappingSource`` (a dict of name -> array), ``NpzSource`` (an ``.npz`` file, read
with pickling disabled), ``CheckpointSource`` (a TensorFlow checkpoint, by full key or by
short variable name) and ``Caffe2InitNetSource`` (a Caffe2 ``init_net.pb``, replayed by the
reader registered with :func:`register_init_net_reader`: ``tfinit.caffe2`` registers its
``load_init_net`` when imported, and ``import tfinit`` imports it). ``open_source`` picks one
from what the user passed.

This module imports nothing of tfinit but ``tfinit._backend``: the Caffe2 package sits above
it and plugs its reader in, so that data access never reaches up into the converter.

Values are handed out as stored, never converted: ``get`` makes at most the one copy that
reading a file needs (none for an in-memory numpy array).
"""

import difflib
import os
from collections.abc import Mapping

import numpy as np

from tfinit import _backend

#: ``reader(init_net) -> {blob: array}`` for Caffe2 init_nets (see register_init_net_reader)
_init_net_reader = None

_CHECKPOINT_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def register_init_net_reader(reader):
    """Make ``reader`` the function that replays Caffe2 init_nets for ``Caffe2InitNetSource``.

    ``tfinit.caffe2`` registers ``tfinit.caffe2.load_init_net`` when it is imported.

    Args:
        reader: a callable taking a ``.pb`` path or its bytes and returning a mapping of
            blob name -> array, or ``None`` to unregister.

    Returns:
        The reader registered before (``None`` if there was none).

    Raises:
        TypeError: ``reader`` is neither callable nor ``None``.
    """
    global _init_net_reader
    if reader is not None and not callable(reader):
        raise TypeError(
            "register_init_net_reader: Argument `reader` must be callable or None. "
            f"Received: reader={reader!r}."
        )
    previous, _init_net_reader = _init_net_reader, reader
    return previous
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


class Source:
    """Common interface; subclasses implement ``names()`` and ``_get(name)``."""

    def names(self):
        raise NotImplementedError

    def get(self, name):
        """The array stored under ``name``; ``KeyError`` if it is not there."""
        if not isinstance(name, str):
            raise TypeError(f"{self}: Argument `name` must be a string. "
                            f"Received: name={name!r} (of type {type(name).__name__}).")
        return self._get(name)

    def __contains__(self, name):
        try:
            self._resolve(name)
        except KeyError:
            return False
        return True

    def _resolve(self, name):
        if name not in self._name_set():
            raise self.missing(name)
        return name

    def _name_set(self):
        return set(self.names())

    def _get(self, name):
        raise NotImplementedError

    def missing(self, name, candidates=None):
        """The ``KeyError`` for a name that is not in this source, with a few present names."""
        names = list(self.names() if candidates is None else candidates)
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
        shown = close + [n for n in names if n not in close][: max(0, 5 - len(close))]
        more = f" (and {len(names) - len(shown)} more)" if len(names) > len(shown) else ""
        listing = ", ".join(map(repr, shown)) + more if names else "nothing"
        return KeyError(
            f"Parameter {name!r} is not in {self}; it holds {listing}."
        )


def _as_array(value, name, where):
    """``value`` as a numpy array without copying arrays; object arrays refused."""
    array = np.asarray(value)
    if array.dtype.type is np.void:
        raise TypeError(
            f"Parameter {name!r} in {where} holds raw {array.dtype} records, not numbers "
            f"(.npz files store bfloat16 this way); save it as float32 instead."
        )
    if array.dtype.kind not in "biufcV":
        raise TypeError(
            f"Parameter {name!r} in {where} is an array of {array.dtype}; parameters must "
            f"hold numbers (object and string arrays are refused)."
        )
    return array


class MappingSource(Source):
    """Values from a mapping of name -> array-like (numpy arrays are not copied)."""

    def __init__(self, mapping, description=None):
        if not isinstance(mapping, Mapping):
            raise TypeError("MappingSource: Argument `mapping` must be a mapping. "
                            f"Received: mapping of type {type(mapping).__name__}.")
        bad = [k for k in mapping if not isinstance(k, str)]
        if bad:
            raise TypeError(f"Parameter names must be strings; the mapping has key {bad[0]!r}.")
        self._mapping = mapping
        self._description = description or f"a mapping of {len(mapping)} arrays"

    def __str__(self):
        return self._description

    def names(self):
        return sorted(self._mapping)

    def _name_set(self):
        return self._mapping.keys()

    def _get(self, name):
        return _as_array(self._mapping[self._resolve(name)], name, self)


class NpzSource(Source):
    """Values from an ``.npz`` file, read with ``allow_pickle=False``."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"No .npz file at {self.path!r}.")
        try:
            self._npz = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"{self.path!r} is not a readable .npz file ({err}).") from None
        if not isinstance(self._npz, np.lib.npyio.NpzFile):
            raise ValueError(f"{self.path!r} holds a single .npy array, not an .npz archive.")
        self._files = frozenset(self._npz.files)

    def __str__(self):
        return f".npz file {self.path!r}"

    def names(self):
        return sorted(self._npz.files)

    def _name_set(self):
        return self._files

    def _get(self, name):
        try:
            value = self._npz[self._resolve(name)]
        except ValueError as err:
            if "allow_pickle" not in str(err):
                raise
            raise ValueError(
                f"Parameter {name!r} in {self} is an object array, which can only be read "
                f"by unpickling; tfinit never unpickles. Save it as a numeric array."
            ) from None
        return _as_array(value, name, self)


class CheckpointSource(Source):
    """Values from a TensorFlow checkpoint (``tf.train.Checkpoint`` or TF1 ``Saver``).

    A name is found as a full checkpoint key
    (``"net/tfinit_params/w/.ATTRIBUTES/VARIABLE_VALUE"``), as that key without the
    ``/.ATTRIBUTES/VARIABLE_VALUE`` suffix (``"net/tfinit_params/w"``), or as the short name
    the variable had when it was saved (``"w"`` for ``tf.Variable(..., name="w")``, taken
    from the checkpoint's object graph). A name that fits several keys is a ``ValueError``
    listing them. ``names()`` lists the full keys.

    Opened from a path, ``get`` returns a ``tf.Tensor`` read straight into TensorFlow memory
    (``RestoreV2``): ``tf.Variable`` adopts that buffer, so loading costs one copy (the
    read) instead of three through numpy. Opened from a reader, it returns numpy arrays.
    """

    def __init__(self, checkpoint):
        tf = _backend.tensorflow("ExternalInitializer from a TensorFlow checkpoint")
        self._prefix = None
        if hasattr(checkpoint, "get_variable_to_shape_map"):
            self.path, self._reader = "<reader>", checkpoint
        else:
            self.path = os.fspath(checkpoint)
            prefix = self.path
            if os.path.isdir(prefix):
                prefix = tf.train.latest_checkpoint(prefix)
                if prefix is None:
                    raise FileNotFoundError(f"No TensorFlow checkpoint in directory {self.path!r}.")
            elif prefix.endswith(".index"):
                prefix = prefix[: -len(".index")]
            try:
                self._reader = tf.train.load_checkpoint(prefix)
            except (ValueError, tf.errors.OpError) as err:
                raise ValueError(
                    f"Cannot read TensorFlow checkpoint {self.path!r} ({err})."
                ) from None
            self.path = self._prefix = prefix
        self._dtypes = self._reader.get_variable_to_dtype_map()
        self._dtypes.pop(_OBJECT_GRAPH_KEY, None)
        self._keys = sorted(self._dtypes)
        self._aliases = self._index_aliases()

    def __str__(self):
        return f"TensorFlow checkpoint {self.path!r}"

    def names(self):
        return self._keys

    def _index_aliases(self):
        aliases = {}
        for key in self._keys:
            if key.endswith(_CHECKPOINT_SUFFIX):
                aliases.setdefault(key[: -len(_CHECKPOINT_SUFFIX)], set()).add(key)
        if self._reader.has_tensor(_OBJECT_GRAPH_KEY):
            from tfinit import _keras_internals as internals  # TensorFlow: checkpoints only

            graph = internals.checkpoint_object_graph(self._reader.get_tensor(_OBJECT_GRAPH_KEY))
            for full_name, key in graph:
                if full_name and key in self._dtypes:
                    aliases.setdefault(full_name, set()).add(key)
        return aliases

    def _resolve(self, name):
        if self._reader.has_tensor(name) and name != _OBJECT_GRAPH_KEY:
            return name
        keys = sorted(self._aliases.get(name, ()))
        if len(keys) > 1:
            raise ValueError(
                f"Parameter name {name!r} is ambiguous in {self}: it fits the keys "
                f"{', '.join(map(repr, keys))}. Ask for one of them by its full key."
            )
        if not keys:
            raise self.missing(name)
        return keys[0]

    def missing(self, name, candidates=None):
        # Short names read better than full keys; list both kinds.
        return super().missing(name, sorted(set(self._aliases) | set(self._keys)))

    def _get(self, name):
        tf = _backend.tensorflow("ExternalInitializer from a TensorFlow checkpoint")
        key = self._resolve(name)
        dtype = self._dtypes[key]
        if not (dtype.is_floating or dtype.is_integer or dtype.is_bool or dtype.is_complex):
            raise TypeError(
                f"Parameter {name!r} in {self} holds {dtype.name} values; parameters must "
                f"hold numbers."
            )
        if self._prefix is None:
            return _as_array(self._reader.get_tensor(key), name, self)
        with tf.init_scope():
            return tf.raw_ops.RestoreV2(prefix=self._prefix, tensor_names=[key],
                                        shape_and_slices=[""], dtypes=[dtype])[0]


class Caffe2InitNetSource(MappingSource):
    """Values from a Caffe2 ``init_net`` (a ``.pb`` path or its bytes).

    The net's fill operators are replayed by the registered init_net reader
    (``tfinit.caffe2.load_init_net``), which must return a mapping of blob name -> array.
    """

    def __init__(self, init_net):
        load_init_net = _init_net_reader
        if load_init_net is None:
            raise ImportError(
                "Reading a Caffe2 init_net needs tfinit.caffe2.load_init_net, registered "
                "when tfinit.caffe2 is imported (import tfinit.caffe2)."
            )
        if isinstance(init_net, (bytes, bytearray, memoryview)):
            description = f"Caffe2 init_net ({len(init_net)} bytes)"
        else:
            init_net = os.fspath(init_net)
            if not os.path.isfile(init_net):
                raise FileNotFoundError(f"No Caffe2 init_net file at {init_net!r}.")
            description = f"Caffe2 init_net {init_net!r}"
        blobs = load_init_net(init_net)
        if not isinstance(blobs, Mapping):
            raise TypeError(
                f"The Caffe2 init_net reader returned {type(blobs).__name__}; expected a "
                f"mapping of blob name -> array."
            )
        super().__init__(blobs, description)


def open_source(source):
    """The ``Source`` for what a user passed to ``ExternalInitializer``.

    Args:
        source: a ``Source``; a mapping of name -> array; a path ending in ``.npz``; a path
            ending in ``.pb`` or raw ``bytes`` (a Caffe2 init_net); a TensorFlow checkpoint
            prefix, its ``.index`` file or a directory holding checkpoints; a
            ``tf.train.load_checkpoint`` reader.

    Returns:
        The ``Source`` (``MappingSource``, ``NpzSource``, ``Caffe2InitNetSource`` or
        ``CheckpointSource``).

    Raises:
        FileNotFoundError: a path with nothing there.
        ValueError: a path of no known kind, or a file that cannot be read.
        TypeError: another type of ``source``.

    Example:

    >>> import numpy as np
    >>> from tfinit import sources
    >>> src = sources.open_source({"fc_w": np.zeros((2, 3), np.float32)})
    >>> str(src), src.names(), src.get("fc_w").shape
    ('a mapping of 1 arrays', ['fc_w'], (2, 3))
    """
    if isinstance(source, Source):
        return source
    if isinstance(source, Mapping):
        return MappingSource(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Caffe2InitNetSource(source)
    if hasattr(source, "get_variable_to_shape_map") and hasattr(source, "get_tensor"):
        return CheckpointSource(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        lower = path.lower()
        if lower.endswith(".npz"):
            return NpzSource(path)
        if lower.endswith(".pb"):
            return Caffe2InitNetSource(path)
        if os.path.isdir(path) or os.path.isfile(path + ".index") or lower.endswith(".index"):
            return CheckpointSource(path)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"ExternalInitializer: no source at {path!r} (expected an .npz file, a "
                f"Caffe2 .pb init_net, or a TensorFlow checkpoint prefix or directory)."
            )
        raise ValueError(
            f"ExternalInitializer: cannot tell what kind of source {path!r} is; expected an "
            f".npz file, a Caffe2 .pb init_net, or a TensorFlow checkpoint prefix/directory."
        )
    raise TypeError(
        "ExternalInitializer: Argument `source` must be a mapping of name -> array, a path (.npz, "
        ".pb, TensorFlow checkpoint), Caffe2 init_net bytes, a checkpoint reader or a "
        f"tfinit.sources.Source. Received: source of type {type(source).__name__}."
    )

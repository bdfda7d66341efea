"""ParameterInfo: the record of one created parameter (Caffe2's ``ParameterInfo``).

Caffe2 records a blob name; tfinit records the TensorFlow variable itself. The
fields Caffe2 code reads are kept: ``param``/``blob``, ``name``, ``shape``, ``size``,
``length``, ``key``, ``grad``, ``param_id``, ``tags`` (Caffe2's ``ParameterTags``) and
``blob_copy`` — a dict mapping a
``tf.DType`` to the same parameter held in another precision (PseudoFP16:
``{tf.float32: P_fp32}``; Reverse: ``{tf.float16: P_fp16}``).

Importing it needs no TensorFlow: the keys of a given ``blob_copy`` are normalized with
``tf.as_dtype`` on the TensorFlow backend and to dtype names on the others.
"""

import math

import keras

from tfinit import _backend
from tfinit._precision import SUFFIXES

#: Caffe2's ``modeling/parameter_info.py`` ``ParameterTags``
PARAMETER_TAGS = ("BIAS", "WEIGHT", "COMPUTED_PARAM")
#: short names of the parameters brew tags BIAS: Keras's ``bias``, BatchNormalization's
#: ``beta``; brew's ``<layer>_b``
_BIAS_NAMES = ("bias", "beta")
#: the name suffixes Caffe2 gave a pair's other variable (``P_fp32`` reads as ``P``)
_COPY_SUFFIXES = tuple(SUFFIXES.values())


def check_tags(tags, who):
    """``tags`` (one tag, a list of them or None) as a tuple of ``PARAMETER_TAGS``."""
    if tags is None:
        return ()
    listed = [tags] if isinstance(tags, str) else tags
    try:
        listed = list(listed)
    except TypeError:
        listed = [tags]
    bad = [t for t in listed if t not in PARAMETER_TAGS]
    if bad:
        raise ValueError(f"{who}: Argument `tags` must be Caffe2 ParameterTags "
                         f"{PARAMETER_TAGS} (one or a list). Received: tags={tags!r}.")
    return tuple(dict.fromkeys(listed))


def caffe2_tag(variable):
    """``"BIAS"`` or ``"WEIGHT"``: brew's tag for the parameter ``variable`` holds, from its
    name (``bias``, ``beta``, ``*_b`` are BIAS; a master ``P_fp32`` reads as ``P``)."""
    name = getattr(variable, "path", None) or getattr(variable, "name", "") or ""
    name = without_output_index(name).rsplit("/", 1)[-1]
    for suffix in _COPY_SUFFIXES:
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    if name in _BIAS_NAMES or name.endswith(("_b", "_bias", "_beta")):
        return "BIAS"
    return "WEIGHT"


def without_output_index(name):
    """``name`` without TensorFlow's output index: ``"P"`` for ``"P:0"``."""
    return name.removesuffix(":0")


def variable_name(variable):
    """A variable's short name: ``"P"`` for a ``tf.Variable`` named ``"P:0"``."""
    return without_output_index(getattr(variable, "name", None) or str(variable))


class ParameterInfo:
    """What was created for one parameter; ``param`` is the variable the model uses.

    Caffe2's ``ParameterInfo`` recorded a blob name; this records the variable itself and
    keeps the fields Caffe2 code reads (``param``/``blob``, ``name``, ``shape``, ``size``,
    ``length``, ``key``, ``grad``, ``param_id``, ``blob_copy``).

    Args:
        param: the primary variable (the one the model computes with).
        shape: its shape (a sequence of ints), or ``None``.
        blob_copy: ``None`` or a dict mapping a dtype to the same parameter in another
            precision (PseudoFP16: ``{tf.float32: P_fp32}``); keys are normalized
            (``tf.DType`` on TensorFlow, dtype names elsewhere) and looked up by any
            spelling (``"float32"``, ``np.float32``).
        param_id: Caffe2's optional parameter id.
        name: defaults to the variable's short name (``"P"`` for ``"P:0"``).
        key, length, grad: Caffe2's optional fields (``length`` at least 1).
        tags: Caffe2's ``ParameterTags`` (``"WEIGHT"``, ``"BIAS"``, ``"COMPUTED_PARAM"``;
            one or a list), kept as the tuple ``tags`` (brew's ``model.weights`` /
            ``model.biases`` read them); default ``()``.

    Raises:
        TypeError: ``blob_copy`` is not a dict, or a key is not a dtype.
        ValueError: an unknown tag.

    Example:

    >>> import tensorflow as tf, tfinit
    >>> w = tf.Variable(tf.zeros([2, 3], tf.float16), name="w")
    >>> master = tf.Variable(tf.zeros([2, 3]), name="w_fp32")
    >>> info = tfinit.ParameterInfo(w, [2, 3], blob_copy={tf.float32: master})
    >>> info.name, info.size, info.blob_copy["float32"] is master
    ('w', 6, True)
    >>> [v.name for v in info.variables]
    ['w:0', 'w_fp32:0']
    """

    def __init__(
        self,
        param,
        shape,
        blob_copy=None,
        param_id=None,
        *,
        name=None,
        key=None,
        length=None,
        grad=None,
        tags=None,
    ):
        self.param = param
        self.name = name if name is not None else variable_name(param)
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        self.size = None if self.shape is None else math.prod(self.shape)
        self.blob_copy = _check_blob_copy(blob_copy, self.name)
        self.param_id = param_id
        self.key = key
        self.length = max(1, length if length is not None else 1)
        self.grad = grad
        self.tags = check_tags(tags, f"ParameterInfo {self.name!r}")

    @property
    def blob(self):
        """Caffe2's name for ``param``."""
        return self.param

    @property
    def dtype(self):
        """``param``'s dtype: a ``tf.DType`` on the TensorFlow backend, else Keras's name."""
        if _backend.name() == "tensorflow":
            return _backend.tensorflow("ParameterInfo.dtype").as_dtype(self.param.dtype)
        return keras.backend.standardize_dtype(self.param.dtype)

    @property
    def variables(self):
        """``param`` followed by its copies in ``blob_copy`` (every variable to save)."""
        return [self.param, *(self.blob_copy or {}).values()]

    def __str__(self):
        return self.name

    def __repr__(self):
        copies = {keras.backend.standardize_dtype(k): variable_name(v)
                  for k, v in (self.blob_copy or {}).items()}
        dtype = keras.backend.standardize_dtype(self.dtype)
        return (
            f"ParameterInfo(name={self.name!r}, shape={self.shape}, dtype={dtype}, "
            f"blob_copy={copies or None}, param_id={self.param_id!r})"
        )


def _check_blob_copy(blob_copy, name):
    if blob_copy is None:
        return None
    if not isinstance(blob_copy, dict):
        raise TypeError(
            f"ParameterInfo {name!r}: Argument `blob_copy` must be a dict mapping tf.DType "
            f"-> variable. Received: blob_copy of type {type(blob_copy).__name__}."
        )
    if not blob_copy:
        return {}
    try:
        return BlobCopy({_dtype_key(k): v for k, v in blob_copy.items()})
    except TypeError as err:
        raise TypeError(f"ParameterInfo {name!r}: blob_copy keys must be dtypes ({err}).") from None


class BlobCopy(dict):
    """``blob_copy``: keyed by ``tf.DType``; looked up by any dtype spelling (``"float32"``)."""

    def __getitem__(self, dtype):
        return super().__getitem__(_as_dtype_key(dtype))

    def __contains__(self, dtype):
        try:
            return super().__contains__(_as_dtype_key(dtype))
        except KeyError:
            return False

    def get(self, dtype, default=None):
        return self[dtype] if dtype in self else default


def _dtype_key(dtype):
    """A ``blob_copy`` key: a ``tf.DType`` on TensorFlow, the dtype's name on any other
    backend (so ``"float32"``, ``np.float32`` and ``jnp.float32`` find the same entry)."""
    if _backend.name() == "tensorflow":
        tf = _backend.tensorflow("ParameterInfo.blob_copy")
        return tf.as_dtype(dtype)
    try:
        return keras.backend.standardize_dtype(dtype)
    except ValueError as err:
        raise TypeError(str(err)) from None


def _as_dtype_key(dtype):
    try:
        return _dtype_key(dtype)
    except TypeError:
        raise KeyError(dtype) from None

"""``scope``: a ``tf.variable_creator_scope`` that pairs each trainable floating variable
with an fp32 master and a 16-bit copy (Caffe2's PseudoFP16 / ReversePseudoFP16).

Which variables pair up (DESIGN, "Mixed precision"):
- pseudo_fp16: Keras variables requested in the compute dtype (the scope sets a 16-bit
  dtype policy, so every layer constructed inside asks for it) and raw ``tf.Variable``s in
  float32 or the compute dtype. The variable returned is 16-bit; its fp32 master is filled
  first (Keras layers: the initializer is run in float32) and the copy is ``cast(master)``,
  as Caffe2's PseudoFP16Initializer did.
- reverse: trainable float32 variables; the variable returned is fp32 and a 16-bit copy
  rides along. The scope sets Keras's ``mixed_<dtype>`` policy.
- Untouched: non-trainable variables, integer variables, float64, and Keras variables
  requested in float32 in pseudo_fp16 mode (layers explicitly in float32).
Normalization layers constructed in a pseudo_fp16 scope without an explicit ``dtype`` get
``mixed_<dtype>`` (fp32 weights and statistics, 16-bit outputs), as Caffe2 kept spatbn fp32.
"""

import contextlib
import sys
import threading

import keras
import tensorflow as tf
from keras.src.backend.common import global_state

from tfinit.mixed_precision import _checkpoint
from tfinit import initializers
from tfinit.initializers import MODES, create_master_copy_pair
from tfinit.parameter_info import ParameterInfo

COMPUTE_DTYPES = tuple(dtype.name for dtype in initializers.COMPUTE_DTYPES)

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def active_scope():
    """The innermost active scope's settings, or None."""
    stack = _stack()
    return stack[-1] if stack else None


@keras.saving.register_keras_serializable(package="tfinit")
class PseudoFP16Policy(keras.dtype_policies.DTypePolicy):
    """The dtype policy of layers built in a pseudo_fp16 scope (16-bit variables + masters).

    Saved in ``.keras`` configs, so loading such a model outside the scope (which would
    build layers without masters and drop them) raises instead of losing the masters.
    """

    @classmethod
    def from_config(cls, config):
        current = active_scope()
        if current is None or current.mode != "pseudo_fp16":
            raise ValueError(
                "This model was built in tfinit.mixed_precision.scope(mode='pseudo_fp16') "
                "and its file holds fp32 master weights; loading it outside that scope would "
                "drop them. Load it inside the scope: `with tfinit.mixed_precision.scope("
                f"'pseudo_fp16', compute_dtype={config.get('name')!r}): "
                "keras.models.load_model(path)`."
            )
        return cls(**config)


class _Settings:
    def __init__(self, mode, compute_dtype, strategy):
        self.mode = mode
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.strategy = strategy


def _norm_classes():
    names = ("BatchNormalization", "LayerNormalization", "GroupNormalization",
             "RMSNormalization")
    return [getattr(keras.layers, n) for n in names if hasattr(keras.layers, n)]


def _patched_init(original):
    def __init__(self, *args, **kwargs):
        current = active_scope()
        if current is not None and current.mode == "pseudo_fp16" and kwargs.get("dtype") is None:
            kwargs["dtype"] = f"mixed_{current.compute_dtype.name}"
        original(self, *args, **kwargs)

    __init__._tfinit_original = original
    return __init__


@contextlib.contextmanager
def _normalization_fp32():
    """While the outermost scope is active, normalization layers default to fp32 weights."""
    if len(_stack()) > 1:
        yield
        return
    patched = []
    for cls in _norm_classes():
        if "__init__" in cls.__dict__:
            patched.append((cls, cls.__dict__["__init__"]))
            cls.__init__ = _patched_init(cls.__dict__["__init__"])
    try:
        yield
    finally:
        for cls, original in reversed(patched):
            cls.__init__ = original


@contextlib.contextmanager
def scope(mode="pseudo_fp16", compute_dtype="float16"):
    """Create fp32 master + 16-bit copy pairs for the variables created inside.

    ``mode``: ``"pseudo_fp16"`` (code sees the 16-bit copy, master in
    ``parameter_info(v).blob_copy[tf.float32]``) or ``"reverse"`` (code sees the fp32
    variable, the 16-bit copy is in ``blob_copy[compute_dtype]``). Enter it inside
    ``strategy.scope()`` to get distributed masters and copies. Nests; the previous
    Keras dtype policy is restored on exit.
    """
    if mode not in MODES:
        raise ValueError(
            f"tfinit.mixed_precision.scope: mode must be one of {MODES}, got {mode!r}."
        )
    dtype_name = getattr(compute_dtype, "name", compute_dtype)
    if dtype_name not in COMPUTE_DTYPES:
        raise ValueError(
            "tfinit.mixed_precision.scope: compute_dtype must be one of "
            f"{COMPUTE_DTYPES}, got {compute_dtype!r}. For fp32 training no scope is needed."
        )
    strategy = tf.distribute.get_strategy()
    if dtype_name == "bfloat16" and getattr(strategy.extended, "_num_workers", 1) > 1:
        # MWMS broadcasts every variable's initial value with CollectiveBcastSend, which
        # has no bfloat16 kernel: the 16-bit copies could not even be created.
        raise ValueError(
            "tfinit.mixed_precision.scope: compute_dtype='bfloat16' is not supported under "
            "MultiWorkerMirroredStrategy with more than one worker (TensorFlow cannot "
            "broadcast bfloat16 initial values between workers). Use compute_dtype="
            "'float16' there; bfloat16 works under MirroredStrategy."
        )
    settings = _Settings(mode, dtype_name, strategy)
    if mode == "pseudo_fp16":
        policy = PseudoFP16Policy(dtype_name)
    else:
        policy = keras.dtype_policies.DTypePolicy(f"mixed_{dtype_name}")
    previous_policy = global_state.get_global_attribute("dtype_policy", None)
    stack = _stack()
    stack.append(settings)
    try:
        global_state.set_global_attribute("dtype_policy", policy)
        with _normalization_fp32():
            with tf.variable_creator_scope(lambda next_creator, **kw: _create(
                    settings, next_creator, **kw)):
                yield
    finally:
        global_state.set_global_attribute("dtype_policy", previous_policy)
        stack.pop()


def _keras_owner(initial_value):
    """The Keras variable being created (and its initializer, when it has one), or None.

    Keras's TF backend calls ``tf.Variable(lambda: initializer(shape, dtype), ...)`` from
    ``Variable._initialize``; the lambda's closure holds the Keras variable and initializer.
    A Keras variable made from a value is found on the call stack instead.
    """
    code = getattr(initial_value, "__code__", None)
    if code is not None and "_initialize_with_initializer" in getattr(
            initial_value, "__qualname__", ""):
        cells = dict(zip(code.co_freevars, initial_value.__closure__ or ()))
        try:
            owner, initializer = (cells["self"].cell_contents,
                                  cells["initializer"].cell_contents)
        except (KeyError, ValueError):
            owner, initializer = None, None
        if isinstance(owner, keras.Variable):
            return owner, initializer
    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            break
        if frame.f_code.co_name == "_initialize" and isinstance(
                frame.f_locals.get("self"), keras.Variable):
            return frame.f_locals["self"], None
        frame = frame.f_back
    return None, None


def _check_strategy(settings):
    current = tf.distribute.get_strategy()
    if current is not settings.strategy:
        raise ValueError(
            "tfinit.mixed_precision.scope() was entered outside the distribution strategy "
            f"({type(current).__name__}) that is creating this variable: it would create a "
            "separate master per replica. Enter it inside the strategy's scope: "
            "`with strategy.scope(), tfinit.mixed_precision.scope(...): build the model`."
        )


def _create(settings, next_creator, **kwargs):
    if kwargs.get("variable_def") is not None or active_scope() is not settings:
        # Only the innermost scope pairs (an outer scope's creator is further down the chain).
        return next_creator(**kwargs)
    trainable = kwargs.get("trainable")
    sync = kwargs.get("synchronization")
    if trainable is None:
        trainable = sync != tf.VariableSynchronization.ON_READ
    if not trainable:
        return next_creator(**kwargs)
    initial_value = kwargs.get("initial_value")
    owner, initializer = _keras_owner(initial_value)
    requested = kwargs.get("dtype")
    value = None
    if requested is None:
        with tf.init_scope():
            value = tf.convert_to_tensor(initial_value() if callable(initial_value)
                                         else initial_value)
        requested = value.dtype
    requested = tf.as_dtype(requested)
    if not requested.is_floating or not _pairs_up(settings, requested, owner):
        if value is not None:
            kwargs["initial_value"] = value
        return next_creator(**kwargs)
    _check_strategy(settings)
    with tf.init_scope():
        if settings.mode == "pseudo_fp16" and owner is not None and initializer is not None:
            # Caffe2's PseudoFP16Initializer: fill the fp32 master, the copy is its cast.
            value = _fill_fp32(initializer, owner._shape)
        if value is None:
            value = tf.convert_to_tensor(initial_value() if callable(initial_value)
                                         else initial_value, dtype=requested)
    name = kwargs.get("name") or "Variable"
    name = name[:-2] if name.endswith(":0") else name

    def make_variable(**overrides):
        return next_creator(**dict(kwargs, **overrides))

    pair = create_master_copy_pair(name, value, settings.mode, settings.compute_dtype,
                                   trainable=trainable, make_variable=make_variable)
    param = pair.param
    info = ParameterInfo(owner if owner is not None else param, param.shape,
                         blob_copy=pair.blob_copy, name=name)
    _checkpoint.install(param, info)
    if owner is not None:
        _checkpoint.adopt(owner)
    return param


def _fill_fp32(initializer, shape):
    """The initializer's fp32 values, or None when it only fills the dtype Keras asked for."""
    try:
        value = tf.convert_to_tensor(initializer(shape, dtype="float32"))
    except (TypeError, ValueError, NotImplementedError):
        return None
    return value if value.dtype == tf.float32 else None


def _pairs_up(settings, dtype, owner):
    if settings.mode == "reverse":
        return dtype == tf.float32
    if dtype == settings.compute_dtype:
        return True
    # Keras asked for float32 explicitly (e.g. a layer built with dtype="float32"): keep it.
    return owner is None and dtype == tf.float32

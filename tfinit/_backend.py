"""Which Keras backend is active, and TensorFlow loaded only by the parts that need it.

The fill operators, the registry, NetDef reading and the initializer family's Keras classes
run on every Keras 3 backend and never import TensorFlow. The parts that create or train
``tf.Variable``s (``create_param``, ``ExternalInitializer``, ``tfinit.mixed_precision``,
``tfinit.distribute``) call :func:`tensorflow` where they need it: it returns the module, or
raises a ``RuntimeError`` that names the feature and the backend in use. That call is the one
way tfinit's backend-neutral modules obtain TensorFlow.

The code that differs by backend lives here too, so that the modules above stay
backend-neutral: :func:`check_holds` (JAX's 32-bit default), :func:`tensor_from_numpy`
(TensorFlow's one-copy DLPack path for large given values) and
:func:`full_float32_matmuls` (no TF32 on GPUs while a net is checked against Caffe2).
"""

import contextlib

import keras
import numpy as np


def name():
    """The active Keras backend's name (``"tensorflow"``, ``"jax"``, ``"torch"``, ...)."""
    return keras.backend.backend()


#: the Keras backends on which ``tfinit.mixed_precision`` runs its keras.Variable-based
#: implementation (the ``_jax_*`` modules; TensorFlow has its own)
KERAS_VARIABLE_MIXED_PRECISION = ("jax", "torch")


def tensorflow(feature):
    """The ``tensorflow`` module, for ``feature`` (e.g. ``"tfinit.mixed_precision.scope"``).

    Raises:
        RuntimeError: the Keras backend is not TensorFlow.
    """
    backend = name()
    if backend != "tensorflow":
        raise RuntimeError(
            f"{feature} needs the TensorFlow backend of Keras (KERAS_BACKEND=tensorflow); "
            f"the current backend is {backend!r}. tfinit's fill operators and the Keras "
            "initializer classes work on every backend."
        )
    import tensorflow as tf

    return tf


def dense_gradient(gradient):
    """``gradient`` as a dense tensor: TensorFlow's ``tf.IndexedSlices`` (an embedding's
    sparse gradient) converted; every other backend's gradients are dense already."""
    if name() == "tensorflow":
        import tensorflow as tf

        if isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
    return gradient


def check_holds(dtype, op_name):
    """``ValueError`` if the active backend cannot hold ``dtype`` exactly.

    JAX without 64-bit mode silently truncates ``int64``/``uint64``/``float64``/``uint32``
    to 32 bits; tfinit refuses instead of truncating. Every other case passes.
    """
    if name() != "jax" or dtype not in ("int64", "uint64", "float64", "uint32"):
        return
    import jax

    if not jax.config.jax_enable_x64:
        raise ValueError(
            f"{op_name}: the JAX backend cannot hold {dtype} unless 64-bit mode is on "
            f"(jax.config.update('jax_enable_x64', True)); refusing to truncate."
        )


@contextlib.contextmanager
def full_float32_matmuls():
    """float32 matrix products and convolutions in full float32 precision inside the block.

    On NVIDIA GPUs since Ampere both JAX and TensorFlow compute float32 products with TF32
    inputs (10-bit fractions) by default: on an H200 a converted Caffe2 FC then differs from
    Caffe2's float32 by about 4e-4 relative. Inside this block JAX's default matmul precision is
    ``"highest"`` and TensorFlow's TF32 execution is off; both are restored on exit. Other
    backends are left as they are. CPUs compute in float32 either way.
    """
    backend = name()
    if backend == "jax":
        import jax

        with jax.default_matmul_precision("highest"):
            yield
    elif backend == "tensorflow":
        tf = tensorflow("full_float32_matmuls")
        was_enabled = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(was_enabled)
    else:
        yield


#: below this, numpy values are converted the plain way (the saving is not worth it)
ONE_COPY_MIN_BYTES = 1 << 20


def _tf_tensor_one_copy(array):
    """A TensorFlow tensor of a private copy of ``array``, made with one copy in all.

    ``tf.convert_to_tensor`` of a numpy array holds two copies of it at its peak (TF 2.21,
    measured: 2.0x the array's bytes). A 64-byte-aligned numpy copy handed to TF through
    DLPack is the tensor's buffer itself, and ``tf.Variable`` adopts that buffer, so a large
    given parameter costs the variable and nothing more. The copy is private: the variable
    never shares memory with the caller's array.
    """
    tf = tensorflow("tfinit.fills.tf_tensor_from_numpy")

    buffer = np.empty(array.nbytes + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return tf.experimental.dlpack.from_dlpack(copy.__dlpack__())


def tf_tensor_from_numpy(array):
    """``array`` as a TensorFlow tensor of its own; a large numeric one costs a single copy.

    Raises:
        RuntimeError: the Keras backend is not TensorFlow.
    """
    if array.nbytes >= ONE_COPY_MIN_BYTES and array.dtype.kind in "fiu":
        return _tf_tensor_one_copy(array)
    return tensorflow("tfinit.fills.tf_tensor_from_numpy").convert_to_tensor(array)


def tensor_from_numpy(array, dtype):
    """``array`` (already of ``dtype``) as a backend tensor that owns its memory.

    TensorFlow: :func:`tf_tensor_from_numpy` (one copy for large arrays). Other backends:
    a copy converted with ``keras.ops`` (JAX on CPU may adopt a numpy buffer as it is).
    """
    if name() == "tensorflow":
        return tf_tensor_from_numpy(array)
    return keras.ops.convert_to_tensor(array.copy(), dtype=dtype)

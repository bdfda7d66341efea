"""Which Keras backend is active, and TensorFlow loaded only by the parts that need it.

The fill operators, the registry, NetDef reading and the initializer family's Keras classes
run on every Keras 3 backend and never import TensorFlow. The parts that create or train
``tf.Variable``s (``create_param``, ``ExternalInitializer``, ``tfinit.mixed_precision``,
``tfinit.distribute``) call :func:`tensorflow` first: it returns the module, or raises a
``RuntimeError`` that names the feature and the backend in use.
"""

import keras


def name():
    """The active Keras backend's name (``"tensorflow"``, ``"jax"``, ``"torch"``, ...)."""
    return keras.backend.backend()


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

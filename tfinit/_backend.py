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


class _LazyTensorFlow:
    """Stands in for the ``tensorflow`` module in a module whose TF use is all inside
    functions: each attribute access goes through :func:`tensorflow` (for ``feature``).
    """

    def __init__(self, feature):
        self._feature = feature

    def __getattr__(self, attribute):
        return getattr(tensorflow(self._feature), attribute)

    def __repr__(self):
        return f"<TensorFlow, loaded on first use by {self._feature}>"


def lazy_tensorflow(feature):
    """A module-level ``tf`` that imports TensorFlow on first use, for ``feature``.

    ``tf = _backend.lazy_tensorflow("...")`` keeps ``tf.Variable(...)`` in function bodies
    as it reads, while ``import`` of the module stays free of TensorFlow; a use on another
    backend raises :func:`tensorflow`'s ``RuntimeError``.
    """
    return _LazyTensorFlow(feature)

"""``Fill``, the base of every tfinit fill operator, and its registration.

A fill is a Keras initializer: ``fill(shape, dtype=None)``. The base validates the shape,
resolves the dtype (the call's, then the fill's own, then ``keras.config.floatx()``),
applies each operator's shape rules and returns an empty tensor for a shape with a zero
dimension; subclasses implement ``_fill(shape, dtype)`` for the rest.
"""

import keras

from tfinit import _args, _backend, _fans
from tfinit import _keras_internals as internals
from tfinit.fills import registry


class Fill(keras.initializers.Initializer):
    """Base of every tfinit fill: shape/dtype checks and the empty-shape rule.

    Subclasses implement ``_fill(shape, dtype)`` for a non-empty, validated shape,
    and ``_check_shape(shape)`` for rules checked before anything is drawn.
    """

    #: the Caffe2 maths, shown by ``tfinit ops``
    formula = ""
    #: the dtype the fill produces when neither the call nor the user gives one
    default_dtype = None

    @property
    def op_name(self):
        """The Caffe2 operator name (the class name)."""
        return type(self).__name__

    def __call__(self, shape, dtype=None, layout=None):
        """The filled tensor of ``shape`` in ``dtype``, distributed as ``layout`` when given.

        ``layout`` is Keras 3's distribution layout (a ``keras.distribution.TensorLayout`` or
        the backend's own), as Keras passes it on backends that shard variables (JAX); it is
        not the Caffe2/Keras weight ``layout`` of the fans (a constructor argument).
        """
        shape = _args.normalize_shape(shape, self.op_name)
        dtype = self._resolve_dtype(dtype)
        self._check_shape(shape)
        if _fans.numel(shape) == 0:
            _backend.check_holds(dtype, self.op_name)
            return distributed(keras.ops.zeros(shape, dtype=dtype), layout)
        return distributed(self._fill(shape, dtype), layout)

    def _resolve_dtype(self, dtype):
        dtype = _args.standardize_dtype(dtype, self.op_name)
        if dtype is None:
            dtype = getattr(self, "dtype", None) or self.default_dtype or keras.config.floatx()
        return dtype

    def _check_shape(self, shape):
        """Shape rules checked before anything is drawn (empty shapes included)."""

    def _fill(self, shape, dtype):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{self.op_name}({args})"


def register(cls):
    """Register ``cls`` in tfinit's op table and with Keras, bare name included (a string
    ``keras.initializers.get`` resolves, in layers, configs and ``.keras`` files)."""
    registry.register(cls)
    cls = keras.saving.register_keras_serializable(package="tfinit")(cls)
    keras.saving.get_custom_objects()[cls.__name__] = cls  # Keras <= 3.15, deserialize
    internals.register_initializer_name(cls)  # Keras 3.16: get() reads its own table only
    return cls


def distributed(value, layout):
    """``value`` laid out as Keras's distribution ``layout`` (unchanged when it is None)."""
    if layout is None:
        return value
    return keras.distribution.distribute_tensor(value, layout)

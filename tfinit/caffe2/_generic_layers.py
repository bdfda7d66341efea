"""Keras layers for the generic Caffe2 ops that detection nets use.

``Caffe2AffineChannel``, ``Caffe2ResizeNearest``, ``Caffe2TopK``, ``Caffe2Gather``,
``Caffe2BatchPermutation``, ``Caffe2Cast``, ``Caffe2LengthsToSegmentIds`` and
``Caffe2RowConcat``, each
registered as ``"tfinit>ClassName"``. Only ``keras.ops`` computes (any backend); an index a
Caffe2 op rejects at run time raises here too (:func:`check_at_run`). The Caffe2 semantics
are in docs/caffe2-ops.md.
"""

import sys

import keras
import numpy as np


def check_at_run(ok, message):
    """Raise ``ValueError(message)`` when the boolean tensor ``ok`` is False.

    Eager tensors (a model's ``__call__`` on TensorFlow, JAX and torch outside ``jit``) are
    checked directly; inside a ``tf.function`` a ``tf.debugging.Assert`` raises
    ``InvalidArgumentError`` with the message when the graph runs (TensorFlow is the
    backend there, so it is loaded). A traced JAX value cannot be checked (no run-time
    errors under ``jax.jit``): there the result is Caffe2's for valid inputs only, as
    docs/caffe2-ops.md says.
    """
    try:
        value = keras.ops.convert_to_numpy(ok)
    except Exception:  # a graph tensor or a tracer: no value yet
        tf = sys.modules.get("tensorflow") if keras.backend.backend() == "tensorflow" else None
        if tf is not None:
            tf.debugging.Assert(ok, [message])
        return
    if not bool(np.all(value)):
        raise ValueError(message)


def _ints(values):
    return tuple(int(v) for v in values)


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2AffineChannel(keras.layers.Layer):
    """Caffe2's AffineChannel: ``y = x * scale[c] + bias[c]`` per channel.

    Args:
        channels: the number of channels ``C`` (the size of ``scale`` and ``bias``).
        axis: the channel axis of the tensor the layer is called on (``-1`` for the NHWC
            tensors inside a converted model, ``1`` for a 2-D ``[N, C]`` blob).
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``trainable``: Caffe2's
            ``is_learnable``).

    Returns:
        Called on ``x``: ``x * scale + bias`` along ``axis``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2AffineChannel
    >>> layer = Caffe2AffineChannel(2, axis=1)
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([2.0, 3.0]), np.array([1.0, 0.0])])
    >>> keras.ops.convert_to_numpy(layer(np.ones((1, 2), "float32"))).tolist()
    [[3.0, 3.0]]
    """

    def __init__(self, channels, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.channels = int(channels)
        self.axis = int(axis)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(self.channels,), initializer="ones")
        self.bias = self.add_weight(name="bias", shape=(self.channels,), initializer="zeros")

    def _shaped(self, weight, rank):
        shape = [1] * rank
        shape[self.axis] = self.channels
        return keras.ops.reshape(weight, shape)

    def call(self, x):
        rank = len(x.shape)
        return (x * keras.ops.cast(self._shaped(self.scale, rank), x.dtype)
                + keras.ops.cast(self._shaped(self.bias, rank), x.dtype))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "channels": self.channels, "axis": self.axis}


def nearest_sources(size, scale):
    """Caffe2's ResizeNearest along one axis: the output size ``floor(size * scale)`` and
    the input index ``min(floor(i / scale), size - 1)`` of each output index ``i``, with
    Caffe2's float32 arithmetic."""
    scale = np.float32(scale)
    out = int(np.float32(size) * scale)
    sources = [min(int(np.float32(i) / scale), size - 1) for i in range(out)]
    return out, sources


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2ResizeNearest(keras.layers.Layer):
    """Caffe2's ResizeNearest on an NHWC tensor: output row ``i`` is input row ``rows[i]``
    and output column ``j`` input column ``cols[j]`` (:func:`nearest_sources`).

    Args:
        rows: the input row of each output row.
        cols: the input column of each output column.
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on ``[N, H, W, C]``: ``[N, len(rows), len(cols), C]``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2ResizeNearest
    >>> x = np.arange(2, dtype="float32").reshape(1, 1, 2, 1)
    >>> y = Caffe2ResizeNearest([0], [0, 0, 1, 1])(x)
    >>> keras.ops.convert_to_numpy(y)[0, 0, :, 0].tolist()
    [0.0, 0.0, 1.0, 1.0]
    """

    def __init__(self, rows, cols, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.cols = _ints(rows), _ints(cols)

    def call(self, x):
        return self._along(self._along(x, self.rows, 1), self.cols, 2)

    @staticmethod
    def _along(x, sources, axis):
        """``take`` along ``axis``; an integer scale's ``[0, 0, 1, 1, ...]`` is a
        ``repeat`` (UpSampling2D's kernel: no gather)."""
        size = x.shape[axis]
        scale = len(sources) // size if size else 0
        if scale >= 1 and len(sources) == size * scale and all(
                s == i // scale for i, s in enumerate(sources)):
            return x if scale == 1 else keras.ops.repeat(x, scale, axis=axis)
        return keras.ops.take(x, keras.ops.convert_to_tensor(np.asarray(sources, np.int32)),
                              axis=axis)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], len(self.rows), len(self.cols), input_shape[3])

    def get_config(self):
        return {**super().get_config(), "rows": list(self.rows), "cols": list(self.cols)}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2TopK(keras.layers.Layer):
    """Caffe2's TopK along ``axis``: the ``k`` largest values, ties lower index first,
    and their indices (int64); past the axis' size values are 0 and indices -1. With
    ``flattened=True`` a third output, 1-D, holds each value's index in the flattened input
    (-1 for the padding), in the order of the values.

    Args:
        k: how many values (``k >= 1``).
        axis: the axis (non-negative) of the tensor the layer is called on.
        flattened: also return the flattened indices.
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        ``[values, indices]`` (and ``flattened_indices``), each with ``axis`` of size ``k``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2TopK
    >>> values, indices = Caffe2TopK(3, axis=1)(np.array([[1.0, 5.0]], "float32"))
    >>> keras.ops.convert_to_numpy(values).tolist(), keras.ops.convert_to_numpy(indices).tolist()
    ([[5.0, 1.0, 0.0]], [[1, 0, -1]])
    """

    def __init__(self, k, axis, flattened=False, **kwargs):
        super().__init__(**kwargs)
        self.k, self.axis, self.flattened = int(k), int(axis), bool(flattened)

    def call(self, x):
        rank = len(x.shape)
        moved = keras.ops.moveaxis(x, self.axis, -1)
        size = x.shape[self.axis]
        dynamic = size is None
        if dynamic:  # the batch axis: its size is known only at run time
            size = keras.ops.shape(x)[self.axis]
            taken = keras.ops.minimum(size, self.k)
            values, indices = keras.ops.top_k(moved, k=self.k if not dynamic else taken)
        else:
            values, indices = keras.ops.top_k(moved, k=min(self.k, size))
        indices = keras.ops.cast(indices, "int64")
        missing = self.k - keras.ops.shape(values)[-1]
        pad = [(0, 0)] * (rank - 1) + [(0, missing)]
        values = keras.ops.pad(values, pad, constant_values=0)
        indices = keras.ops.pad(indices, pad, constant_values=-1)
        outputs = [keras.ops.moveaxis(values, -1, self.axis),
                   keras.ops.moveaxis(indices, -1, self.axis)]
        if self.flattened:
            outputs.append(self._flat(x, outputs[1]))
        return outputs

    def _flat(self, x, indices):
        """Each index's position in the flattened input (row-major), -1 kept."""
        shape = keras.ops.cast(keras.ops.shape(x), "int64")
        flat = keras.ops.zeros_like(indices)
        for axis in range(len(x.shape)):
            if axis == self.axis:
                position = indices
            else:
                position = keras.ops.cast(keras.ops.arange(keras.ops.shape(indices)[axis]),
                                          "int64")
                view = [1] * len(x.shape)
                view[axis] = -1
                position = keras.ops.reshape(position, view)
            flat = flat * shape[axis] + position
        return keras.ops.reshape(keras.ops.where(indices < 0, -1, flat), (-1,))

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        shape[self.axis] = self.k
        shapes = [tuple(shape)] * 2
        if self.flattened:
            known = None not in shape
            shapes.append((int(np.prod(shape)) if known else None,))
        return shapes

    def get_config(self):
        return {**super().get_config(), "k": self.k, "axis": self.axis,
                "flattened": self.flattened}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Gather(keras.layers.Layer):
    """Caffe2's Gather: ``take(data, indices, axis)``, a negative index counted from the
    end; an index outside ``[-size, size)`` raises (Caffe2 rejects it).

    Args:
        axis: the axis of ``data`` indexed (non-negative).
        table_shape: ``None``: called on ``[data, indices]``; a shape: ``data`` is this
            layer's weight ``table`` (a blob of the init net) and it is called on
            ``indices`` only.
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Gather
    >>> data = np.array([[1.0], [2.0], [3.0]], "float32")
    >>> y = Caffe2Gather(axis=0)([data, np.array([-1, 0], "int32")])
    >>> keras.ops.convert_to_numpy(y).tolist()
    [[3.0], [1.0]]
    """

    def __init__(self, axis=0, table_shape=None, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.table_shape = None if table_shape is None else _ints(table_shape)

    def build(self, input_shape):
        if self.table_shape is not None:
            self.table = self.add_weight(name="table", shape=self.table_shape,
                                         initializer="zeros", trainable=False)

    def call(self, inputs):
        if self.table_shape is None:
            data, indices = inputs
        else:
            data, indices = keras.ops.convert_to_tensor(self.table), inputs
        size = keras.ops.shape(data)[self.axis]
        indices = keras.ops.cast(indices, "int32")
        check_at_run(keras.ops.all((indices >= -size) & (indices < size)),
                     f"{self.name}: Gather index out of range: indices must lie in "
                     f"[-size, size) of data's axis {self.axis}, as Caffe2 requires")
        indices = keras.ops.where(indices < 0, indices + size, indices)
        return keras.ops.take(data, indices, axis=self.axis)

    def compute_output_shape(self, input_shape):
        if self.table_shape is None:
            data, indices = input_shape
        else:
            data, indices = self.table_shape, input_shape
        return (*data[:self.axis], *indices, *data[self.axis + 1:])

    def get_config(self):
        return {**super().get_config(), "axis": self.axis,
                "table_shape": None if self.table_shape is None else list(self.table_shape)}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2BatchPermutation(keras.layers.Layer):
    """Caffe2's BatchPermutation: row ``i`` of the output is row ``indices[i]`` of ``x``.
    ``indices`` must hold one index per row of ``x``, each in ``[0, rows)`` (checked when
    the layer runs: Caffe2 rejects the first and reads undefined memory for the second).

    Args:
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on ``[x, indices]``: ``x`` with its rows permuted.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2BatchPermutation
    >>> x = np.array([[1.0], [2.0]], "float32")
    >>> y = Caffe2BatchPermutation()([x, np.array([1, 0], "int32")])
    >>> keras.ops.convert_to_numpy(y).tolist()
    [[2.0], [1.0]]
    """

    def call(self, inputs):
        x, indices = inputs
        rows = keras.ops.shape(x)[0]
        indices = keras.ops.cast(indices, "int32")
        check_at_run(keras.ops.shape(indices)[0] == rows,
                     f"{self.name}: BatchPermutation needs one index per row of X, as Caffe2 "
                     "requires")
        check_at_run(keras.ops.all((indices >= 0) & (indices < rows)),
                     f"{self.name}: BatchPermutation indices must lie in [0, rows of X)")
        return keras.ops.take(x, indices, axis=0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2LengthsToSegmentIds(keras.layers.Layer):
    """Caffe2's LengthsToSegmentIds: ``[2, 1]`` -> ``[0, 0, 1]`` (int32); the output's
    length is the sum of the lengths, known only at run time.

    Args:
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on lengths ``[N]``: the segment ids ``[sum(lengths)]``, int32.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2LengthsToSegmentIds
    >>> y = Caffe2LengthsToSegmentIds()(np.array([2, 1], "int32"))
    >>> keras.ops.convert_to_numpy(y).tolist()
    [0, 0, 1]
    """

    def call(self, lengths):
        lengths = keras.ops.cast(lengths, "int32")
        check_at_run(keras.ops.all(lengths >= 0),
                     f"{self.name}: LengthsToSegmentIds lengths must be non-negative")
        ids = keras.ops.arange(keras.ops.shape(lengths)[0], dtype="int32")
        return keras.ops.repeat(ids, lengths, axis=0)

    def compute_output_shape(self, input_shape):
        return (None,)


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Cast(keras.layers.Layer):
    """Caffe2's Cast: ``keras.ops.cast`` to ``to`` (a float to an int toward zero, as
    C++'s ``static_cast``).

    Args:
        to: the Keras dtype name (``"int32"``, ``"float32"``, ...).
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on ``x``: ``x`` cast to ``to``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Cast
    >>> keras.ops.convert_to_numpy(Caffe2Cast("int32")(np.array([1.7, -1.7]))).tolist()
    [1, -1]
    """

    def __init__(self, to, **kwargs):
        super().__init__(**kwargs)
        self.to = str(to)

    def call(self, x):
        return keras.ops.cast(x, self.to)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype=self.to)

    def get_config(self):
        return {**super().get_config(), "to": self.to}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2RowConcat(keras.layers.Layer):
    """Caffe2's Concat on axis 0 (rois, detections: blobs whose first axis is a count
    known at run time) and its ``split_info``, the rows each input gave (int32).

    Args:
        **kwargs: base ``keras.layers.Layer`` arguments.

    Returns:
        Called on a list of tensors with the same shape past axis 0: ``[rows, split_info]``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2RowConcat
    >>> y, info = Caffe2RowConcat()([np.ones((2, 3), "float32"), np.ones((1, 3), "float32")])
    >>> tuple(y.shape), keras.ops.convert_to_numpy(info).tolist()
    ((3, 3), [2, 1])
    """

    def call(self, inputs):
        rows = keras.ops.stack([keras.ops.shape(x)[0] for x in inputs])
        return keras.ops.concatenate(inputs, axis=0), keras.ops.cast(rows, "int32")

    def compute_output_shape(self, input_shape):
        return (None, *input_shape[0][1:]), (len(input_shape),)

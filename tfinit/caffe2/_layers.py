"""Keras layers for Caffe2 semantics that Keras's built-in layers lack.

Each is registered as ``"tfinit>ClassName"`` (``Caffe2Pooling2D``, ``Caffe2ChannelShuffle``,
``Caffe2Split``, ``Caffe2LRN``, ``Caffe2ShapeInfo``, ``Caffe2Reshape``, ``Caffe2Broadcast``,
``Caffe2Parameter``):
a ``.keras`` file using them loads after ``import tfinit.caffe2``. Only ``keras.ops`` is
used, so they run on any Keras backend. The Caffe2 semantics are in docs/caffe2-ops.md.
"""

import math

import keras


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Pooling2D(keras.layers.Layer):
    """Caffe2's MaxPool/AveragePool with explicit pads on an NHWC tensor.

    Output size ``floor((H + pad_t + pad_b - k) / stride) + 1`` (Caffe's ceil mode,
    ``legacy_pad=3``, is this with the tail pads it computes); padded cells are
    ignored: max pads with -inf, average divides by the number of real cells
    (Caffe2's default ``count_include_pad=0``). Keras's pooling layers pad only
    symmetrically ("same") and, averaging, count the pads; ``to_keras`` uses this layer
    when a Caffe2 pool's pads differ from what Keras does. An output size of 0 (Caffe's
    ceil mode with a kernel larger than the input) gives an empty tensor, as Caffe2 does.

    Args:
        mode: ``"max"`` or ``"average"``.
        pool_size: ``(kh, kw)``.
        strides: ``(sh, sw)``.
        pads: ``(top, left, bottom, right)``, Caffe2's order.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on an NHWC tensor ``[N, H, W, C]``: the pooled ``[N, H', W', C]``.

    Raises:
        ValueError: ``mode`` is neither ``"max"`` nor ``"average"``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Pooling2D
    >>> x = np.arange(9, dtype="float32").reshape(1, 3, 3, 1)  # NHWC
    >>> pool = Caffe2Pooling2D("average", (2, 2), (2, 2), pads=(0, 0, 1, 1))
    >>> keras.ops.convert_to_numpy(pool(x))[0, :, :, 0].tolist()  # pads not counted
    [[2.0, 3.5], [6.5, 8.0]]
    """

    def __init__(self, mode, pool_size, strides, pads, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("max", "average"):
            raise ValueError(f"Caffe2Pooling2D: Argument `mode` must be 'max' or 'average'. "
                             f"Received: mode={mode!r}")
        self.mode = mode
        self.pool_size = tuple(int(v) for v in pool_size)
        self.strides = tuple(int(v) for v in strides)
        self.pads = tuple(int(v) for v in pads)  # top, left, bottom, right (Caffe2's order)

    def _pad(self, x, value):
        t, left, b, r = self.pads
        return keras.ops.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=value)

    def call(self, x):
        _, out_h, out_w, channels = self.compute_output_shape(x.shape)
        if out_h == 0 or out_w == 0:  # Caffe's ceil mode on a kernel larger than the input
            return keras.ops.zeros((keras.ops.shape(x)[0], out_h, out_w, channels), x.dtype)
        if self.mode == "max":
            return keras.ops.max_pool(self._pad(x, float("-inf")), self.pool_size,
                                      self.strides, padding="valid")
        total = keras.ops.average_pool(self._pad(x, 0.0), self.pool_size, self.strides,
                                       padding="valid")
        ones = keras.ops.ones_like(x[..., :1])
        share = keras.ops.average_pool(self._pad(ones, 0.0), self.pool_size, self.strides,
                                       padding="valid")
        return total / share

    def compute_output_shape(self, input_shape):
        n, h, w, c = input_shape
        t, left, b, r = self.pads
        out_h = (h + t + b - self.pool_size[0]) // self.strides[0] + 1
        out_w = (w + left + r - self.pool_size[1]) // self.strides[1] + 1
        return (n, out_h, out_w, c)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "pool_size": self.pool_size,
                "strides": self.strides, "pads": self.pads}


def _ints(values):
    return tuple(int(v) for v in values)


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2ChannelShuffle(keras.layers.Layer):
    """Caffe2's ChannelShuffle on the channel axis (last by default).

    The C channels are viewed as ``(group, C / group)``, transposed and flattened back:
    output channel ``i * group + j`` is input channel ``j * (C / group) + i`` (ShuffleNet's
    shuffle; Caffe2's NCHW op is this with ``axis=1``).

    Args:
        group: the number of groups, a positive int dividing the channels.
        axis: the channel axis (``-1``: channels-last).
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: the tensor with its channels shuffled, the same shape.

    Raises:
        ValueError: ``group`` is not positive, or (when built) does not divide the
            channels.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2ChannelShuffle
    >>> x = np.arange(6, dtype="float32").reshape(1, 6)  # channel c holds c
    >>> keras.ops.convert_to_numpy(Caffe2ChannelShuffle(group=2)(x)).tolist()
    [[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]]
    """

    def __init__(self, group, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.group, self.axis = int(group), int(axis)
        if self.group <= 0:
            raise ValueError(f"Argument `group` must be a positive int. Received: group={group}")

    def build(self, input_shape):
        channels = input_shape[self.axis]
        if channels is not None and channels % self.group:
            raise ValueError(f"Caffe2ChannelShuffle: {channels} channels do not split into "
                             f"group={self.group} equal parts.")

    def call(self, x):
        rank = len(x.shape)
        axis = self.axis % rank
        channels = x.shape[axis]
        shape = keras.ops.shape(x)
        split = (*shape[:axis], self.group, channels // self.group, *shape[axis + 1:])
        y = keras.ops.reshape(x, split)
        perm = list(range(rank + 1))
        perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
        return keras.ops.reshape(keras.ops.transpose(y, perm), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "group": self.group, "axis": self.axis}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Split(keras.layers.Layer):
    """Caffe2's Split: consecutive slices of ``sizes`` along ``axis`` (a list of tensors).

    Caffe2's ``split`` argument (or its second input, known when the model is built)
    gives ``sizes``; without it Caffe2 splits into equal parts, which ``to_keras`` turns
    into the sizes, or, along the batch axis (whose size is known only when the model
    runs), into ``parts``: equal parts, the batch refused at run time unless it divides.

    Args:
        sizes: the length of each slice along ``axis``; they add up to its size.
            ``None`` with ``parts``.
        axis: the axis to split (``-1``: the last).
        parts: without ``sizes``, the number of equal parts.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: a list of ``len(sizes)`` tensors.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Split
    >>> x = np.arange(6, dtype="float32").reshape(2, 3)
    >>> [keras.ops.convert_to_numpy(y).tolist() for y in Caffe2Split(sizes=(1, 2))(x)]
    [[[0.0], [3.0]], [[1.0, 2.0], [4.0, 5.0]]]
    """

    def __init__(self, sizes, axis=-1, parts=None, **kwargs):
        super().__init__(**kwargs)
        self.sizes, self.axis = None if sizes is None else _ints(sizes), int(axis)
        self.parts = len(self.sizes) if parts is None and sizes is not None else int(parts)
        if self.parts <= 0 or sizes is not None and len(self.sizes) != self.parts:
            raise ValueError(f"Caffe2Split: Argument `parts` must be a positive int (the "
                             f"number of sizes when `sizes` is given). Received: parts={parts}, "
                             f"sizes={sizes}")

    def call(self, x):
        axis = self.axis % len(x.shape)
        if self.sizes is None:  # equal parts of a size known at run time (it must divide)
            return list(keras.ops.split(x, self.parts, axis=axis))
        outputs, start = [], 0
        for size in self.sizes:
            index = [slice(None)] * len(x.shape)
            index[axis] = slice(start, start + size)
            outputs.append(x[tuple(index)])
            start += size
        return outputs

    def compute_output_shape(self, input_shape):
        axis = self.axis % len(input_shape)
        sizes = self.sizes
        if sizes is None:
            part = None if input_shape[axis] is None else input_shape[axis] // self.parts
            sizes = [part] * self.parts
        return [tuple(size if k == axis else d for k, d in enumerate(input_shape))
                for size in sizes]

    def get_config(self):
        return {**super().get_config(), "sizes": self.sizes, "axis": self.axis,
                "parts": self.parts}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2LRN(keras.layers.Layer):
    """Caffe2's LRN (local response normalization across channels).

    ``scale = bias + alpha / size * sum(x[c']^2 for c' in c - (size-1)/2 .. c + (size-1)/2)``
    (channels outside ``0..C-1`` count as 0) and ``y = x * scale ** -beta``. ``size`` is
    odd. ``return_scale=True`` returns ``[y, scale]`` (the op's optional second output).
    Caffe2's argument ``bias`` is Caffe's ``k``.

    Args:
        size: the window, in channels: a positive odd int.
        alpha: the scale of the sum of squares (divided by ``size``, as Caffe2 does).
        beta: the exponent.
        bias: the constant added (Caffe's ``k``).
        axis: the channel axis (``-1``: channels-last).
        return_scale: also return ``scale``.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: ``y``, the same shape, or ``[y, scale]``.

    Raises:
        ValueError: ``size`` is not a positive odd int.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2LRN
    >>> lrn = Caffe2LRN(size=3, alpha=3.0, beta=1.0, bias=1.0, return_scale=True)
    >>> y, scale = lrn(np.ones((1, 4), "float32"))  # 2 of the 3 channels at each edge
    >>> keras.ops.convert_to_numpy(scale).tolist()
    [[3.0, 4.0, 4.0, 3.0]]
    >>> keras.ops.convert_to_numpy(y).astype(float).round(4).tolist()
    [[0.3333, 0.25, 0.25, 0.3333]]
    """

    def __init__(self, size, alpha=0.0, beta=0.0, bias=1.0, axis=-1, return_scale=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.size = int(size)
        if self.size <= 0 or self.size % 2 == 0:
            raise ValueError(f"Argument `size` must be a positive odd int. Received: size={size}")
        self.alpha, self.beta, self.bias = float(alpha), float(beta), float(bias)
        self.axis, self.return_scale = int(axis), bool(return_scale)

    def call(self, x):
        rank = len(x.shape)
        axis = self.axis % rank
        half = (self.size - 1) // 2
        pads = [(0, 0)] * rank
        pads[axis] = (half, half)
        squares = keras.ops.pad(keras.ops.square(x), pads)
        channels = x.shape[axis]
        total = 0.0
        for k in range(self.size):
            index = [slice(None)] * rank
            index[axis] = slice(k, k + channels)
            total = total + squares[tuple(index)]
        scale = self.bias + (self.alpha / self.size) * total
        y = x * keras.ops.power(scale, -self.beta)
        return [y, scale] if self.return_scale else y

    def compute_output_shape(self, input_shape):
        return [input_shape, input_shape] if self.return_scale else input_shape

    def get_config(self):
        return {**super().get_config(), "size": self.size, "alpha": self.alpha,
                "beta": self.beta, "bias": self.bias, "axis": self.axis,
                "return_scale": self.return_scale}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2ShapeInfo(keras.layers.Layer):
    """A shape blob Caffe2 writes beside a result: Concat's ``split_info`` (int32 sizes of
    its inputs along the axis) or Reshape's ``old_shape`` (int64).

    ``values`` are known when the model is built; ``batch_index`` names the entry that is
    the batch size, read from the input at run time (None: all entries are constant);
    with it, entries ``-1`` (dims unknown when built: ``N`` of a batch-major sequence
    converted time-major) are read at run time too.
    ``to_keras`` uses it so that a net returning such a blob gets Caffe2's values.

    Args:
        values: the shape blob's entries (ints).
        dtype_name: its dtype: ``"int32"`` (Concat) or ``"int64"`` (Reshape).
        batch_index: the entry replaced by the input's batch size, or ``None``.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``).

    Returns:
        Called on the tensor the shape belongs to: a 1-D tensor of ``len(values)``.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2ShapeInfo
    >>> old_shape = Caffe2ShapeInfo((1, 12), "int64", batch_index=0)  # Reshape's [N, 12]
    >>> keras.ops.convert_to_numpy(old_shape(np.zeros((5, 12), "float32"))).tolist()
    [5, 12]
    """

    def __init__(self, values, dtype_name="int32", batch_index=None, **kwargs):
        super().__init__(**kwargs)
        self.values = _ints(values)
        self.dtype_name = str(dtype_name)
        self.batch_index = None if batch_index is None else int(batch_index)

    def call(self, x):
        values = keras.ops.convert_to_tensor(self.values, dtype=self.dtype_name)
        if self.batch_index is None:
            return values
        for k, value in enumerate(self.values):
            if k == self.batch_index or value == -1:
                dim = keras.ops.cast(keras.ops.shape(x)[k], self.dtype_name)
                one_hot = keras.ops.one_hot(k, len(self.values), dtype=self.dtype_name)
                values = values * (1 - one_hot) + dim * one_hot
        return values

    def compute_output_shape(self, input_shape):
        return (len(self.values),)

    def compute_output_spec(self, x):
        return keras.KerasTensor((len(self.values),), dtype=self.dtype_name)

    def get_config(self):
        return {**super().get_config(), "values": self.values, "dtype_name": self.dtype_name,
                "batch_index": self.batch_index}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Reshape(keras.layers.Layer):
    """Caffe2's Reshape when it moves the batch axis (e.g. ``[T, N, D]`` to ``[-1, D]``).

    ``shape`` is Caffe2's: ``0`` copies the input's dimension, one ``-1`` is inferred,
    and it includes the batch axis (``keras.layers.Reshape`` keeps the batch axis and
    reshapes the rest; ``to_keras`` uses it when Caffe2's reshape does that too).

    Args:
        shape: the new shape, batch axis included, with Caffe2's ``0`` and ``-1``.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: the tensor reshaped.

    Example:

    >>> import numpy as np
    >>> from tfinit.caffe2 import Caffe2Reshape
    >>> tuple(Caffe2Reshape((-1, 4))(np.zeros((2, 3, 4), "float32")).shape)  # [T, N, D]
    (6, 4)
    >>> Caffe2Reshape((0, -1)).compute_output_shape((2, 3, 4))
    (2, 12)
    """

    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.shape = _ints(shape)

    def _target(self, dims):
        return [dims[k] if v == 0 else v for k, v in enumerate(self.shape)]

    def call(self, x):
        return keras.ops.reshape(x, self._target(keras.ops.shape(x)))

    def compute_output_shape(self, input_shape):
        target = self._target(input_shape)
        if None in target or -1 not in target:
            return tuple(None if v == -1 else v for v in target)
        known = math.prod(d for d in input_shape if d is not None)
        if None in input_shape:
            return tuple(None if v == -1 else v for v in target)
        return tuple(known // -math.prod(target) if v == -1 else v for v in target)

    def get_config(self):
        return {**super().get_config(), "shape": self.shape}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Broadcast(keras.layers.Layer):
    """``y = x * weight`` or ``x + weight``: a Caffe2 ``Mul``/``Add`` whose second input is
    a parameter of the net, broadcast against ``x`` (Caffe's Scale layer: a learned
    per-channel scale and bias). ``weight`` is trainable.

    ``shape`` is the weight's shape in the model's layout, without the batch axis and
    broadcastable to ``x`` (``(1, 1, C)`` scales the channels of an NHWC image).
    ``caffe2_shape`` is the same weight in Caffe2's order (``(C, 1, 1)`` for NCHW) and
    ``channels_first`` says a 3-D one is moved from ``(C, H, W)`` to ``(H, W, C)``:
    :meth:`weight_from_caffe2` turns the blob's values into the weight
    (``load_into_keras`` does, taking the blob named as the layer).

    Args:
        mode: ``"mul"`` (``x * weight``; initialized to ones) or ``"add"``
            (``x + weight``; zeros).
        shape: the weight's shape in the model's layout, without the batch axis.
        caffe2_shape: the weight's shape in Caffe2's order (default: ``shape``); as
            many elements.
        channels_first: move a 3-D Caffe2 weight from ``(C, H, W)`` to ``(H, W, C)``.
        weight_input: no weight of its own: called on ``[x, w]``, ``w`` the output of a
            :class:`Caffe2Parameter` (a blob several ops read), in Caffe2's shape.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: ``x * weight`` or ``x + weight``, broadcast.

    Raises:
        ValueError: a ``mode`` other than ``"mul"``/``"add"``, or a ``caffe2_shape``
            with another number of elements.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Broadcast, load_into_keras
    >>> inputs = keras.Input((2, 2, 2))  # NHWC; Caffe2's per-channel scale is (C, 1, 1)
    >>> scale = Caffe2Broadcast("mul", (1, 1, 2), (2, 1, 1), channels_first=True,
    ...                         name="scale")
    >>> model = keras.Model(inputs, scale(inputs))
    >>> load_into_keras(model, {"scale": np.array([2.0, 3.0], "float32")}).assigned
    {'scale': 'scale.weight'}
    >>> keras.ops.convert_to_numpy(model(np.ones((1, 2, 2, 2), "float32")))[0, 0, 0].tolist()
    [2.0, 3.0]
    """

    def __init__(self, mode, shape, caffe2_shape=None, channels_first=False,
                 weight_input=False, **kwargs):
        super().__init__(**kwargs)
        self.weight_input = bool(weight_input)
        if mode not in ("mul", "add"):
            raise ValueError(f"Argument `mode` must be 'mul' or 'add'. Received: mode={mode!r}")
        self.mode = mode
        self.shape = _ints(shape)
        self.caffe2_shape = self.shape if caffe2_shape is None else _ints(caffe2_shape)
        self.channels_first = bool(channels_first)
        if math.prod(self.shape) != math.prod(self.caffe2_shape):
            raise ValueError(f"Argument `caffe2_shape` must have as many elements as `shape` "
                             f"{self.shape}. Received: caffe2_shape={self.caffe2_shape}")

    def build(self, input_shape):
        if self.weight_input:  # the weight is a Caffe2Parameter's, given with x at each call
            return
        init = "ones" if self.mode == "mul" else "zeros"
        self.weight = self.add_weight(name="weight", shape=self.shape, initializer=init,
                                      trainable=True)

    def weight_from_caffe2(self, value):
        """The weight's value from the Caffe2 blob (any shape with as many elements)."""
        value = value.reshape(self.caffe2_shape)
        if self.channels_first and value.ndim == 3:
            value = value.transpose(1, 2, 0)
        return value

    def call(self, x):
        if self.weight_input:  # [x, the Caffe2Parameter's tensor (1, *blob shape)]
            x, weight = x
            weight = keras.ops.reshape(weight, self.caffe2_shape)
            if self.channels_first and len(self.caffe2_shape) == 3:
                weight = keras.ops.transpose(weight, (1, 2, 0))
        else:
            weight = self.weight
        weight = keras.ops.cast(weight, x.dtype)
        return x * weight if self.mode == "mul" else x + weight

    def compute_output_shape(self, input_shape):
        return input_shape[0] if self.weight_input else input_shape

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "shape": self.shape,
                "caffe2_shape": self.caffe2_shape, "channels_first": self.channels_first,
                "weight_input": self.weight_input}


@keras.saving.register_keras_serializable(package="tfinit")
class Caffe2Parameter(keras.layers.Layer):
    """A Caffe2 parameter blob that several ops read: one trainable weight, output as a
    tensor of shape ``(1, *shape)`` so that every layer reading the blob uses the same
    variable (Caffe2 trains one blob; its gradient is the sum of the readers').

    ``to_keras`` calls it on any tensor of the model (the input is not used) and gives its
    output to ``Caffe2Broadcast(..., weight_input=True)`` layers, one per op reading the blob (a
    Conv's or FC's bias, a Scale layer's Add parameter).

    Args:
        shape: the blob's shape, as the init net holds it.
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Returns:
        Called on a tensor: the weight with a leading axis of 1, in that tensor's dtype.

    Example:

    >>> import keras, numpy as np
    >>> from tfinit.caffe2 import Caffe2Broadcast, Caffe2Parameter, load_into_keras
    >>> x = keras.Input((2,))
    >>> b = Caffe2Parameter((2,), name="b")(x)
    >>> y = Caffe2Broadcast("add", (2,), weight_input=True)([x, b])
    >>> z = Caffe2Broadcast("mul", (2,), weight_input=True)([y, b])
    >>> model = keras.Model(x, z)
    >>> load_into_keras(model, {"b": np.array([1.0, 2.0], "float32")}).assigned
    {'b': 'b.weight'}
    >>> model.count_params()  # one weight for the two readers
    2
    >>> keras.ops.convert_to_numpy(model(np.ones((1, 2), "float32"))).tolist()  # (1 + b) * b
    [[2.0, 6.0]]
    """

    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.shape = _ints(shape)

    def build(self, input_shape):
        self.weight = self.add_weight(name="weight", shape=self.shape, initializer="zeros",
                                      trainable=True)

    def weight_from_caffe2(self, value):
        """The weight's value from the Caffe2 blob."""
        return value.reshape(self.shape)

    def call(self, x):
        return keras.ops.expand_dims(keras.ops.cast(self.weight, x.dtype), 0)

    def compute_output_shape(self, input_shape):
        return (1, *self.shape)

    def get_config(self):
        return {**super().get_config(), "shape": self.shape}

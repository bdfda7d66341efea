"""Caffe2 predict-net operators as Keras layers: one handler per op type.

Inside the model every 4-D tensor is NHWC (TensorFlow's CPU kernels are NHWC-only);
``Builder.layout`` is the Caffe2 layout of the net's 4-D blobs (its ``order``), and a
Permute is added only where a Caffe2 op's result depends on the layout (Flatten,
Reshape, FC/Softmax over trailing axes of an NCHW blob). The op semantics matched are
written down, with their numbers, in docs/caffe2-ops.md.
"""

import math
import re

import keras
import numpy as np

from tfinit.caffe2._constants import keeps_first_axis, reshape_target
from tfinit.caffe2._conv_form import conv_layers
from tfinit.caffe2._memory import Limit, blob_bytes
from tfinit.caffe2._op_args import (
    CEIL_MODE, NCHW, NHWC, Unsupported, aligned, ceil_mode_pads, check_fits, check_global_pooling,
    check_kernel_given, check_pool_pads, fc_weight_2d, int_arg, ints, legacy_axis, legacy_pad,
    misfit, op_order, padded_shape, same_pads, window,
)
from tfinit.caffe2._layers import (
    Caffe2Broadcast,
    Caffe2ChannelShuffle,
    Caffe2LRN,
    Caffe2Pooling2D,
    Caffe2Reshape,
    Caffe2ShapeInfo,
    Caffe2Split,
)
from tfinit.caffe2._shared import shared_operand

TO_NHWC, TO_NCHW = (2, 3, 1), (3, 1, 2)  # Permute dims (batch excluded)
_NCHW_TO_INTERNAL = {0: 0, 1: 3, 2: 1, 3: 2}
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
# Ops whose `order` decides the layout of the tensors they read and write.
LAYOUT_OPS = ("Conv", "MaxPool", "AveragePool", "SpatialBN", "LRN", "ChannelShuffle")


class Builder:
    """The state of one conversion: Caffe2 blob -> Keras tensor, layer names, routes."""

    def __init__(self, params, layout, limit=None):
        self.params = dict(params)  # NHWC conv weights are replaced by their OIHW form
        self.layout = layout
        self.limit = limit or Limit()  # the bytes one example of a blob may take
        self.blobs = {}  # Caffe2 blob -> Keras tensor (4-D kept NHWC)
        self.writer = {}  # blob -> index of the op that last wrote it
        self.inputs = []  # (data input blob, keras.Input)
        self.constants = {}  # blob -> value known when converting (split_info, params)
        self.opaque = {}  # blob -> why it holds no tensor (RecurrentNetwork workspaces)
        self.data_inputs = set()
        self.input_shapes = {}  # data input -> the per-example shape the user gave
        self.used_names = set()
        self.routes = {}  # Keras layer -> {attribute: blob}
        self.flattened = {}  # Dense layer -> (C, H, W) it reads, or None: no reorder
        self.io_layout = layout  # the layout of the model's 4-D inputs and outputs
        self.shared = {}  # parameter read by several ops -> their indices (one weight)
        self.param_tensors = {}  # shared parameter -> its Caffe2Parameter's output
        self.bbox_rois = set()  # blobs a BBoxTransform reads as rois
        self.nms_images = {}  # BBoxTransform box_out -> its im_info (_detection_ops)
        self.conv_layers = {}  # _shared.conv_key -> the Conv2D layer its Convs reuse

    def input_hint(self, received):
        """A hint for an image ``input_shape`` that looks given in the other layout."""
        if len(received) != 3:
            return ""
        other = "channels_last" if self.io_layout == NCHW else "channels_first"
        return f" (for {other} images pass input_format='{other}')"

    def name(self, base):
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", base) or "layer"
        name, k = base, 1
        while name in self.used_names:
            name, k = f"{base}_{k}", k + 1
        self.used_names.add(name)
        return name

    def param(self, op, index):
        if index >= len(op.inputs):
            raise ValueError(f"{op.type} needs input {index} (a parameter blob); it has "
                             f"{len(op.inputs)} inputs.")
        blob = op.inputs[index]
        if blob not in self.params:
            raise ValueError(f"{op.type} reads parameter '{blob}', which the init net does "
                             "not hold.")
        return blob, np.asarray(self.params[blob])

    def layer_name(self, op, weight_blob):
        base = weight_blob[:-2] if weight_blob.endswith("_w") else op.outputs[0]
        return self.name(base)

    def check_order(self, op):
        order = op_order(op)
        if order != self.layout:
            raise Unsupported(f"order {order} in a net whose other ops are {self.layout}")

    def axis(self, op, x, default):
        """The Keras axis of the Caffe2 axis ``op.args['axis']`` (or ``default``)."""
        rank = len(x.shape)
        axis = int_arg(op, "axis", default)
        if not -rank <= axis < rank:
            raise ValueError(f"axis={axis} is out of range for a {rank}-D blob")
        axis %= rank
        if rank == 4 and self.layout == NCHW:
            axis = _NCHW_TO_INTERNAL[axis]
        return axis

    def order_axis(self, op):
        """Caffe2's default channel axis from the op's order (Concat, Split)."""
        return 1 if op_order(op) == NCHW else 3

    def to_caffe2(self, tensor, base):
        """``tensor`` in Caffe2's layout (a Permute for a 4-D blob of an NCHW net)."""
        if len(tensor.shape) == 4 and self.layout == NCHW:
            return keras.layers.Permute(TO_NCHW, name=self.name(base + "_nchw"))(tensor)
        return tensor

    def from_caffe2(self, tensor, base):
        if len(tensor.shape) == 4 and self.layout == NCHW:
            return keras.layers.Permute(TO_NHWC, name=self.name(base + "_nhwc"))(tensor)
        return tensor

    def caffe2_shape(self, tensor):
        dims = list(tensor.shape)
        if len(dims) == 4 and self.layout == NCHW:
            dims = [dims[0], dims[3], dims[1], dims[2]]
        return dims

    def check_size(self, op, what, dims, dtype="float32"):
        """Refuse a blob one example of which (``dims``: Keras layout, batch axis first)
        needs more than the memory limit, before Keras runs anything on it (a predict net
        is untrusted input: pads or broadcasts can ask for any size)."""
        shape = ["N", *(str(d) for d in dims[1:])]
        if len(dims) == 4 and self.layout == NCHW:
            shape = [shape[0], shape[3], shape[1], shape[2]]
        nbytes = blob_bytes(dims[1:], np.dtype(dtype).itemsize)
        self.limit.check(nbytes, f"one example of {what} (shape ({', '.join(shape)}), "
                         f"{dtype})", args_text(op))


# ---------------------------------------------------------------- argument helpers


def args_text(op):
    """The op's scalar and short list arguments, ``name=value`` each (for messages)."""
    shown = []
    for name, value in op.args.items():
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, np.ndarray) and value.size <= 8:
            value = value.tolist()
        elif not isinstance(value, (int, float)):
            continue
        shown.append(f"{name}={value!r}")
    return f"{op.type} with {', '.join(shown) or 'no arguments'}"


def _input_mismatch(b, op, blob, expected, x):
    """Raise the error for a data input whose shape does not fit the op's weight."""
    got = tuple(x.shape[1:])
    if op.inputs[0] in b.data_inputs:
        got = b.input_shapes[op.inputs[0]]
        raise ValueError(f"Argument `input_shape` for '{op.inputs[0]}' must be {expected}, "
                         f"as {op.type} reads it with weight '{blob}' of shape "
                         f"{tuple(b.params[blob].shape)}. Received: input_shape={got}"
                         + b.input_hint(got))
    raise ValueError(f"its input '{op.inputs[0]}' has shape {got} (Keras layout); weight "
                     f"'{blob}' of shape {tuple(b.params[blob].shape)} needs {expected}")


# ---------------------------------------------------------------- op handlers


def _fc(b, op, x):
    w_blob, w = b.param(op, 1)
    if w.ndim != 2 or op.args.get("axis_w", 1) != 1:
        w = fc_weight_2d(op, w, w_blob)
        b.params[w_blob] = w  # the Dense kernel is made from this 2-D view
    bias_blob, _ = b.param(op, 2)
    name = b.layer_name(op, w_blob)
    rank = len(x.shape)
    axis = int_arg(op, "axis", 1)
    if not -rank < axis < rank or axis % rank == 0:
        raise Unsupported(f"FC with axis={axis} on a {rank}-D blob")
    axis %= rank
    if w.ndim != 2:
        raise ValueError(f"FC weight '{w_blob}' has shape {w.shape}; it must be [out, in].")
    if axis == 1 and rank > 2:
        dims = tuple(x.shape[1:])
        x = keras.layers.Flatten(name=b.name(name + "_flatten"))(x)
        if rank == 4:  # Keras flattens the internal NHWC tensor: H, W, C
            b.flattened[name] = (dims[-1], *dims[:-1]) if b.layout == NCHW else None
    elif axis > 1:
        x = b.to_caffe2(x, name)
        if axis < rank - 1:
            lead, tail = tuple(x.shape[1:axis]), math.prod(x.shape[axis:])
            x = keras.layers.Reshape((*lead, tail), name=b.name(name + "_flatten"))(x)
        b.flattened[name] = None
    if w.shape[1] != x.shape[-1]:
        expected = f"{w.shape[1]} features from axis {axis} on"
        _input_mismatch(b, op, w_blob, expected, x)
    shared = bias_blob in b.shared
    b.routes[name] = {"kernel": w_blob} if shared else {"kernel": w_blob, "bias": bias_blob}
    y = keras.layers.Dense(w.shape[0], use_bias=not shared, name=name)(x)
    if shared:
        y = shared_operand(b, "add", bias_blob, y, (w.shape[0],), (w.shape[0],), False, name)
    return b.from_caffe2(y, name) if axis > 1 else y


def _conv(b, op, x):
    b.check_order(op)
    w_blob, w = b.param(op, 1)
    if w.ndim != 4:
        raise Unsupported(f"Conv that is not 2-D (weight '{w_blob}' has shape {w.shape})")
    if b.layout == NHWC:  # [O, kh, kw, I/g] -> [O, I/g, kh, kw], the form load_into_keras takes
        w = w.transpose(0, 3, 1, 2)
        b.params[w_blob] = w
    group = int_arg(op, "group", 1)
    channels = w.shape[1] * group
    if len(x.shape) != 4 or x.shape[-1] != channels:
        expected = (f"(C, H, W) with C = {channels}" if b.io_layout == NCHW
                    else f"(H, W, C) with C = {channels}")
        _input_mismatch(b, op, w_blob, expected, x)
    kernel, stride, dilation, pads = window(op)
    check_kernel_given(op, kernel)
    if kernel != tuple(w.shape[2:]):  # Caffe2: filter.dim32(i + 2) == kernel_[i]
        raise ValueError(f"argument kernel={list(kernel)} does not match weight '{w_blob}' "
                         f"of shape {tuple(w.shape)} (kernel {list(w.shape[2:])})")
    check_fits(op, x.shape[1:3], kernel, dilation, pads)
    name = b.layer_name(op, w_blob)
    bias = b.param(op, 2)[0] if len(op.inputs) > 2 else None
    return conv_layers(b, op, x, (w_blob, w.shape[0], bias), name,
                       (kernel, stride, dilation, pads), group)


def _spatial_bn(b, op, x):
    b.check_order(op)
    _check_bn(op, b.params)
    blobs = [b.param(op, k)[0] for k in range(1, 5)]
    rank = len(x.shape)
    if rank < 2:
        raise ValueError(f"SpatialBN takes a blob of 2 or more dims; '{op.inputs[0]}' has "
                         f"{rank}")
    # Caffe2: the channel axis is 1 (NCHW) or the last (NHWC) at every rank; a 4-D NCHW
    # blob is held NHWC here, so its channels are last too.
    axis = 1 if op_order(op) == NCHW and rank != 4 else -1
    channels = x.shape[axis]
    for blob in blobs:
        if np.size(b.params[blob]) != channels:
            raise ValueError(f"parameter '{blob}' of shape {tuple(np.shape(b.params[blob]))} "
                             f"must hold {channels} values, one per channel of "
                             f"'{op.inputs[0]}' (its axis {1 if op_order(op) == NCHW else -1})")
        b.params[blob] = np.reshape(b.params[blob], (channels,))
    name = b.layer_name(op, blobs[0][:-2] + "_w" if blobs[0].endswith("_s") else op.outputs[0])
    b.routes[name] = dict(zip(("gamma", "beta", "moving_mean", "moving_variance"), blobs,
                              strict=True))
    eps = float(op.args.get("epsilon", 1e-5))
    momentum = float(op.args.get("momentum", 0.9))  # Caffe2's default; Keras's is 0.99
    return keras.layers.BatchNormalization(axis=axis, epsilon=eps, momentum=momentum,
                                           name=name)(x)


def _pool(b, op, x):
    b.check_order(op)
    if len(x.shape) != 4:
        raise Unsupported(f"{op.type} on a {len(x.shape)}-D blob")
    name = b.name(op.outputs[0])
    maximum = op.type == "MaxPool"
    kernel, stride, dilation, pads = window(op)
    if int_arg(op, "global_pooling", 0):
        check_global_pooling(op, stride, dilation, pads)
        cls = keras.layers.GlobalMaxPooling2D if maximum else keras.layers.GlobalAveragePooling2D
        return cls(keepdims=True, name=name)(x)
    if dilation != (1, 1):
        raise Unsupported(f"{op.type} with dilation {dilation}")
    check_kernel_given(op, kernel)
    _check_pool(op, b.params)
    check_pool_pads(op, kernel, pads)  # so no window lies wholly in the padding
    if legacy_pad(op) != CEIL_MODE:
        check_fits(op, x.shape[1:3], kernel, dilation, pads)
    if legacy_pad(op) == CEIL_MODE:  # Caffe's ceil mode: the tail pads are computed
        sizes = [ceil_mode_pads(x.shape[1 + k], kernel[k], stride[k], pads[k])
                 for k in range(2)]
        pads = (pads[0], pads[1], *(tail for _, tail in sizes))
        if 0 in [out for out, _ in sizes]:  # kernel larger than the input: empty, as Caffe2
            mode = "max" if maximum else "average"
            return Caffe2Pooling2D(mode, kernel, stride, pads, name=name)(x)
    cls = keras.layers.MaxPooling2D if maximum else keras.layers.AveragePooling2D
    if not any(pads):
        return cls(kernel, strides=stride, padding="valid", name=name)(x)
    same = [same_pads(x.shape[1 + k], kernel[k], stride[k]) for k in range(2)]
    out = [(x.shape[1 + k] + pads[k] + pads[k + 2] - kernel[k]) // stride[k] + 1
           for k in range(2)]
    if [(pads[0], pads[2]), (pads[1], pads[3])] == same and out == [
        math.ceil(x.shape[1 + k] / stride[k]) for k in range(2)
    ]:
        # TF SAME ignores padded cells, as Caffe2 does (max; average without count_include_pad)
        return cls(kernel, strides=stride, padding="same", name=name)(x)
    mode = "max" if maximum else "average"
    b.check_size(op, f"its input '{op.inputs[0]}' padded", padded_shape(x.shape, pads))
    return Caffe2Pooling2D(mode, kernel, stride, pads, name=name)(x)


def _softmax(b, op, x):
    rank = len(x.shape)
    axis = int_arg(op, "axis", 1)
    if not -rank < axis < rank or axis % rank == 0:
        raise Unsupported(f"Softmax over axis {axis} of a {rank}-D blob (axis 0 is the batch)")
    axis %= rank
    name = b.name(op.outputs[0])
    if rank == 2:
        return keras.layers.Softmax(axis=-1, name=name)(x)
    # Caffe2 flattens the axes from `axis` on into one and normalizes over it.
    x = b.to_caffe2(x, name)
    dims = tuple(x.shape[1:])
    if axis < rank - 1:
        x = keras.layers.Reshape((*dims[:axis - 1], math.prod(dims[axis - 1:])),
                                 name=b.name(name + "_flatten"))(x)
    y = keras.layers.Softmax(axis=-1, name=name)(x)
    if axis < rank - 1:
        y = keras.layers.Reshape(dims, name=b.name(name + "_unflatten"))(y)
    return b.from_caffe2(y, name)


def _activation(b, op, x):
    return keras.layers.Activation(_ACTIVATIONS[op.type], name=b.name(op.outputs[0]))(x)


def _dropout(b, op, x):
    rate = float(op.args.get("ratio", 0.5))
    if len(op.outputs) > 1:
        b.opaque[op.outputs[1]] = "Dropout's mask, not converted"
    return keras.layers.Dropout(rate, name=b.name(op.outputs[0]))(x)


def _concat(b, op, *xs):
    if op.args.get("add_axis", 0):
        raise Unsupported("Concat with add_axis")
    axis = b.axis(op, xs[0], b.order_axis(op))  # axis 0: _generic_ops.row_concat (_spec)
    if len(op.outputs) != 2:
        raise ValueError(_two_outputs(op, "split_info"))
    y = keras.layers.Concatenate(axis=axis, name=b.name(op.outputs[0]))(list(xs))
    sizes = np.asarray([x.shape[axis] for x in xs], np.int32)
    b.constants[op.outputs[1]] = sizes
    info = Caffe2ShapeInfo(sizes, "int32", name=b.name(op.outputs[1]))(y)
    return y, info


def _two_outputs(op, second):
    return (f"{op.type} must have 2 outputs (the result and {second}), as Caffe2's schema "
            f"says. Received: {len(op.outputs)} outputs {list(op.outputs)}")


def _split(b, op, x, *rest):
    axis = b.axis(op, x, b.order_axis(op))
    if op.args.get("add_axis", 0):
        raise Unsupported("Split with add_axis")
    total, parts = x.shape[axis], len(op.outputs)
    if axis == 0:  # the batch: its size is known at run time only
        if len(op.inputs) > 1 or op.args.get("split") is not None:
            raise Unsupported("Split along the batch axis (axis=0) with sizes (the batch size "
                              "is known only at run time; equal parts are converted)")
        return tuple(Caffe2Split(None, axis=0, parts=parts,
                                 name=b.name(op.outputs[0] + "_split"))(x))
    if len(op.inputs) > 1:
        if op.args.get("split") is not None:
            raise ValueError("takes the sizes from its second input or the `split` "
                             "argument, not both")
        known = {**b.params, **b.constants}
        if op.inputs[1] not in known:
            raise Unsupported(f"Split sizes from '{op.inputs[1]}', a blob computed at run time")
        sizes = ints(known[op.inputs[1]], f"sizes input {op.inputs[1]}")
    elif op.args.get("split") is not None:
        sizes = ints(op.args["split"], "split")
    else:
        if total % parts:
            raise ValueError(f"cannot split {total} entries along axis "
                             f"{op.args.get('axis', b.order_axis(op))} into {parts} equal parts")
        sizes = [total // parts] * parts
    if len(sizes) != parts or sum(sizes) != total or min(sizes) < 0:
        raise ValueError(f"split sizes {sizes} must be {parts} sizes (one per output) "
                         f"adding up to {total}, the size of axis "
                         f"{op.args.get('axis', b.order_axis(op))}")
    outs = Caffe2Split(sizes, axis=axis, name=b.name(op.outputs[0] + "_split"))(x)
    return tuple(outs)


def _channel_shuffle(b, op, x):
    b.check_order(op)
    rank = len(x.shape)
    if rank < 2:
        raise ValueError(f"ChannelShuffle needs an [N, C, ...] blob; its input is {rank}-D")
    # 4-D blobs are NHWC inside the model; others keep Caffe2's order (C at 1 for NCHW)
    axis = -1 if rank == 4 or op_order(op) == NHWC else 1
    group = int(op.args.get("group", 1))
    if group <= 0 or x.shape[axis] % group:
        raise ValueError(f"group={group} must divide the {x.shape[axis]} channels")
    return Caffe2ChannelShuffle(group, axis=axis, name=b.name(op.outputs[0]))(x)


def _lrn(b, op, x):
    b.check_order(op)
    if len(x.shape) != 4:
        raise Unsupported(f"LRN on a {len(x.shape)}-D blob")
    size = int_arg(op, "size", 0)
    if size <= 0 or size % 2 == 0:
        raise ValueError(f"argument `size` must be a positive odd int. Received: size={size}")
    layer = Caffe2LRN(size, alpha=float(op.args.get("alpha", 0.0)),
                      beta=float(op.args.get("beta", 0.0)), bias=float(op.args.get("bias", 1.0)),
                      return_scale=len(op.outputs) > 1, name=b.name(op.outputs[0]))
    y = layer(x)
    return tuple(y) if len(op.outputs) > 1 else y


ELEMENTWISE = ("Sum", "Add", "Mul")
_MERGE = {"Sum": keras.layers.Add, "Add": keras.layers.Add, "Mul": keras.layers.Multiply}


def broadcast_form(op):
    """``"legacy"`` (``broadcast=1``: the second input's dims placed at ``axis``, or at the
    end), ``"numpy"`` (Add/Mul without it: multidirectional, aligned from the right; Caffe2
    then ignores ``axis``) or ``"same"`` (Sum: equal shapes)."""
    if op.type == "Sum":
        if op.args.get("broadcast", 0):
            raise Unsupported("Sum with broadcast=1 (Caffe2's Sum takes equal shapes)")
        return "same"
    broadcast = op.args.get("broadcast", 0)
    if broadcast not in (0, 1):
        raise Unsupported(f"{op.type} with broadcast={broadcast!r} (0 and 1 are converted)")
    if len(op.inputs) != 2:
        raise ValueError(f"{op.type} takes 2 inputs. Received: {len(op.inputs)} inputs "
                         f"{list(op.inputs)}")
    return "legacy" if broadcast else "numpy"


def _param_operand(b, op, blob, x, form):
    """A :class:`Caffe2Broadcast` for parameter ``blob`` applied to data tensor ``x``."""
    value = b.params[blob]
    shape = b.caffe2_shape(x)
    rank = len(shape)
    full, exact = aligned(op, form, np.shape(value), rank)
    bad = misfit(full, exact, shape)
    if full[0] != 1 or 0 in exact or bad or form == "same" and full[1:] != shape[1:]:
        where = (f" (broadcast=1 places it at axis {legacy_axis(op, rank, np.ndim(value))}; "
                 "its dims from the first to the last that is not 1 must equal the first "
                 "input's)" if form == "legacy" else "")
        raise ValueError(
            f"parameter '{blob}' of shape {tuple(np.shape(value))} does not broadcast to "
            f"{op.inputs[0]!r} of shape {tuple(['N', *shape[1:]])} (Caffe2 order) without "
            f"changing it or spanning the batch axis{where}")
    channels_first = rank == 4 and b.layout == NCHW
    keras_shape = full[1:]
    if channels_first:
        keras_shape = [keras_shape[1], keras_shape[2], keras_shape[0]]
    if blob in b.shared:  # read by several ops: one weight (_shared)
        return shared_operand(b, "mul" if op.type == "Mul" else "add", blob, x, full[1:],
                              keras_shape, channels_first, op.outputs[0])
    name = b.name(blob)
    layer = Caffe2Broadcast("mul" if op.type == "Mul" else "add", keras_shape,
                            caffe2_shape=full[1:], channels_first=channels_first, name=name)
    b.routes[name] = {"weight": blob}
    return layer(x)


def _data_operand(b, op, x, y, form):
    """``y`` (the second data input) reshaped so that Keras broadcasting matches Caffe2's."""
    rank, other = len(x.shape), len(y.shape)
    if form == "legacy":
        full, exact = aligned(op, form, b.caffe2_shape(y), rank)
        if full[0] is not None:  # y's batch axis would meet a dimension of x
            raise Unsupported(f"{op.type} with broadcast=1 of a second data input placed at "
                              f"axis {legacy_axis(op, rank, other)} (its first axis, Keras's "
                              "batch axis, must meet the first input's: axis 0)")
        bad = misfit(full, exact, b.caffe2_shape(x))
        if bad:
            raise ValueError(f"{op.type}: second input of shape "
                             f"{tuple(['N', *b.caffe2_shape(y)[1:]])} does not match the "
                             f"first's {tuple(['N', *b.caffe2_shape(x)[1:]])} at axes {bad} "
                             "(broadcast=1)")
        if other == rank:
            return y
        y = b.to_caffe2(y, op.outputs[0])
        y = keras.layers.Reshape(tuple(full[1:]), name=b.name(op.outputs[0] + "_expand"))(y)
        return b.from_caffe2(y, op.outputs[0])
    if other != rank:
        raise Unsupported(f"{op.type} of data inputs of ranks {rank} and {other} (the "
                          "second's first axis, Keras's batch axis, would meet another)")
    return y


def _elementwise(b, op, *_):
    form = broadcast_form(op)
    name = b.name(op.outputs[0])
    tensors = [blob for blob in op.inputs if blob in b.blobs]
    params = [blob for blob in op.inputs if blob not in b.blobs]
    if not tensors:
        raise Unsupported(f"{op.type} of parameters only (no data input)")
    if op.type == "Sum":
        if params:  # Caffe2's Sum: equal shapes, the batch axis included
            raise Unsupported(f"Sum of init-net blob(s) {params} (Caffe2 runs it only at the "
                              "batch size of the parameter's first axis; Add with "
                              "broadcast=1 adds a parameter to any batch)")
        xs = [b.blobs[blob] for blob in tensors]
        if any(tuple(x.shape) != tuple(xs[0].shape) for x in xs):
            raise ValueError(f"Sum of differently shaped blobs "
                             f"{[tuple(b.caffe2_shape(x)) for x in xs]} (Caffe2's Sum takes "
                             "equal shapes)")
        return xs[0] if len(xs) == 1 else keras.layers.Add(name=name)(xs)
    first, second = op.inputs
    if params:  # Add/Mul of a data tensor and a parameter
        if first in params and form == "legacy":
            raise Unsupported(f"{op.type} with broadcast=1 of a parameter first input")
        blob = params[0]
        return _param_operand(b, op, blob, b.blobs[tensors[0]], form)
    x, y = b.blobs[first], _data_operand(b, op, b.blobs[first], b.blobs[second], form)
    return _MERGE[op.type](name=name)([x, y])


def _flatten(b, op, x):
    if op.args.get("axis", 1) != 1:
        raise Unsupported("Flatten with axis other than 1")
    name = b.name(op.outputs[0])
    return keras.layers.Flatten(name=name)(b.to_caffe2(x, name))


def _reshape(b, op, x, *_shape_input):  # a run-time shape input is refused below
    if len(op.outputs) != 2:
        raise ValueError(_two_outputs(op, "old_shape"))
    shape = reshape_target(b, op)
    name = b.name(op.outputs[0])
    x = b.to_caffe2(x, name)
    dims = list(x.shape)
    if not shape or shape.count(-1) > 1 or any(v < -1 for v in shape) or (
            0 in shape and max(k for k, v in enumerate(shape) if v == 0) >= len(dims)):
        raise ValueError(f"shape={shape} is not a Caffe2 Reshape target for a "
                         f"{len(dims)}-D blob")
    if keeps_first_axis(shape, dims):
        target = [dims[k] if v == 0 else v for k, v in enumerate(shape) if k > 0]
        y = keras.layers.Reshape(tuple(target), name=name)(x)
    else:
        y = Caffe2Reshape(shape, name=name)(x)
    y = b.from_caffe2(y, name)
    old = Caffe2ShapeInfo([d or -1 for d in dims], "int64", batch_index=0,
                          name=b.name(op.outputs[1]))(x)
    return y, old


HANDLERS = {
    "FC": _fc, "Conv": _conv, "SpatialBN": _spatial_bn, "MaxPool": _pool,
    "AveragePool": _pool, "Softmax": _softmax, "Relu": _activation, "Sigmoid": _activation,
    "Tanh": _activation, "Dropout": _dropout, "Concat": _concat, "Sum": _elementwise,
    "Add": _elementwise, "Mul": _elementwise,
    "Flatten": _flatten, "Reshape": _reshape, "Split": _split,
    "ChannelShuffle": _channel_shuffle, "LRN": _lrn,
}


def _check_pool(op, params):
    legacy_pad(op)
    if op.args.get("count_include_pad", 0):
        raise Unsupported("AveragePool with count_include_pad=1")


def _check_fc(op, params):
    if len(op.inputs) > 1 and op.inputs[1] in params:
        fc_weight_2d(op, np.asarray(params[op.inputs[1]]), op.inputs[1])


def _check_bn(op, params):
    if not op.args.get("is_test", 0):
        raise Unsupported("SpatialBN in training mode (is_test=0)")


# Checks that need no shapes but the op's arguments (and its parameters' shapes): run on
# every op before any layer is built, so that one refusal lists all that is unsupported.
STATIC_CHECKS = {
    "Conv": (lambda op, params: legacy_pad(op),), "MaxPool": (_check_pool,),
    "AveragePool": (_check_pool,), "FC": (_check_fc,), "SpatialBN": (_check_bn,),
    "Sum": (lambda op, params: broadcast_form(op),),
    "Add": (lambda op, params: broadcast_form(op),),
    "Mul": (lambda op, params: broadcast_form(op),),
}
# Inputs from this index on are parameters (init-net blobs), not activations.
PARAM_SLOTS = {"FC": 1, "Conv": 1, "SpatialBN": 1, "Split": 1, "Reshape": 1}

"""A Keras model from a Caffe2 predict net made of brew's common ops: ``to_keras``.

The model takes and returns Caffe2's layout (NCHW images), so the same array gives
the same output as Caffe2. Inside, 4-D blobs are kept NHWC (TensorFlow's CPU kernels
are NHWC-only): one Permute after the input, one before each 4-D output or
explicit Caffe2 Flatten/Reshape. Semantics matched (FACTS.md): FC ``y = x W^T + b``
flattening C,H,W; Conv OIHW cross-correlation with explicit pads; SpatialBN in test
mode ``(x - rm) / sqrt(riv + eps) * s + b``; pooling with Caffe2's floor output size.
"""

import math
import re
from collections.abc import Mapping

import keras
import numpy as np

from tfinit.caffe2._fill import load_init_net
from tfinit.caffe2._keras import load_into_keras
from tfinit.caffe2._layers import Caffe2Pooling2D
from tfinit.caffe2._netdef import read_netdef

_TO_NHWC, _TO_NCHW = (2, 3, 1), (3, 1, 2)
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
_PARAM_SLOTS = {"FC": 1, "Conv": 1, "SpatialBN": 1}  # inputs from this index on are params


class _Unsupported(ValueError):
    pass


class _Builder:
    def __init__(self, params):
        self.params = params
        self.blobs = {}  # Caffe2 blob -> Keras tensor (4-D kept NHWC)
        self.used_names = set()
        self.routes = {}  # Keras layer -> {attribute: blob}
        self.flattened = {}  # Dense layer -> (C, H, W) of the Caffe2 tensor it reads

    # -- names
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

    def to_caffe2(self, tensor, base):
        if len(tensor.shape) == 4:
            return keras.layers.Permute(_TO_NCHW, name=self.name(base + "_nchw"))(tensor)
        return tensor

    def from_caffe2(self, tensor, base):
        if len(tensor.shape) == 4:
            return keras.layers.Permute(_TO_NHWC, name=self.name(base + "_nhwc"))(tensor)
        return tensor


# ---------------------------------------------------------------- argument helpers


def _order(op):
    order = op.args.get("order", b"NCHW")
    if order not in (b"NCHW", "NCHW"):
        raise _Unsupported(f"order {order!r} (only NCHW nets are supported)")


def _pair(op, single, names, plural, default):
    args = op.args
    if args.get(plural) is not None:
        values = [int(v) for v in np.asarray(args[plural]).reshape(-1)]
    elif any(n in args for n in names):
        values = [int(args.get(n, default)) for n in names]
    elif single in args:
        values = [int(args[single])] * len(names)
    else:
        values = [default] * len(names)
    if len(values) != len(names):
        raise _Unsupported(f"argument {plural}={values} (2-D ops take {len(names)} values)")
    return tuple(values)


def _window(op, kernel=None):
    if kernel is None:
        kernel = _pair(op, "kernel", ("kernel_h", "kernel_w"), "kernels", 0)
    stride = _pair(op, "stride", ("stride_h", "stride_w"), "strides", 1)
    dilation = _pair(op, "dilation", ("dilation_h", "dilation_w"), "dilations", 1)
    pads = _pair(op, "pad", ("pad_t", "pad_l", "pad_b", "pad_r"), "pads", 0)
    if op.args.get("legacy_pad", 3) != 3:
        raise _Unsupported("legacy_pad")
    return kernel, stride, dilation, pads


def _same_pads(size, kernel, stride):
    """TensorFlow's SAME padding (before, after) for one spatial dimension."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


# ---------------------------------------------------------------- op handlers


def _fc(b, op, x):
    if op.args.get("axis", 1) != 1 or op.args.get("axis_w", 1) != 1:
        raise _Unsupported("axis/axis_w other than 1")
    w_blob, w = b.param(op, 1)
    bias_blob, _ = b.param(op, 2)
    name = b.layer_name(op, w_blob)
    if len(x.shape) > 2:
        dims = tuple(x.shape[1:])
        caffe2_dims = (dims[-1], *dims[:-1]) if len(dims) == 3 else dims
        x = keras.layers.Flatten(name=b.name(name + "_flatten"))(x)
        if len(dims) == 3:
            b.flattened[name] = caffe2_dims
    if w.ndim != 2 or w.shape[1] != x.shape[-1]:
        raise ValueError(f"FC weight '{w_blob}' has shape {w.shape}; the FC input has "
                         f"{x.shape[-1]} features.")
    b.routes[name] = {"kernel": w_blob, "bias": bias_blob}
    return keras.layers.Dense(w.shape[0], name=name)(x)


def _conv(b, op, x):
    _order(op)
    w_blob, w = b.param(op, 1)
    if w.ndim != 4 or len(x.shape) != 4:
        raise _Unsupported("Conv that is not 2-D")
    kernel, stride, dilation, pads = _window(op, kernel=tuple(w.shape[2:]))
    group = int(op.args.get("group", 1))
    name = b.layer_name(op, w_blob)
    if any(pads):
        x = keras.layers.ZeroPadding2D(((pads[0], pads[2]), (pads[1], pads[3])),
                                       name=b.name(name + "_pad"))(x)
    layer = keras.layers.Conv2D(
        w.shape[0], kernel, strides=stride, padding="valid", dilation_rate=dilation,
        groups=group, use_bias=len(op.inputs) > 2, name=name,
    )
    b.routes[name] = {"kernel": w_blob}
    if len(op.inputs) > 2:
        b.routes[name]["bias"] = b.param(op, 2)[0]
    return layer(x)


def _spatial_bn(b, op, x):
    _order(op)
    if not op.args.get("is_test", 0):
        raise _Unsupported("SpatialBN in training mode (is_test=0)")
    blobs = [b.param(op, k)[0] for k in range(1, 5)]
    name = b.layer_name(op, blobs[0][:-2] + "_w" if blobs[0].endswith("_s") else op.outputs[0])
    b.routes[name] = dict(zip(("gamma", "beta", "moving_mean", "moving_variance"), blobs))
    eps = float(op.args.get("epsilon", 1e-5))
    return keras.layers.BatchNormalization(axis=-1, epsilon=eps, name=name)(x)


def _pool(b, op, x):
    _order(op)
    if len(x.shape) != 4:
        raise _Unsupported(f"{op.type} on a {len(x.shape)}-D blob")
    name = b.name(op.outputs[0])
    maximum = op.type == "MaxPool"
    if op.args.get("global_pooling", 0):
        cls = keras.layers.GlobalMaxPooling2D if maximum else keras.layers.GlobalAveragePooling2D
        return cls(keepdims=True, name=name)(x)
    kernel, stride, dilation, pads = _window(op)
    if dilation != (1, 1) or 0 in kernel:
        raise _Unsupported(f"{op.type} with dilation {dilation} / kernel {kernel}")
    if op.args.get("count_include_pad", 0):
        raise _Unsupported("AveragePool with count_include_pad=1")
    cls = keras.layers.MaxPooling2D if maximum else keras.layers.AveragePooling2D
    if not any(pads):
        return cls(kernel, strides=stride, padding="valid", name=name)(x)
    same = [_same_pads(x.shape[1 + k], kernel[k], stride[k]) for k in range(2)]
    out = [(x.shape[1 + k] + pads[k] + pads[k + 2] - kernel[k]) // stride[k] + 1
           for k in range(2)]
    if [(pads[0], pads[2]), (pads[1], pads[3])] == same and out == [
        math.ceil(x.shape[1 + k] / stride[k]) for k in range(2)
    ]:
        # TF SAME ignores padded cells, as Caffe2 does (max; average without count_include_pad)
        return cls(kernel, strides=stride, padding="same", name=name)(x)
    mode = "max" if maximum else "average"
    return Caffe2Pooling2D(mode, kernel, stride, pads, name=name)(x)


def _softmax(b, op, x):
    if len(x.shape) != 2 or op.args.get("axis", 1) != 1:
        raise _Unsupported("Softmax other than over axis 1 of a 2-D blob")
    return keras.layers.Softmax(axis=-1, name=b.name(op.outputs[0]))(x)


def _activation(b, op, x):
    return keras.layers.Activation(_ACTIVATIONS[op.type], name=b.name(op.outputs[0]))(x)


def _dropout(b, op, x):
    rate = float(op.args.get("ratio", 0.5))
    return keras.layers.Dropout(rate, name=b.name(op.outputs[0]))(x)


def _caffe2_axis(op, x, default):
    axis = int(op.args.get("axis", default))
    rank = len(x.shape)
    axis = axis % rank
    if rank == 4:
        axis = {0: 0, 1: 3, 2: 1, 3: 2}[axis]  # NCHW axis -> NHWC axis
    return axis


def _concat(b, op, *xs):
    if op.args.get("add_axis", 0):
        raise _Unsupported("Concat with add_axis")
    _order(op)
    axis = _caffe2_axis(op, xs[0], 1)
    if axis == 0:
        raise _Unsupported("Concat along the batch axis")
    return keras.layers.Concatenate(axis=axis, name=b.name(op.outputs[0]))(list(xs))


def _sum(b, op, *xs):
    if op.args.get("broadcast", 0) or any(tuple(x.shape) != tuple(xs[0].shape) for x in xs):
        raise _Unsupported(f"{op.type} of differently shaped blobs (broadcasting)")
    if len(xs) == 1:
        return xs[0]
    return keras.layers.Add(name=b.name(op.outputs[0]))(list(xs))


def _flatten(b, op, x):
    if op.args.get("axis", 1) != 1:
        raise _Unsupported("Flatten with axis other than 1")
    name = b.name(op.outputs[0])
    return keras.layers.Flatten(name=name)(b.to_caffe2(x, name))


def _reshape(b, op, x):
    if len(op.inputs) > 1 or op.args.get("shape") is None:
        raise _Unsupported("Reshape without a `shape` argument")
    shape = [int(v) for v in np.asarray(op.args["shape"]).reshape(-1)]
    dims = list(x.shape[1:])
    caffe2_dims = [dims[2], dims[0], dims[1]] if len(dims) == 3 else dims
    if not shape or shape[0] not in (0, -1) or (shape[0] == -1 and -1 in shape[1:]):
        raise _Unsupported(f"Reshape to {shape} (the batch dimension must be 0 or -1)")
    target = [caffe2_dims[k - 1] if v == 0 else v for k, v in enumerate(shape) if k > 0]
    name = b.name(op.outputs[0])
    y = keras.layers.Reshape(tuple(target), name=name)(b.to_caffe2(x, name))
    return b.from_caffe2(y, name)


_HANDLERS = {
    "FC": _fc, "Conv": _conv, "SpatialBN": _spatial_bn, "MaxPool": _pool,
    "AveragePool": _pool, "Softmax": _softmax, "Relu": _activation, "Sigmoid": _activation,
    "Tanh": _activation, "Dropout": _dropout, "Concat": _concat, "Sum": _sum, "Add": _sum,
    "Flatten": _flatten, "Reshape": _reshape,
}


def supported_ops():
    """The predict-net operator types ``to_keras`` converts, sorted."""
    return sorted(_HANDLERS)


# ---------------------------------------------------------------- the model


def _data_inputs(net):
    produced, inputs = set(), []
    for op in net.ops:
        first_param = _PARAM_SLOTS.get(op.type)
        for k, blob in enumerate(op.inputs):
            if blob in produced or blob in inputs:
                continue
            if first_param is None or k < first_param:
                inputs.append(blob)
        produced.update(op.outputs)
    return inputs


def to_keras(predict_net, init_net, input_shape, outputs=None):
    """A Keras model computing a Caffe2 predict net, with the init net's parameters.

    ``predict_net``/``init_net``: paths, bytes or NetDefs (``init_net`` may also be a
    ``{blob: array}`` mapping). ``input_shape`` is Caffe2's per-example shape of the
    net's data input (C, H, W for images; no batch axis). The model takes and returns
    arrays in the Caffe2 net's layout (NCHW). ``outputs``: blob names to return
    (default: the net's external outputs), e.g. intermediate blobs for checking.
    Unsupported ops raise ``ValueError`` listing them.
    """
    net = read_netdef(predict_net)
    params = init_net if isinstance(init_net, Mapping) else load_init_net(init_net)
    try:
        input_shape = tuple(int(d) for d in input_shape)
    except (TypeError, ValueError):
        raise TypeError(f"to_keras: input_shape must be a tuple of ints such as (3, 224, 224), "
                        f"got {input_shape!r}.") from None
    if not input_shape or min(input_shape) <= 0:
        raise ValueError(f"to_keras: input_shape must hold positive dimensions (C, H, W), "
                         f"got {input_shape}.")
    unsupported = [f"{op.type} (op #{k})" for k, op in enumerate(net.ops)
                   if op.type not in _HANDLERS]
    if unsupported:
        raise ValueError(f"to_keras: unsupported Caffe2 op(s): {', '.join(unsupported)}; "
                         f"supported: {', '.join(supported_ops())}.")
    data = _data_inputs(net)
    if len(data) != 1:
        raise ValueError(f"to_keras: the predict net must read exactly one data input, "
                         f"found {data or 'none'}.")
    outputs = list(outputs if outputs is not None else net.external_output)
    if not outputs:
        raise ValueError("to_keras: the predict net names no external_output; pass outputs=.")

    b = _Builder(params)
    inp = keras.Input(shape=input_shape, name=b.name(data[0]))
    b.blobs[data[0]] = b.from_caffe2(inp, data[0]) if len(input_shape) == 3 else inp
    for k, op in enumerate(net.ops):
        try:
            if not op.outputs or not op.inputs:
                raise ValueError("an op needs an input and an output blob")
            activations = op.inputs[:1] if op.type in _PARAM_SLOTS else op.inputs
            missing = [blob for blob in activations if blob not in b.blobs]
            if missing:
                raise ValueError(f"reads {missing}, which no earlier op wrote")
            xs = [b.blobs[blob] for blob in activations]
            b.blobs[op.outputs[0]] = _HANDLERS[op.type](b, op, *xs)
        except _Unsupported as err:
            raise ValueError(f"to_keras: op #{k} {op.type} -> {op.outputs[:1]}: unsupported "
                             f"{err}.") from None
        except (ValueError, TypeError) as err:  # bad argument types included
            raise ValueError(f"to_keras: op #{k} {op.type} -> {op.outputs[:1]}: {err}") from None
    missing = [blob for blob in outputs if blob not in b.blobs]
    if missing:
        raise ValueError(f"to_keras: output blob(s) {missing} are not written by the net; "
                         f"blobs: {sorted(b.blobs)}.")
    results = [b.to_caffe2(b.blobs[blob], blob) for blob in outputs]
    model = keras.Model(inp, results if len(results) > 1 else results[0],
                        name=b.name(net.name or "caffe2_net"))
    load_into_keras(model, params, name_map=b.routes, flattened_conv=b.flattened, strict=False)
    return model

"""The generic Caffe2 ops of detection nets as Keras layers: one handler per op type.

AffineChannel, ResizeNearest, ConvTranspose, TopK, Gather, BatchPermutation, Cast,
LengthsToSegmentIds, ExpandDims, Concat on axis 0, and the identities (AliasWithName,
CopyGPUToCPU, CopyCPUToGPU). A handler takes ``(builder, op, *data tensors)`` as those of
``_ops`` do; 4-D tensors are NHWC inside the model (``Builder.to_caffe2`` /
``from_caffe2`` where an op's result depends on Caffe2's layout). The static checks
(``check_*``) refuse, before any layer is built, what Caffe2 1.8.1 rejects. The rules are
in docs/caffe2-ops.md.
"""

import keras
import numpy as np

from tfinit.caffe2._generic_layers import (
    Caffe2AffineChannel,
    Caffe2BatchPermutation,
    Caffe2Cast,
    Caffe2Gather,
    Caffe2LengthsToSegmentIds,
    Caffe2ResizeNearest,
    Caffe2RowConcat,
    Caffe2TopK,
    nearest_sources,
)
from tfinit.caffe2._op_args import NCHW, NHWC, Unsupported, int_arg, ints, op_order, window
from tfinit.caffe2._types import NUMPY_DTYPES, data_type


def float_arg(op, name, default):
    """The op's float argument ``name`` (``default`` when absent); Caffe2 reads it from the
    ``f`` field only, so an int (``spatial_scale: i: 1``) is refused as Caffe2 refuses it
    ("does not have the right field")."""
    value = op.args.get(name, default)
    if not isinstance(value, float):
        raise ValueError(f"argument `{name}` of {op.type} must be a float (Caffe2 reads the "
                         f"`f` field). Received: {name}={value!r}")
    return value


def _rank(x, op, blob, ranks):
    if len(x.shape) not in ranks:
        raise ValueError(f"{op.type} takes a blob of rank {' or '.join(map(str, ranks))} as "
                         f"'{blob}'. Received: rank {len(x.shape)}")


def _caffe2_order(b, op):
    """NCHW or NHWC for a 4-D op that reads ``order``; one order per net."""
    order = op_order(op) if "order" in op.args else NCHW
    if order != b.layout:
        raise Unsupported(f"{op.type} with order {order} in a net whose other ops are "
                          f"{b.layout}")
    return order


# ---------------------------------------------------------------- AffineChannel


def check_affine_channel(op, params):
    if op_order(op) != NCHW:
        raise Unsupported("AffineChannel with order NHWC (Caffe2 1.8.1 computes NCHW)")
    if len(op.inputs) != 3:
        raise ValueError(f"AffineChannel takes 3 inputs (X, scale, bias). Received: "
                         f"{list(op.inputs)}")


def affine_channel(b, op, x):
    check_affine_channel(op, b.params)
    _rank(x, op, op.inputs[0], (2, 4))
    channels = x.shape[-1] if len(x.shape) == 4 else x.shape[1]
    blobs = [b.param(op, k)[0] for k in (1, 2)]
    for blob in blobs:
        size = np.size(b.params[blob])
        if size != channels:  # Caffe2 reads past a shorter blob: refused
            raise ValueError(f"AffineChannel parameter '{blob}' of shape "
                             f"{tuple(np.shape(b.params[blob]))} must hold {channels} values, "
                             f"one per channel of '{op.inputs[0]}'. Received: {size} values")
        b.params[blob] = np.reshape(b.params[blob], (channels,)).astype("float32")
    learnable = bool(int_arg(op, "is_learnable", 0))
    layer = Caffe2AffineChannel(channels, axis=-1 if len(x.shape) == 4 else 1,
                                trainable=learnable, name=b.name(op.outputs[0]))
    y = layer(x)
    layer.set_weights([b.params[blob] for blob in blobs])  # built by the call
    return y


# ---------------------------------------------------------------- ResizeNearest


def _resize_scales(op, params):
    if len(op.inputs) == 2:
        if op.inputs[1] not in params:
            raise Unsupported(f"ResizeNearest with scales from '{op.inputs[1]}', a blob "
                              "computed at run time (scales from the init net are converted)")
        scales = np.asarray(params[op.inputs[1]]).reshape(-1)
        if scales.size != 2 or scales.dtype.kind != "f":
            raise ValueError(f"ResizeNearest's scales '{op.inputs[1]}' must hold 2 floats "
                             f"(height_scale, width_scale). Received: {scales.tolist()}")
        height, width = float(scales[0]), float(scales[1])
    elif len(op.inputs) == 1:
        height = float_arg(op, "height_scale", 1.0)
        width = float_arg(op, "width_scale", 1.0)
    else:
        raise ValueError(f"ResizeNearest takes 1 or 2 inputs. Received: {list(op.inputs)}")
    for arg, value in (("height_scale", height), ("width_scale", width)):
        if not value > 0:
            raise ValueError(f"argument `{arg}` of ResizeNearest must be > 0, as Caffe2 "
                             f"requires. Received: {arg}={value}")
    return height, width


def check_resize_nearest(op, params):
    _resize_scales(op, params)


def resize_nearest(b, op, x):
    _caffe2_order(b, op)
    height, width = _resize_scales(op, b.params)
    _rank(x, op, op.inputs[0], (4,))
    out_h, rows = nearest_sources(x.shape[1], height)
    out_w, cols = nearest_sources(x.shape[2], width)
    if out_h == 0 or out_w == 0:
        raise ValueError(f"ResizeNearest of a {x.shape[1]}x{x.shape[2]} map by "
                         f"({height}, {width}) gives an empty {out_h}x{out_w} output")
    b.check_size(op, f"its output '{op.outputs[0]}'",
                 (None, out_h, out_w, x.shape[3]))
    return Caffe2ResizeNearest(rows, cols, name=b.name(op.outputs[0]))(x)


# ---------------------------------------------------------------- ConvTranspose


def _conv_transpose_window(op):
    kernel, stride, dilation, pads = window(op)
    if 0 in kernel:  # 1.8.1 does not take the kernel from the filter
        raise ValueError("ConvTranspose needs a `kernel` argument (or kernel_h/kernel_w, "
                         "kernels): Caffe2 1.8.1 does not take it from the filter. Received: "
                         "no kernel argument")
    if dilation != (1, 1) and list(dilation) != [1, 1]:
        raise Unsupported(f"ConvTranspose with dilation {list(dilation)}")
    adj = ints(op.args["adjs"], "adjs") if "adjs" in op.args else (
        [int_arg(op, "adj", 0)] * 2 if "adj" in op.args else
        [int_arg(op, "adj_h", 0), int_arg(op, "adj_w", 0)])
    if len(adj) != len(stride):  # only `adjs` can give another count
        raise ValueError(f"ConvTranspose's argument `adjs` must hold {len(stride)} values, one "
                         f"per spatial axis. Received: adjs={adj}")
    if any(a < 0 or a >= s for a, s in zip(adj, stride, strict=True)):
        raise ValueError(f"ConvTranspose's adj {adj} must lie in [0, stride) per axis "
                         f"(stride {list(stride)})")
    if int_arg(op, "group", 1) != 1:
        raise Unsupported(f"ConvTranspose with group={op.args['group']}")
    return kernel, stride, pads, adj


def check_conv_transpose(op, params):
    _conv_transpose_window(op)
    if op_order(op) not in (NCHW, NHWC):
        raise Unsupported(f"ConvTranspose with order {op_order(op)}")


def conv_transpose(b, op, x):
    order = _caffe2_order(b, op)
    kernel, stride, pads, adj = _conv_transpose_window(op)
    _rank(x, op, op.inputs[0], (4,))
    w_blob, w = b.param(op, 1)
    # Caffe2's filter: [C_in, C_out, kh, kw] (NCHW) or [C_in, kh, kw, C_out] (NHWC)
    keras_w = w.transpose(2, 3, 1, 0) if order == NCHW else w.transpose(1, 2, 3, 0)
    if w.ndim != 4 or keras_w.shape[3] != x.shape[3] or tuple(keras_w.shape[:2]) != kernel:
        raise ValueError(f"ConvTranspose filter '{w_blob}' of shape {tuple(w.shape)} must be "
                         f"[{x.shape[3]}, C_out, {kernel[0]}, {kernel[1]}] ({order}) for "
                         f"'{op.inputs[0]}' with {x.shape[3]} channels and kernel "
                         f"{list(kernel)}")
    out_channels = keras_w.shape[2]
    weights = [keras_w.astype("float32")]
    if len(op.inputs) > 2:
        bias_blob, bias = b.param(op, 2)
        if bias.size != out_channels:
            raise ValueError(f"ConvTranspose bias '{bias_blob}' of shape {bias.shape} must "
                             f"hold {out_channels} values")
        weights.append(bias.reshape(-1).astype("float32"))
    out = [(x.shape[1 + k] - 1) * stride[k] + kernel[k] + adj[k] - pads[k] - pads[k + 2]
           for k in range(2)]
    if min(out) <= 0:
        raise ValueError(f"ConvTranspose's output would be {out[0]}x{out[1]}: the pads "
                         f"{list(pads)} exceed what the kernel and stride give")
    name = b.name(w_blob[:-2] if w_blob.endswith("_w") else op.outputs[0])
    layer = keras.layers.Conv2DTranspose(out_channels, kernel, strides=stride, padding="valid",
                                         output_padding=tuple(adj), use_bias=len(weights) == 2,
                                         name=name)
    y = layer(x)
    layer.set_weights(weights)
    if any(pads):
        y = keras.layers.Cropping2D(((pads[0], pads[2]), (pads[1], pads[3])),
                                    name=b.name(name + "_crop"))(y)
    return y


# ---------------------------------------------------------------- TopK, Gather


def check_top_k(op, params):
    k = int_arg(op, "k", -1)
    if k < 1:
        raise ValueError(f"argument `k` of TopK must be >= 1, as Caffe2 requires. Received: "
                         f"k={k}")
    if len(op.outputs) not in (2, 3):
        raise ValueError(f"TopK has 2 or 3 outputs (Values, Indices, Flattened_indices). "
                         f"Received: {list(op.outputs)}")


def top_k(b, op, x):
    check_top_k(op, b.params)
    x = b.to_caffe2(x, op.outputs[0])
    rank = len(x.shape)
    axis = int_arg(op, "axis", -1)
    if not -rank <= axis < rank:
        raise ValueError(f"argument `axis` of TopK must lie in [-{rank}, {rank}) for the "
                         f"{rank}-D '{op.inputs[0]}'. Received: axis={axis}")
    layer = Caffe2TopK(int_arg(op, "k", -1), axis % rank, flattened=len(op.outputs) == 3,
                       name=b.name(op.outputs[0]))
    return tuple(b.from_caffe2(y, op.outputs[0]) for y in layer(x))


def _gather_axis(op):
    axis = int_arg(op, "axis", 0)
    if int_arg(op, "match_outer", 0):
        raise Unsupported("Gather with match_outer=1")
    return axis


def check_gather(op, params):
    axis = _gather_axis(op)
    if op.inputs and op.inputs[0] in params:
        rank = np.ndim(params[op.inputs[0]])
        if not 0 <= axis < rank:
            raise ValueError(f"argument `axis` of Gather must lie in [0, {rank}) for the "
                             f"{rank}-D data '{op.inputs[0]}'. Received: axis={axis}")


def gather(b, op, *xs):
    axis = _gather_axis(op)
    if len(op.inputs) != 2:
        raise ValueError(f"Gather takes 2 inputs (DATA, INDICES). Received: {list(op.inputs)}")
    name = b.name(op.outputs[0])
    if op.inputs[0] in b.blobs:
        data, indices = (b.to_caffe2(x, name) for x in xs)
        rank = len(data.shape)
        layer, args = Caffe2Gather(axis, name=name), [data, indices]
    else:
        blob, table = b.param(op, 0)
        indices = b.to_caffe2(xs[-1], name)
        rank = table.ndim
        layer, args = Caffe2Gather(axis, table_shape=table.shape, name=name), indices
    if not 0 <= axis < rank:
        raise ValueError(f"argument `axis` of Gather must lie in [0, {rank}) for the {rank}-D "
                         f"data '{op.inputs[0]}'. Received: axis={axis}")
    y = layer(args)
    if layer.weights:  # the table from the init net
        layer.set_weights([table.astype("float32")])
    return b.from_caffe2(y, name)


def batch_permutation(b, op, x, indices):
    if len(indices.shape) != 1:
        raise ValueError(f"BatchPermutation's indices '{op.inputs[1]}' must be 1-D (one "
                         f"index per row of X), as Caffe2 requires. Received: rank "
                         f"{len(indices.shape)} (input_shape {tuple(indices.shape[1:])})")
    return Caffe2BatchPermutation(name=b.name(op.outputs[0]))([x, indices])


# ---------------------------------------------------------------- plumbing


_CAST_TO = {"FLOAT": "float32", "INT32": "int32", "INT64": "int64", "BOOL": "bool",
            "DOUBLE": "float64", "FLOAT16": "float16", "UINT8": "uint8", "INT8": "int8",
            "INT16": "int16", "UINT16": "uint16"}


def _cast_dtype(op):
    if "to" not in op.args:
        raise ValueError("Cast needs the argument `to` (a TensorProto.DataType)")
    kind = data_type(op.args["to"], "Cast")
    name = getattr(kind, "name", None)
    if name not in _CAST_TO:
        raise Unsupported(f"Cast to {name or kind} (converted: {', '.join(_CAST_TO)})")
    assert NUMPY_DTYPES[kind] == _CAST_TO[name]
    return _CAST_TO[name]


def check_cast(op, params):
    _cast_dtype(op)


def cast(b, op, x):
    # Caffe2 casts float to int with static_cast: toward zero, as keras.ops.cast does.
    return Caffe2Cast(_cast_dtype(op), name=b.name(op.outputs[0]))(x)


def lengths_to_segment_ids(b, op, lengths):
    if len(lengths.shape) != 1:
        raise ValueError(f"LengthsToSegmentIds takes 1-D lengths. Received: rank "
                         f"{len(lengths.shape)}")
    return Caffe2LengthsToSegmentIds(name=b.name(op.outputs[0]))(lengths)


def check_expand_dims(op, params):
    dims = ints(op.args.get("dims", []), "dims")
    if not dims or dims != sorted(set(dims)) or dims[0] < 0:
        raise ValueError(f"argument `dims` of ExpandDims must be non-empty, sorted, unique "
                         f"and non-negative, as Caffe2 requires. Received: dims={dims}")
    return dims


def expand_dims(b, op, x):
    dims = check_expand_dims(op, b.params)
    name = b.name(op.outputs[0])
    x = b.to_caffe2(x, name)
    if dims[-1] > len(x.shape) + len(dims) - 1:
        raise ValueError(f"argument `dims` of ExpandDims: {dims} goes past the "
                         f"{len(x.shape)}-D input")
    if dims[0] == 0:
        raise Unsupported("ExpandDims at axis 0 (Keras's batch axis)")
    shape = list(x.shape[1:])
    for d in dims:
        shape.insert(d - 1, 1)
    y = keras.layers.Reshape(tuple(shape), name=name)(x)
    return b.from_caffe2(y, name)


def row_concat(b, op, *xs):
    """Concat on axis 0: rows of data-dependent count (rois, detections)."""
    if len(op.outputs) != 2:
        raise ValueError(f"Concat must have 2 outputs (the result and split_info). "
                         f"Received: {list(op.outputs)}")
    ranks = {len(x.shape) for x in xs}
    tails = {tuple(b.caffe2_shape(x)[1:]) for x in xs}
    if len(ranks) != 1 or len(tails) != 1:
        raise ValueError(f"Concat on axis 0 needs inputs with the same shape past axis 0. "
                         f"Received: {[tuple(['N', *b.caffe2_shape(x)[1:]]) for x in xs]}")
    return tuple(Caffe2RowConcat(name=b.name(op.outputs[0]))(list(xs)))


def identity(b, op, x):
    """AliasWithName, CopyGPUToCPU, CopyCPUToGPU: the same values under another name."""
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise ValueError(f"{op.type} takes 1 input and 1 output. Received: inputs "
                         f"{list(op.inputs)}, outputs {list(op.outputs)}")
    return keras.layers.Identity(name=b.name(op.outputs[0]))(x)

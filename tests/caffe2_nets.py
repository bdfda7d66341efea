"""Small Caffe2 nets written in the tests, and a numpy re-computation of Caffe2's ops.

The numpy functions follow docs/caffe2-ops.md: FC
``x @ W.T + b`` flattening C,H,W; Conv OIHW cross-correlation with explicit pads;
SpatialBN test mode ``(x - rm) / sqrt(riv + eps) * s + b``; pooling with floor output
sizes, padded cells ignored.
"""

from pathlib import Path

import numpy as np

from tfinit.caffe2._netdef import NetDef, Operator

DATA = Path(__file__).resolve().parent / "data"
MODELS = DATA / "models"
REALMODELS = DATA / "realmodels"


def _folder(path):
    assert path.is_dir(), f"test data folder {path} is missing (it is part of the repository)"
    return path


def models_dir():
    """``tests/data/models``: the exported brew MLP; a missing folder fails (never skips)."""
    return _folder(MODELS)


def realmodels_dir():
    """``tests/data/realmodels``: nets built by Caffe2's own model code, run in Caffe2."""
    return _folder(REALMODELS)


def given_tensor_init_net(params):
    """An init net in model-zoo style: one GivenTensorFill per parameter."""
    return NetDef(name="init", ops=[
        Operator("GivenTensorFill", (), (name,),
                 {"shape": [int(d) for d in value.shape],
                  "values": value.astype(np.float32).reshape(-1)})
        for name, value in params.items()
    ])


def cnn(seed=0, conv_pad=1, pool_pad=0):
    """A small CNN: conv 3->4 k3, spatial_bn, relu, max_pool 2/2, fc 64->5, softmax."""
    rng = np.random.default_rng(seed)
    params = {
        "conv1_w": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32),
        "conv1_b": rng.normal(0, 0.3, (4,)).astype(np.float32),
        "bn1_s": rng.uniform(0.5, 1.5, (4,)).astype(np.float32),
        "bn1_b": rng.normal(0, 0.3, (4,)).astype(np.float32),
        "bn1_rm": rng.normal(0, 0.3, (4,)).astype(np.float32),
        "bn1_riv": rng.uniform(0.5, 2.0, (4,)).astype(np.float32),
    }
    size = 8 + 2 * conv_pad - 2
    size = (size + 2 * pool_pad - 2) // 2 + 1
    params["fc_w"] = rng.normal(0, 0.3, (5, 4 * size * size)).astype(np.float32)
    params["fc_b"] = rng.normal(0, 0.3, (5,)).astype(np.float32)
    nchw = {"order": "NCHW"}
    predict = NetDef(name="cnn", ops=[
        Operator("Conv", ("data", "conv1_w", "conv1_b"), ("conv1",),
                 {"kernel": 3, "pad": conv_pad, "stride": 1, **nchw}, engine="CUDNN"),
        Operator("SpatialBN", ("conv1", "bn1_s", "bn1_b", "bn1_rm", "bn1_riv"), ("bn1",),
                 {"is_test": 1, "epsilon": 1e-3, **nchw}),
        Operator("Relu", ("bn1",), ("bn1",), dict(nchw)),  # in place, as brew writes it
        Operator("MaxPool", ("bn1",), ("pool1",), {"kernel": 2, "stride": 2, "pad": pool_pad,
                                                   **nchw}),
        Operator("FC", ("pool1", "fc_w", "fc_b"), ("fc",), dict(nchw)),
        Operator("Softmax", ("fc",), ("prob",), dict(nchw)),
    ], external_input=["data", *params], external_output=["prob"])
    return predict, params


# ---------------------------------------------------------------- numpy Caffe2


def fc(x, w, b):
    return x.reshape(len(x), -1) @ w.T + b


def conv(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), group=1):
    """Caffe2 NCHW conv: pads (top, left, bottom, right)."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    o, ig, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    per_group = o // group
    for g in range(group):
        xs = x[:, g * ig:(g + 1) * ig]
        ws = w[g * per_group:(g + 1) * per_group]
        for i in range(oh):
            for j in range(ow):
                patch = xs[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
                out[:, g * per_group:(g + 1) * per_group, i, j] = np.einsum(
                    "nchw,ochw->no", patch, ws)
    if b is not None:
        out += b[None, :, None, None]
    return out.astype(np.float32)


def spatial_bn(x, s, b, rm, riv, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - rm.reshape(shape)) / np.sqrt(riv.reshape(shape) + eps) * s.reshape(shape)
            + b.reshape(shape)).astype(np.float32)


def pool(x, kernel, stride, pads=(0, 0, 0, 0), mode="max"):
    """Caffe2 pooling: floor output size; padded cells ignored (max and average)."""
    _, _, h, w = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // stride[1] + 1
    return _pool_windows(x, kernel, stride, pads[:2], (oh, ow), mode)


def _pool_windows(x, kernel, stride, head_pads, sizes, mode):
    """Output ``(i, j)`` pools window ``[i*s - p, i*s - p + k)`` per axis, clipped to the
    input (padded cells ignored; average divides by the cells inside)."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, *sizes), np.float32)
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            top, left = i * stride[0] - head_pads[0], j * stride[1] - head_pads[1]
            window = x[:, :, max(top, 0):min(top + kernel[0], h),
                       max(left, 0):min(left + kernel[1], w)]
            out[:, :, i, j] = window.max(axis=(2, 3)) if mode == "max" else window.mean(
                axis=(2, 3))
    return out


def relu(x):
    return np.maximum(x, 0)


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def cnn_forward(x, p, conv_pad=1, pool_pad=0):
    """Every blob of :func:`cnn`'s net, in Caffe2 layout."""
    blobs = {"conv1": conv(x, p["conv1_w"], p["conv1_b"], pads=(conv_pad,) * 4)}
    blobs["bn1"] = relu(spatial_bn(blobs["conv1"], p["bn1_s"], p["bn1_b"], p["bn1_rm"],
                                   p["bn1_riv"], 1e-3))
    blobs["pool1"] = pool(blobs["bn1"], (2, 2), (2, 2), (pool_pad,) * 4)
    blobs["fc"] = fc(blobs["pool1"], p["fc_w"], p["fc_b"])
    blobs["prob"] = softmax(blobs["fc"])
    return blobs


def branchy(seed=0):
    """A net using the rest of to_keras's ops: strided/asymmetric/grouped convs, Tanh,
    Sigmoid, Concat, padded AveragePool, Sum, Dropout, Flatten, FC, Reshape, global pool."""
    rng = np.random.default_rng(seed)
    params = {
        "a_w": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32),
        "a_b": rng.normal(0, 0.3, (4,)).astype(np.float32),
        "b_w": rng.normal(0, 0.3, (6, 1, 3, 3)).astype(np.float32),
        "fc_w": rng.normal(0, 0.3, (6, 160)).astype(np.float32),
        "fc_b": rng.normal(0, 0.3, (6,)).astype(np.float32),
    }
    predict = NetDef(name="branchy", ops=[
        Operator("Conv", ("data", "a_w", "a_b"), ("conv_a",),
                 {"kernel_h": 3, "kernel_w": 3, "stride": 2, "pad_t": 1, "pad_l": 0,
                  "pad_b": 0, "pad_r": 1}),
        Operator("Conv", ("data", "b_w"), ("conv_b",),
                 {"kernels": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "group": 3}),
        Operator("Tanh", ("conv_a",), ("tanh_a",)),
        Operator("Sigmoid", ("conv_b",), ("sig_b",)),
        Operator("Concat", ("tanh_a", "sig_b"), ("cat", "cat_split_info"), {"axis": 1}),
        Operator("AveragePool", ("cat",), ("avg",), {"kernel": 3, "stride": 1, "pad": 1}),
        Operator("Sum", ("avg", "cat"), ("sum",)),
        Operator("MaxPool", ("sum",), ("gmax",), {"global_pooling": 1}),
        Operator("Dropout", ("sum",), ("drop",), {"ratio": 0.3, "is_test": 1}),
        Operator("Flatten", ("drop",), ("flat",)),
        Operator("FC", ("flat", "fc_w", "fc_b"), ("fc",)),
        Operator("Reshape", ("fc",), ("resh", "old_shape"), {"shape": [0, 2, 3]}),
    ], external_input=["data", *params], external_output=["resh", "gmax"])
    return predict, params


def branchy_forward(x, p):
    blobs = {"conv_a": conv(x, p["a_w"], p["a_b"], stride=(2, 2), pads=(1, 0, 0, 1))}
    blobs["conv_b"] = conv(x, p["b_w"], stride=(2, 2), pads=(1, 1, 1, 1), group=3)
    blobs["tanh_a"] = np.tanh(blobs["conv_a"])
    blobs["sig_b"] = 1 / (1 + np.exp(-blobs["conv_b"]))
    blobs["cat"] = np.concatenate([blobs["tanh_a"], blobs["sig_b"]], axis=1)
    blobs["avg"] = pool(blobs["cat"], (3, 3), (1, 1), (1, 1, 1, 1), mode="avg")
    blobs["sum"] = blobs["avg"] + blobs["cat"]
    blobs["gmax"] = blobs["sum"].max(axis=(2, 3), keepdims=True)
    blobs["drop"] = blobs["sum"]
    blobs["flat"] = blobs["drop"].reshape(len(x), -1)
    blobs["fc"] = fc(blobs["flat"], p["fc_w"], p["fc_b"])
    blobs["resh"] = blobs["fc"].reshape(len(x), 2, 3)
    return blobs


def padded_pools():
    """Pools whose explicit pads TensorFlow's SAME cannot express (input has negatives)."""
    predict = NetDef(name="pools", ops=[
        Operator("MaxPool", ("data",), ("mp",), {"kernel": 3, "stride": 2, "pad": 1}),
        Operator("AveragePool", ("data",), ("ap",), {"kernel": 3, "stride": 2, "pad": 1}),
        Operator("AveragePool", ("data",), ("ap2",),
                 {"kernel": 2, "stride": 2, "pads": [1, 0, 0, 1]}),
    ], external_input=["data"], external_output=["mp", "ap", "ap2"])
    return predict, {}


def padded_pools_forward(x):
    return {"mp": pool(x, (3, 3), (2, 2), (1, 1, 1, 1)),
            "ap": pool(x, (3, 3), (2, 2), (1, 1, 1, 1), mode="avg"),
            "ap2": pool(x, (2, 2), (2, 2), (1, 0, 0, 1), mode="avg")}


# ---------------------------------------------------------------- the ops of Caffe2's model code


def channel_shuffle(x, group, axis=1):
    """docs/caffe2-ops.md: output channel i * g + j is input channel j * (C / g) + i."""
    channels = x.shape[axis]
    per = channels // group
    order = [j * per + i for i in range(per) for j in range(group)]
    return np.take(x, order, axis=axis)


def lrn(x, size, alpha, beta, bias, axis=1):
    """scale = bias + alpha / size * (sum of x^2 over the size channels around c)."""
    x64 = np.moveaxis(x.astype(np.float64), axis, -1)
    half, channels = (size - 1) // 2, x64.shape[-1]
    scale = np.empty_like(x64)
    for c in range(channels):
        window = x64[..., max(c - half, 0):min(c + half + 1, channels)]
        scale[..., c] = bias + alpha / size * (window ** 2).sum(axis=-1)
    y = x64 * scale ** -beta
    return (np.moveaxis(y, -1, axis).astype(np.float32),
            np.moveaxis(scale, -1, axis).astype(np.float32))


def lstm(gates_x, h0, c0, w, b, lengths, forget_bias=0.0, drop_states=False):
    """Caffe2's LSTMUnit loop, time-major: gates i, f, o, g; lengths keep or zero states."""
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h, c = h0[0].astype(np.float64), c0[0].astype(np.float64)
    hidden, cell = [], []
    for t in range(len(gates_x)):
        z = gates_x[t] + h @ w.T + b
        i, f, o, g = np.split(z, 4, axis=-1)
        c_new = sigmoid(f + forget_bias) * c + sigmoid(i) * np.tanh(g)
        h_new = sigmoid(o) * np.tanh(c_new)
        valid = (t < np.asarray(lengths))[:, None]
        h = np.where(valid, h_new, 0 if drop_states else h)
        c = np.where(valid, c_new, 0 if drop_states else c)
        hidden.append(h)
        cell.append(c)
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    return f32(hidden), f32(h[None]), f32(cell), f32(c[None])


def to_nhwc(predict, params, fc_after=None):
    """The same net in NHWC order: every op's order set to NHWC, conv weights
    ``[O, kh, kw, I]``, and the FC named ``fc_after`` (reading a flattened 4-D blob of
    shape ``(C, H, W)``) given its columns in H, W, C order."""
    ops = []
    for op in predict.ops:
        args = dict(op.args)
        if op.type not in ("Softmax", "Sum", "Add", "Reshape", "Flatten", "Dropout", "FC"):
            args["order"] = "NHWC"
        ops.append(Operator(op.type, op.inputs, op.outputs, args, engine=op.engine))
    params = dict(params)
    for op in predict.ops:
        if op.type == "Conv":
            params[op.inputs[1]] = params[op.inputs[1]].transpose(0, 2, 3, 1).copy()
    if fc_after is not None:
        blob, chw = fc_after
        w = params[blob]
        params[blob] = w.reshape(len(w), *chw).transpose(0, 2, 3, 1).reshape(len(w), -1).copy()
    net = NetDef(name=predict.name + "_nhwc", ops=ops, external_input=predict.external_input,
                 external_output=predict.external_output)
    return net, params


def nchw_to_nhwc(blobs):
    """4-D arrays NCHW -> NHWC (others unchanged)."""
    return {k: v.transpose(0, 2, 3, 1) if np.ndim(v) == 4 else v for k, v in blobs.items()}


# ---------------------------------------------------------------- nets published from Caffe

OPS = DATA / "caffe2_ops"


def ops_dir():
    """``tests/data/caffe2_ops``: single ops run in real Caffe2 (README.md there)."""
    return _folder(OPS)


def ceil_pool(x, kernel, stride, pad, mode="max"):
    """Caffe2's ``legacy_pad=3`` pooling (NCHW), per docs/caffe2-ops.md: per axis
    ``out = ceil((n + 2p - k) / s) + 1``, minus 1 when ``p > 0`` and the last window would
    start at or past ``n + p``; window ``i`` is ``[i*s - p, i*s - p + k)`` clipped to the
    input; average divides by the cells inside."""
    _, _, h, w = x.shape
    sizes = []
    for size, k, s, p in zip((h, w), kernel, stride, pad, strict=True):
        out = int(np.ceil((size + 2 * p - k) / s)) + 1
        if p > 0 and (out - 1) * s >= size + p:
            out -= 1
        sizes.append(out)
    return _pool_windows(x, kernel, stride, pad, sizes, mode)


def caffe_style(seed=0):
    """A net as Caffe-converted models are: conv, SpatialBN + Scale (Mul/Add broadcast at
    axis 1 with parameters), ceil-mode pools, an Inception-style Concat of a 1x1 conv and a
    depthwise 3x3 (engine DEPTHWISE_3x3) + pointwise branch, a padded ceil-mode average
    pool and an FC with Caffe's 4-D weight (axis_w=3). Input 3x13x13."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.3):
        return rng.normal(0, scale, shape).astype(np.float32)

    params = {
        "conv1_w": normal(6, 3, 3, 3), "conv1_b": normal(6),
        "bn1_s": rng.uniform(0.5, 1.5, 6).astype(np.float32), "bn1_b": normal(6),
        "bn1_rm": normal(6), "bn1_riv": rng.uniform(0.5, 2.0, 6).astype(np.float32),
        "scale1_w": rng.uniform(0.5, 1.5, 6).astype(np.float32), "scale1_b": normal(6),
        "a_w": normal(4, 6, 1, 1), "a_b": normal(4),
        "dw_w": normal(6, 1, 3, 3), "pw_w": normal(4, 6, 1, 1), "pw_b": normal(4),
    }
    # conv 13 -> 13 (pad 1); ceil max pool k3 s2: 13 -> 6; ceil avg pool k3 s2 p1: 6 -> 4
    params["fc_w"] = normal(1, 1, 5, 8 * 4 * 4, scale=0.1)
    params["fc_b"] = normal(5)
    nchw = {"order": "NCHW"}
    ops = [
        Operator("Conv", ("data", "conv1_w", "conv1_b"), ("conv1",),
                 {"kernel": 3, "pad": 1, **nchw}),
        Operator("SpatialBN", ("conv1", "bn1_s", "bn1_b", "bn1_rm", "bn1_riv"), ("conv1",),
                 {"is_test": 1, "epsilon": 1e-5, **nchw}),
        Operator("Mul", ("conv1", "scale1_w"), ("conv1",), {"broadcast": 1, "axis": 1}),
        Operator("Add", ("conv1", "scale1_b"), ("conv1",), {"broadcast": 1, "axis": 1}),
        Operator("Relu", ("conv1",), ("conv1",)),
        Operator("MaxPool", ("conv1",), ("pool1",),
                 {"kernel": 3, "stride": 2, "legacy_pad": 3, **nchw}),
        Operator("Conv", ("pool1", "a_w", "a_b"), ("a",), {"kernel": 1, **nchw}),
        Operator("Conv", ("pool1", "dw_w"), ("dw",),
                 {"kernel": 3, "pad": 1, "group": 6, **nchw}, engine="DEPTHWISE_3x3"),
        Operator("Conv", ("dw", "pw_w", "pw_b"), ("pw",), {"kernel": 1, **nchw}),
        Operator("Concat", ("a", "pw"), ("cat", "cat_info"), {"axis": 1}),
        Operator("AveragePool", ("cat",), ("pool2",),
                 {"kernel": 3, "stride": 2, "pad": 1, "legacy_pad": 3, **nchw}),
        Operator("FC", ("pool2", "fc_w", "fc_b"), ("fc",), {"axis_w": 3}),
        Operator("Softmax", ("fc",), ("prob",)),
    ]
    return NetDef(name="caffe_style", ops=ops, external_input=["data", *params],
                  external_output=["prob"]), params


def caffe_style_forward(x, p):
    """Every blob of :func:`caffe_style`, in Caffe2 layout (``conv1`` holds its last value)."""
    conv1 = conv(x, p["conv1_w"], p["conv1_b"], pads=(1, 1, 1, 1))
    bn = spatial_bn(conv1, p["bn1_s"], p["bn1_b"], p["bn1_rm"], p["bn1_riv"], 1e-5)
    scaled = bn * p["scale1_w"][None, :, None, None] + p["scale1_b"][None, :, None, None]
    blobs = {"conv1": relu(scaled)}
    blobs["pool1"] = ceil_pool(blobs["conv1"], (3, 3), (2, 2), (0, 0))
    blobs["a"] = conv(blobs["pool1"], p["a_w"], p["a_b"])
    blobs["dw"] = conv(blobs["pool1"], p["dw_w"], pads=(1, 1, 1, 1), group=6)
    blobs["pw"] = conv(blobs["dw"], p["pw_w"], p["pw_b"])
    blobs["cat"] = np.concatenate([blobs["a"], blobs["pw"]], axis=1)
    blobs["pool2"] = ceil_pool(blobs["cat"], (3, 3), (2, 2), (1, 1), mode="average")
    blobs["fc"] = fc(blobs["pool2"], p["fc_w"].reshape(5, -1), p["fc_b"])
    blobs["prob"] = softmax(blobs["fc"])
    return blobs


# ---------------------------------------------------------------- untrusted files

HUGE = [1000000, 1000000]  # 10**12 elements: 4 TB of float32


def huge_fill_init_net(op_type="XavierFill", **args):
    """An init net whose op #1 asks for a ``HUGE`` blob (op #0: a small GivenTensorFill)."""
    return NetDef(name="huge", ops=[
        Operator("GivenTensorFill", (), ("b",), {"shape": [2], "values": [0.5, -0.5]}),
        Operator(op_type, (), ("w",), {"shape": HUGE, **args}),
    ])


def exploding_predict_net(kind):
    """A predict net on a 3x8x8 input (no parameters) whose blobs explode at op #1:
    ``"conv"`` (pads of 10**6 around the input), ``"pool"`` (a MaxPool with such pads and a
    kernel larger than them, as Caffe2 requires),
    ``"broadcast"`` (a Mul of a (1, 10**6) and a (10**6, 1) data input: 10**12 values)."""
    if kind == "broadcast":
        ops = [Operator("Relu", ("a",), ("a_relu",)),
               Operator("Mul", ("a_relu", "c"), ("y",))]
        return NetDef(name="broadcast", ops=ops, external_input=["a", "c"],
                      external_output=["y"]), {}
    params = {"w": np.ones((2, 3, 1, 1), np.float32)}
    big = {"kernel": 1, "pad": 10**6, "order": "NCHW"}
    exploding = (Operator("Conv", ("x", "w"), ("y",), big) if kind == "conv" else
                 Operator("MaxPool", ("x",), ("y",), {**big, "kernel": 10**6 + 1,
                                                      "stride": 10**6}))
    ops = [Operator("Relu", ("data",), ("x",)), exploding]
    return NetDef(name=kind, ops=ops, external_input=["data", "w"],
                  external_output=["y"]), params if kind == "conv" else {}

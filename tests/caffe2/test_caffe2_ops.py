"""Small nets for each op and option to_keras gained for Caffe2's model code, against numpy
re-computations of the rules in docs/caffe2-ops.md."""

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import (
    Caffe2ChannelShuffle,
    Caffe2LRN,
    Caffe2Pooling2D,
    Caffe2ShapeInfo,
    Caffe2Split,
    NetDef,
    Operator,
    check_forward,
    to_keras,
)


def _close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _net(*ops, outputs):
    return NetDef(name="t", ops=list(ops), external_input=["data"], external_output=outputs)


# ---------------------------------------------------------------- ChannelShuffle, Split, Concat


def test_channel_shuffle_follows_caffe2s_index_rule():
    x = _x(2, 6, 3, 4)
    model = to_keras(_net(Operator("ChannelShuffle", ("data",), ("y",), {"group": 2}),
                          outputs=["y"]), {}, (6, 3, 4))
    assert isinstance(model.get_layer("y"), Caffe2ChannelShuffle)
    y = np.asarray(model(x))
    np.testing.assert_array_equal(y, x[:, [0, 3, 1, 4, 2, 5]])  # C=6, g=2
    np.testing.assert_array_equal(y, nets.channel_shuffle(x, 2))
    with pytest.raises(ValueError, match="group=4 must divide the 6 channels"):
        to_keras(_net(Operator("ChannelShuffle", ("data",), ("y",), {"group": 4}),
                      outputs=["y"]), {}, (6, 3, 4))


@pytest.mark.parametrize("args, sizes", [({"split": [2, 3]}, [2, 3]), ({}, None),
                                         ({"axis": 2, "split": [1, 3]}, [1, 3])])
def test_split_by_argument_or_in_equal_parts(args, sizes):
    x = _x(2, 6, 4, 3) if sizes is None else _x(2, 5, 4, 3)
    axis = args.get("axis", 1)
    model = to_keras(_net(Operator("Split", ("data",), ("a", "b"), args), outputs=["a", "b"]),
                     {}, x.shape[1:])
    a, b = model(x)
    cut = sizes[0] if sizes else x.shape[1] // 2
    _close(a, np.take(x, range(cut), axis=axis))
    _close(b, np.take(x, range(cut, x.shape[axis]), axis=axis))


def test_split_sizes_from_an_init_net_blob_and_from_concats_split_info():
    x = _x(2, 5, 3, 3)
    net = _net(Operator("Split", ("data", "sizes"), ("a", "b")), outputs=["a", "b"])
    a, b = to_keras(net, {"sizes": np.array([4, 1], np.int32)}, (5, 3, 3))(x)
    _close(a, x[:, :4])
    _close(b, x[:, 4:])
    net = _net(Operator("Relu", ("data",), ("r",)),
               Operator("Concat", ("data", "r"), ("cat", "info"), {"axis": 1}),
               Operator("Split", ("cat", "info"), ("left", "right")),
               outputs=["left", "right", "info"])
    model = to_keras(net, {}, (5, 3, 3))
    left, right, info = model(x)
    _close(left, x)
    _close(right, np.maximum(x, 0))
    assert np.asarray(info).dtype == np.int32 and np.asarray(info).tolist() == [5, 5]
    assert isinstance(model.get_layer("info"), Caffe2ShapeInfo)


def test_split_errors_name_what_was_expected():
    with pytest.raises(ValueError, match=r"op #0 Split.*cannot split 5 entries along axis 1 "
                                         r"into 2 equal parts"):
        to_keras(_net(Operator("Split", ("data",), ("a", "b")), outputs=["a"]), {}, (5, 2, 2))
    with pytest.raises(ValueError, match=r"split sizes \[2, 2\] must be 2 sizes .* adding up "
                                         r"to 5"):
        to_keras(_net(Operator("Split", ("data",), ("a", "b"), {"split": [2, 2]}),
                      outputs=["a"]), {}, (5, 2, 2))


# ---------------------------------------------------------------- LRN


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_lrn_matches_the_formula_in_both_orders(order):
    args = {"size": 5, "alpha": 0.8, "beta": 0.75, "bias": 2.0, "order": order}
    x = 3 * _x(2, 7, 4, 5)
    y, scale = nets.lrn(x, 5, 0.8, 0.75, 2.0)
    if order == "NHWC":
        x, y, scale = (v.transpose(0, 2, 3, 1) for v in (x, y, scale))
    net = _net(Operator("LRN", ("data",), ("y", "y_scale"), args), outputs=["y", "y_scale"])
    model = to_keras(net, {}, x.shape[1:])
    assert isinstance(model.get_layer("y"), Caffe2LRN)
    out, out_scale = model(x)
    _close(out, y)
    _close(out_scale, scale)
    assert np.abs(y - x).max() > 0.1  # not the identity


def test_lrn_defaults_and_bad_size():
    x = _x(1, 3, 2, 2)
    model = to_keras(_net(Operator("LRN", ("data",), ("y",), {"size": 3}), outputs=["y"]),
                     {}, (3, 2, 2))
    _close(model(x), x)  # alpha = beta = 0: scale^0 = 1
    with pytest.raises(ValueError, match="`size` must be a positive odd int. Received: size=4"):
        to_keras(_net(Operator("LRN", ("data",), ("y",), {"size": 4}), outputs=["y"]),
                 {}, (3, 2, 2))


def test_layer_arguments_are_refused_in_one_style():
    with pytest.raises(ValueError, match=r"Caffe2Pooling2D: Argument `mode` must be 'max' or "
                                         r"'average'. Received: mode='sum'"):
        Caffe2Pooling2D("sum", (2, 2), (2, 2), (0, 0, 0, 0))
    with pytest.raises(ValueError, match=r"Add takes 2 inputs. Received: 3 inputs"):
        to_keras(_net(Operator("Add", ("data", "data", "data"), ("y",)), outputs=["y"]),
                 {}, (3, 2, 2))


# ---------------------------------------------------------------- NHWC nets, input_format


@pytest.fixture(scope="module")
def cnn():
    predict, params = nets.cnn()
    x = _x(2, 3, 8, 8, seed=1)
    return predict, params, x, nets.cnn_forward(x, params)


BLOBS = ["conv1", "bn1", "pool1", "fc", "prob"]


def test_an_nhwc_net_flattens_h_w_c_into_its_fc(cnn):
    predict, params, x, ref = cnn
    net, nhwc_params = nets.to_nhwc(predict, params, fc_after=("fc_w", (4, 4, 4)))
    model = to_keras(net, nhwc_params, (8, 8, 3), outputs=BLOBS)
    assert model.input_shape == (None, 8, 8, 3)
    for blob, out in zip(BLOBS, model(x.transpose(0, 2, 3, 1)), strict=True):
        _close(out, nets.nchw_to_nhwc(ref)[blob])
    nchw_io = to_keras(net, nhwc_params, (3, 8, 8), input_format="channels_first")
    _close(nchw_io(x), ref["prob"])


def test_input_format_channels_last_takes_keras_images_without_a_permute(cnn):
    predict, params, x, ref = cnn
    model = to_keras(predict, params, (8, 8, 3), outputs=["conv1", "prob"],
                     input_format="channels_last")
    assert model.input_shape == (None, 8, 8, 3)
    first = model.layers[1]
    assert isinstance(first, keras.layers.ZeroPadding2D)  # straight into the conv's padding
    conv1, prob = model(x.transpose(0, 2, 3, 1))
    _close(conv1, ref["conv1"].transpose(0, 2, 3, 1))  # 4-D outputs NHWC too
    _close(prob, ref["prob"])
    with pytest.raises(ValueError, match="`input_format` must be 'channels_first', "
                                         "'channels_last' or None. Received: input_format='NHWC'"):
        to_keras(predict, params, (8, 8, 3), input_format="NHWC")


@pytest.mark.parametrize("shape, text", [
    ((3, 8), r"`input_shape` for 'data' must be \(C, H, W\) with C = 3, as Conv reads it with "
             r"weight 'conv1_w' of shape \(4, 3, 3, 3\). Received: input_shape=\(3, 8\)"),
    ((8, 8, 3), r"must be \(C, H, W\) with C = 3.*Received: input_shape=\(8, 8, 3\) \(for "
                r"channels_last images pass input_format='channels_last'\)"),
])
def test_input_shape_is_checked_against_the_first_weight(cnn, shape, text):
    predict, params, _, _ = cnn
    with pytest.raises(ValueError, match=text):
        to_keras(predict, params, shape)


def test_input_shape_checked_in_channels_last_and_for_an_fc():
    predict, params = nets.cnn()
    with pytest.raises(ValueError, match=r"must be \(H, W, C\) with C = 3.*Received: "
                                         r"input_shape=\(3, 8, 8\)"):
        to_keras(predict, params, (3, 8, 8), input_format="channels_last")
    fc = NetDef(ops=[Operator("FC", ("data", "w", "b"), ("y",))], external_output=["y"])
    weights = {"w": np.ones((2, 6), np.float32), "b": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"must be 6 features from axis 1 on.*Received: "
                                         r"input_shape=\(5,\)"):
        to_keras(fc, weights, (5,))
    assert to_keras(fc, weights, (2, 3)).output_shape == (None, 2)


# ---------------------------------------------------------------- FC / Softmax on other axes


def test_fc_and_softmax_on_axis_2_of_a_sequence():
    w, bias = _x(4, 3, seed=1), _x(4, seed=2)
    x = _x(5, 2, 3)
    net = _net(Operator("FC", ("data", "w", "b"), ("fc",), {"axis": 2}),
               Operator("Softmax", ("fc",), ("prob",), {"axis": 2}),
               Operator("Reshape", ("prob",), ("flat", "old"), {"shape": [-1, 4]}),
               outputs=["fc", "prob", "flat", "old"])
    fc, prob, flat, old = to_keras(net, {"w": w, "b": bias}, (2, 3))(x)
    expected = x @ w.T + bias
    _close(fc, expected)
    e = np.exp(expected - expected.max(-1, keepdims=True))
    _close(prob, e / e.sum(-1, keepdims=True))
    _close(flat, (e / e.sum(-1, keepdims=True)).reshape(10, 4))
    assert np.asarray(old).tolist() == [5, 2, 4] and np.asarray(old).dtype == np.int64


def test_softmax_axis_1_of_an_nchw_blob_normalizes_over_c_h_w_and_fc_axis_2():
    x = _x(2, 3, 2, 2)
    w, bias = _x(5, 4, seed=3), _x(5, seed=4)
    net = _net(Operator("Softmax", ("data",), ("prob",)),
               Operator("FC", ("data", "w", "b"), ("fc",), {"axis": 2}),
               outputs=["prob", "fc"])
    prob, fc = to_keras(net, {"w": w, "b": bias}, (3, 2, 2))(x)
    e = np.exp(x.reshape(2, -1) - x.reshape(2, -1).max(1, keepdims=True))
    _close(prob, (e / e.sum(1, keepdims=True)).reshape(x.shape))
    _close(fc, x.reshape(2, 3, 4) @ w.T + bias)


# ---------------------------------------------------------------- .keras files, training


def test_a_net_of_tfinits_layers_saves_loads_and_trains(tmp_path):
    x = _x(4, 6, 4, 4)
    w, bias = 0.1 * _x(3, 96, seed=5), _x(3, seed=6)
    net = _net(Operator("LRN", ("data",), ("n",), {"size": 3, "alpha": 1e-2, "beta": 0.75}),
               Operator("ChannelShuffle", ("n",), ("s",), {"group": 3}),
               Operator("Split", ("s",), ("a", "b"), {"split": [2, 4]}),
               Operator("Concat", ("b", "a"), ("c", "c_info")),
               Operator("FC", ("c", "w", "b_fc"), ("fc",)),
               Operator("Softmax", ("fc",), ("prob",)),
               outputs=["prob", "c_info"])
    model = to_keras(net, {"w": w, "b_fc": bias}, (6, 4, 4))
    assert {type(layer) for layer in model.layers} >= {Caffe2LRN, Caffe2ChannelShuffle,
                                                       Caffe2Split, Caffe2ShapeInfo}
    path = tmp_path / "ops.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    for a, b in zip(reloaded(x), model(x), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    trainer = keras.Model(model.input, model.outputs[0])
    trainer.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    loss = trainer.fit(x, np.array([0, 1, 2, 0]), epochs=3, verbose=0).history["loss"]
    assert loss[-1] < loss[0]


def test_check_forward_on_a_small_net_and_its_integer_blobs(tmp_path):
    x = _x(2, 4, 3, 3)
    net = _net(Operator("Concat", ("data", "data"), ("cat", "info")),
               Operator("Sigmoid", ("cat",), ("sig",)), outputs=["sig", "info"])
    good = {"input/data": x, "blob/sig": 1 / (1 + np.exp(-np.concatenate([x, x], 1))),
            "blob/info": np.array([4, 4], np.int32), "blob/unknown": x}
    report = check_forward(net, {}, good)
    assert report.ok and [c.blob for c in report.blobs] == ["info", "sig"]
    assert report.skipped == {"unknown": "the converted net does not write it"}
    bad = dict(good, **{"blob/info": np.array([4, 5], np.int32)})
    report = check_forward(net, {}, bad)
    assert not report.ok and report.first_divergent.blob == "info"
    np.savez(tmp_path / "f.npz", **good)
    assert check_forward(net, {}, tmp_path / "f.npz").ok
    with pytest.raises(ValueError, match=r"holds no input/<blob> for the data input\(s\) "
                                         r"\['data'\]"):
        check_forward(net, {}, {"blob/sig": x})

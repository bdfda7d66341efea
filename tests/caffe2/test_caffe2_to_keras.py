"""tfinit.caffe2.to_keras: Keras models from Caffe2 predict nets, checked blob by blob."""

from pathlib import Path

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import NetDef, Operator, converted_ops, read_netdef, to_keras
from tfinit.caffe2._layers import Caffe2Pooling2D

MLP_BLOBS = ["fc1", "relu1", "fc2", "relu2", "fc3", "prob"]


def _close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-5, atol=1e-5)


def test_mlp_reproduces_caffe2s_outputs_and_every_intermediate_blob():
    models = nets.models_dir()
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)
    model = to_keras(models / "mlp_predict_net.pb", models / "mlp_init_net.pb", (10,))
    _close(model(ref["input/data"]), ref["blob/prob"])
    full = to_keras(read_netdef(models / "mlp_predict_net.pb"),
                    models.joinpath("mlp_init_net.pb").read_bytes(), (10,), outputs=MLP_BLOBS)
    for name, out in zip(MLP_BLOBS, full(ref["input/data"]), strict=True):
        _close(out, ref[f"blob/{name}"])
    assert [layer.name for layer in full.layers if isinstance(layer, keras.layers.Dense)] == [
        "fc1", "fc2", "fc3"]


def test_cnn_in_nchw_matches_numpy_caffe2_blob_by_blob():
    predict, params = nets.cnn()
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    ref = nets.cnn_forward(x, params)
    init = nets.given_tensor_init_net(params).to_bytes()
    blobs = ["conv1", "bn1", "pool1", "fc", "prob"]
    model = to_keras(predict.to_bytes(), init, (3, 8, 8), outputs=blobs)
    assert model.input_shape == (None, 3, 8, 8)
    for name, out in zip(blobs, model(x), strict=True):
        assert out.shape == ref[name].shape, name
        _close(out, ref[name])
    bn = model.get_layer("bn1")
    assert bn.epsilon == pytest.approx(1e-3)


def test_padded_pooling_and_the_remaining_ops_match_numpy_caffe2():
    predict, params = nets.branchy()
    x = np.random.default_rng(2).normal(size=(2, 3, 8, 8)).astype(np.float32)
    ref = nets.branchy_forward(x, params)
    blobs = ["conv_a", "conv_b", "tanh_a", "sig_b", "cat", "avg", "sum", "gmax", "drop",
             "flat", "fc", "resh"]
    model = to_keras(predict, params, (3, 8, 8), outputs=blobs)
    for name, out in zip(blobs, model(x), strict=True):
        assert out.shape == ref[name].shape, name
        _close(out, ref[name])
    default = to_keras(predict, params, (3, 8, 8))  # the net's external outputs
    resh, gmax = default(x)
    _close(resh, ref["resh"])
    _close(gmax, ref["gmax"])


def test_pools_with_explicit_pads_tensorflow_cannot_express(tmp_path):
    predict, _ = nets.padded_pools()
    x = np.random.default_rng(4).normal(size=(2, 3, 8, 7)).astype(np.float32)
    ref = nets.padded_pools_forward(x)
    model = to_keras(predict, {}, (3, 8, 7))
    assert isinstance(model.get_layer("mp"), Caffe2Pooling2D)
    for name, out in zip(["mp", "ap", "ap2"], model(x), strict=True):
        assert out.shape == ref[name].shape, name
        _close(out, ref[name])
    path = tmp_path / "pools.keras"
    model.save(path)  # the layer is registered by importing tfinit.caffe2
    _close(keras.saving.load_model(path)(x)[0], ref["mp"])


def test_saved_model_reloads_without_tfinit(tmp_path):
    predict, params = nets.cnn()
    x = np.random.default_rng(3).normal(size=(1, 3, 8, 8)).astype(np.float32)
    model = to_keras(predict, params, (3, 8, 8))
    path = tmp_path / "cnn.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)  # only built-in layers: no custom objects
    _close(reloaded(x), nets.cnn_forward(x, params)["prob"])


def test_unsupported_ops_are_listed():
    predict, params = nets.cnn()
    predict.ops.insert(2, Operator("Im2Col", ("bn1",), ("bn1",)))
    predict.ops.append(Operator("ArgMax", ("prob",), ("label",)))
    with pytest.raises(ValueError, match=r"unsupported Caffe2 op\(s\) and op feature\(s\) in 2 "
                                         r"of the net's ops: Im2Col \(op #2\); ArgMax \(op #7\)"
                                         r"\. Supported op types: .*SpatialBN"):
        to_keras(predict, params, (3, 8, 8))


@pytest.mark.parametrize("change, text", [
    (lambda net: net.ops[0].args.update(order="NCWH"),
     "unsupported Caffe2 op(s) and op feature(s) in 1 of the net's ops: order 'NCWH'"),
    (lambda net: net.ops[3].args.update(order="NHWC"), "order NHWC in a net of NCHW ops (op #3)"),
    (lambda net: net.ops[1].args.update(is_test=0),
     "SpatialBN in training mode (is_test=0) (op #1)"),
    (lambda net: net.ops[3].args.update(legacy_pad=2),
     "legacy_pad=2 (SAME) on MaxPool; 0 and 3 are converted (op #3)"),
    (lambda net: net.ops[5].args.update(axis=0), "unsupported Softmax over axis 0"),
    (lambda net: net.ops.__setitem__(0, Operator("Conv", ("data", "nope_w"), ("conv1",))),
     "'nope_w', which the init net does not hold"),
])
def test_unsupported_arguments_name_the_op(change, text):
    predict, params = nets.cnn()
    change(predict)
    with pytest.raises(ValueError, match="to_keras: ") as info:
        to_keras(predict, params, (3, 8, 8))
    assert text in str(info.value)


def test_bad_inputs_and_outputs():
    predict, params = nets.cnn()
    with pytest.raises(ValueError, match="input_shape"):
        to_keras(predict, params, (3, 0, 8))
    with pytest.raises(TypeError, match="input_shape"):
        to_keras(predict, params, "chw")
    with pytest.raises(ValueError, match=r"output blob\(s\) \['nope'\]"):
        to_keras(predict, params, (3, 8, 8), outputs=["nope"])
    two_inputs = NetDef(ops=[Operator("Sum", ("a", "b"), ("c",))], external_output=["c"])
    with pytest.raises(ValueError, match=r"must be a mapping \{blob: shape\}: the net reads "
                                         r"2 data inputs \['a', 'b'\]"):
        to_keras(two_inputs, {}, (4,))
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        to_keras(two_inputs, {}, {"a": (4,)})
    model = to_keras(two_inputs, {}, {"a": (4,), "b": (4,)})
    x = np.ones((2, 4), np.float32)
    _close(model([x, 2 * x]), 3 * x)


def test_converted_ops_are_brews_common_ops_and_those_of_caffe2s_model_code():
    classification = [
        "FC", "Conv", "SpatialBN", "Relu", "Sigmoid", "Tanh", "MaxPool", "AveragePool",
        "Softmax", "Dropout", "Concat", "Sum", "Add", "Mul", "Flatten", "Reshape", "LRN",
        "ChannelShuffle", "Split", "RecurrentNetwork"]
    detection_plumbing = [  # the generic ops Detectron and detectron2 exports use
        "AffineChannel", "ResizeNearest", "ConvTranspose", "TopK", "Gather",
        "BatchPermutation", "Cast", "LengthsToSegmentIds", "ExpandDims", "AliasWithName",
        "CopyGPUToCPU", "CopyCPUToGPU"]
    detection = {"RoIAlign", "GenerateProposals", "BBoxTransform", "BoxWithNMSLimit",
                 "CollectAndDistributeFpnRpnProposals"}  # with the detection layers
    assert set(converted_ops()) - detection == set(classification + detection_plumbing)


@pytest.mark.parametrize("name", ["cnn", "branchy", "pools"])
def test_nets_reproduce_what_real_caffe2_computed(name):
    """``data/c2import_<name>_*.pb`` are the nets of caffe2_nets.py written with tfinit's
    encoder; ``c2import_<name>_forward.npz`` holds the input and every float blob the real
    Caffe2 (PyTorch 1.8.1 wheel, CPU) computed from them."""
    data = Path(__file__).resolve().parents[1] / "data"
    ref = np.load(data / f"c2import_{name}_forward.npz", allow_pickle=False)
    blobs = [key.split("/", 1)[1] for key in ref.files if key.startswith("blob/")]
    x = ref["input/data"]
    model = to_keras(data / f"c2import_{name}_predict_net.pb",
                     data / f"c2import_{name}_init_net.pb", x.shape[1:], outputs=blobs)
    outs = model(x)
    for blob, out in zip(blobs, outs if len(blobs) > 1 else [outs], strict=True):
        assert out.shape == ref[f"blob/{blob}"].shape, blob
        _close(out, ref[f"blob/{blob}"])


def test_malformed_ops_raise_value_errors():
    predict, params = nets.cnn()
    predict.ops[4] = Operator("FC", ("pool1", "fc_w"), ("fc",))  # no bias input
    with pytest.raises(ValueError, match=r"op #4 FC.*needs input 2"):
        to_keras(predict, params, (3, 8, 8))
    predict, params = nets.cnn()
    predict.ops[2] = Operator("Relu", (), ("bn1",))
    with pytest.raises(ValueError, match=r"op #2 Relu.*needs an input"):
        to_keras(predict, params, (3, 8, 8))


def test_swapped_nets_are_named_as_swapped():
    """Issue 40, 6: to_keras(init_net, predict_net, ...) says the two look swapped."""
    predict, params = nets.cnn()
    init = nets.given_tensor_init_net(params)
    with pytest.raises(ValueError, match="look swapped.*'Conv' is not an operator tfinit "
                                         r"replays.*to_keras\(predict_net, init_net"):
        to_keras(init, predict, (3, 8, 8))
    assert to_keras(predict, init, (3, 8, 8)).count_params() > 0

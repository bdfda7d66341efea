"""tfinit.caffe2.load_into_keras: Caffe2 parameters into hand-built Keras models."""

import warnings

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import load_init_net, load_into_keras
from tfinit.caffe2._keras import fc_kernel

MLP_BLOBS = ["fc1", "relu1", "fc2", "relu2", "fc3", "prob"]


@pytest.fixture(scope="module")
def mlp():
    models = nets.models_dir()
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)
    return models / "mlp_init_net.pb", ref


def _mlp_functional():
    x = keras.Input((10,), name="data")
    fc1 = keras.layers.Dense(16, name="fc1")(x)
    relu1 = keras.layers.ReLU(name="relu1")(fc1)
    fc2 = keras.layers.Dense(8, name="fc2")(relu1)
    relu2 = keras.layers.ReLU(name="relu2")(fc2)
    fc3 = keras.layers.Dense(3, name="fc3")(relu2)
    prob = keras.layers.Softmax(name="prob")(fc3)
    return keras.Model(x, [fc1, relu1, fc2, relu2, fc3, prob])


def test_mlp_into_a_functional_model_reproduces_every_caffe2_blob(mlp):
    init_net, ref = mlp
    model = _mlp_functional()
    report = load_into_keras(model, init_net)
    assert report.assigned == {f"fc{k}_{p}": f"fc{k}.{a}" for k in (1, 2, 3)
                               for p, a in (("w", "kernel"), ("b", "bias"))}
    assert report.unused == ["data"] and report.missing == [] and report.reordered == {}
    for name, out in zip(MLP_BLOBS, model(ref["input/data"]), strict=True):
        np.testing.assert_allclose(np.asarray(out), ref[f"blob/{name}"], rtol=1e-5, atol=1e-5)


def test_mlp_into_a_sequential_model_with_renamed_layers(mlp):
    init_net, ref = mlp
    model = keras.Sequential([
        keras.Input((10,)),
        keras.layers.Dense(16, activation="relu", name="hidden_a"),
        keras.layers.Dense(8, activation="relu", name="hidden_b"),
        keras.layers.Dense(3, activation="softmax", name="head"),
    ])
    params = load_init_net(init_net)
    name_map = {"hidden_a": "fc1", "hidden_b": {"kernel": "fc2_w", "bias": "fc2_b"},
                "head": "fc3"}
    load_into_keras(model, params, name_map=name_map, strict=False)
    np.testing.assert_allclose(np.asarray(model(ref["input/data"])), ref["blob/prob"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.get_layer("hidden_a").kernel.numpy(), params["fc1_w"].T)


def test_shape_mismatch_names_the_layer_and_both_shapes(mlp):
    init_net, _ = mlp
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(7, name="fc1")])
    with pytest.raises(ValueError, match=r"'fc1' kernel.*'fc1_w'.*\(16, 10\).*\(10, 16\).*"
                                         r"\(10, 7\)"):
        load_into_keras(model, init_net)


def test_report_and_strict_mode(mlp):
    init_net, _ = mlp
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, name="fc1"),
                              keras.layers.Dense(2, name="extra"),
                              keras.layers.LayerNormalization(name="ln")])
    report = load_into_keras(model, init_net)
    assert set(report.assigned) == {"fc1_w", "fc1_b"}
    assert report.missing == ["extra.kernel", "extra.bias", "ln.gamma", "ln.beta"]
    assert report.unused == ["fc2_w", "fc2_b", "fc3_w", "fc3_b", "data"]
    assert "unused Caffe2 blobs: fc2_w" in str(report)
    with pytest.raises(ValueError, match="(?s)strict.*extra.kernel"):
        load_into_keras(model, init_net, strict=True)


def test_bad_arguments(mlp):
    init_net, _ = mlp
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, name="fc1")])
    with pytest.raises(KeyError, match="'nope'"):
        load_into_keras(model, init_net, name_map={"nope": "fc1"})
    with pytest.raises(KeyError, match="gamma"):
        load_into_keras(model, init_net, name_map={"fc1": {"gamma": "fc1_w"}})
    with pytest.raises(TypeError, match=r"Argument `model` must be a keras.Model. "
                                        r"Received: model=<object .*\(of type object\)"):
        load_into_keras(object(), init_net)
    with pytest.raises(TypeError, match=r"Argument `name_map` must map layer 'fc1' to a "
                                        r"Caffe2 prefix .* Received: name_map\['fc1'\]=3\."):
        load_into_keras(model, init_net, name_map={"fc1": 3})
    with pytest.raises(ValueError, match=r"Dense layer 'fc1' a 2-D Caffe2 FC weight \[out, "
                                         r"in\]. Received: params\['fc1_w'\] of shape \(160,\)"):
        load_into_keras(model, {"fc1_w": np.zeros(160, np.float32)})
    unbuilt = keras.Sequential([keras.layers.Dense(16, name="fc1")])
    with pytest.raises(ValueError, match="'fc1' is not built"):
        load_into_keras(unbuilt, init_net)


# ---------------------------------------------------------------- CNN, NHWC Keras models


@pytest.fixture(scope="module")
def cnn():
    _, params = nets.cnn()
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    return params, x, nets.cnn_forward(x, params)


def _cnn_layers(dropout=False):
    layers = [
        keras.layers.Conv2D(4, 3, padding="same", name="conv1"),  # Caffe2 pad 1
        keras.layers.BatchNormalization(epsilon=1e-3, name="bn1"),
        keras.layers.ReLU(),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
    ]
    if dropout:
        layers.append(keras.layers.Dropout(0.5))
    return layers + [keras.layers.Dense(5, name="fc"), keras.layers.Softmax()]


def _check_cnn(model, params, x, ref, **kwargs):
    report = load_into_keras(model, params, **kwargs)
    out = np.asarray(model(x.transpose(0, 2, 3, 1)))  # the Keras model is NHWC
    np.testing.assert_allclose(out, ref["prob"], rtol=1e-5, atol=1e-5)
    return report


def test_cnn_into_sequential_nhwc_reorders_the_fc_columns(cnn):
    params, x, ref = cnn
    model = keras.Sequential([keras.Input((8, 8, 3)), *_cnn_layers()])
    report = _check_cnn(model, params, x, ref)
    assert report.reordered == {"fc": (4, 4, 4)}
    assert sorted(report.assigned) == sorted(params)
    bn = model.get_layer("bn1")
    np.testing.assert_array_equal(bn.moving_variance.numpy(), params["bn1_riv"])
    np.testing.assert_array_equal(bn.gamma.numpy(), params["bn1_s"])
    np.testing.assert_array_equal(model.get_layer("conv1").kernel.numpy(),
                                  params["conv1_w"].transpose(2, 3, 1, 0))


def test_without_the_reorder_the_output_is_wrong(cnn):
    # The control: the same model with the reorder switched off disagrees with Caffe2.
    params, x, ref = cnn
    model = keras.Sequential([keras.Input((8, 8, 3)), *_cnn_layers()])
    load_into_keras(model, params, flattened_conv={"fc": None})
    out = np.asarray(model(x.transpose(0, 2, 3, 1)))
    assert np.abs(out - ref["prob"]).max() > 1e-2


def test_cnn_into_functional_model_detects_through_dropout(cnn):
    params, x, ref = cnn
    inp = keras.Input((8, 8, 3))
    y = inp
    for layer in _cnn_layers(dropout=True):
        y = layer(y)
    report = _check_cnn(keras.Model(inp, y), params, x, ref)
    assert report.reordered == {"fc": (4, 4, 4)}


class _SubclassedCNN(keras.Model):
    def __init__(self):
        super().__init__()
        self.stack = _cnn_layers()

    def call(self, x):
        for layer in self.stack:
            x = layer(x)
        return x


def test_subclassed_models_say_it_with_flattened_conv(cnn):
    params, x, ref = cnn
    model = _SubclassedCNN()
    model(np.zeros((1, 8, 8, 3), np.float32))
    with pytest.warns(UserWarning, match="flattened_conv"):
        load_into_keras(model, params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = _check_cnn(model, params, x, ref, flattened_conv={"fc": (4, 4, 4)})
    assert report.reordered == {"fc": (4, 4, 4)}


def test_channels_first_keras_models_need_no_reorder(cnn):
    # Built symbolically only: TensorFlow's CPU kernels cannot run NCHW convolutions.
    params, _, _ = cnn
    inp = keras.Input((3, 8, 8))
    y = keras.layers.Conv2D(4, 3, padding="same", data_format="channels_first",
                            name="conv1")(inp)
    y = keras.layers.BatchNormalization(axis=1, epsilon=1e-3, name="bn1")(y)
    y = keras.layers.MaxPooling2D(2, data_format="channels_first")(y)
    flat = keras.layers.Flatten()(y)  # C,H,W order already
    out = keras.layers.Dense(5, name="fc")(flat)
    report = load_into_keras(keras.Model(inp, out), params)
    assert report.reordered == {}
    model = keras.Model(inp, keras.layers.Dense(5, name="fc2")(
        keras.layers.Flatten(data_format="channels_first")(y)))  # Keras flattens H,W,C
    report = load_into_keras(model, params, name_map={"fc2": "fc"})
    assert report.reordered == {"fc2": (4, 4, 4)}


def test_fc_kernel_matches_the_facts_formula():
    w = np.arange(5 * 4 * 3 * 2, dtype=np.float32).reshape(5, 24)
    expected = w.reshape(5, 4, 3, 2).transpose(2, 3, 1, 0).reshape(3 * 2 * 4, 5)
    np.testing.assert_array_equal(fc_kernel(w, (4, 3, 2)), expected)
    np.testing.assert_array_equal(fc_kernel(w), w.T)


# ---------------------------------------------------------------- fp32 masters stay exact


def _assert_masters_exact(model, expected):
    """Each paired weight: its fp32 master bit-equal to the Caffe2 value, the 16-bit weight
    its cast. Unpaired float32 weights (BatchNormalization stays fp32) equal it exactly."""
    import tensorflow as tf

    from tfinit.mixed_precision import parameter_info

    paired = 0
    for variable, value in expected:
        try:
            info = parameter_info(variable)
        except ValueError:
            assert variable.dtype == "float32", variable.path
            assert np.asarray(variable.numpy()).tobytes() == value.tobytes(), variable.path
            continue
        master = np.asarray(info.blob_copy[tf.float32].numpy())
        assert master.dtype == np.float32, variable.path
        assert master.tobytes() == value.tobytes(), variable.path
        np.testing.assert_array_equal(np.asarray(variable.numpy()), value.astype(np.float16))
        paired += 1
    return paired


def _cnn_expected(model, params):
    conv, fc, bn = model.get_layer("conv1"), model.get_layer("fc"), model.get_layer("bn1")
    return [(conv.kernel, params["conv1_w"].transpose(2, 3, 1, 0)),
            (conv.bias, params["conv1_b"]),
            (fc.kernel, fc_kernel(params["fc_w"], (4, 4, 4))), (fc.bias, params["fc_b"]),
            (bn.gamma, params["bn1_s"]), (bn.beta, params["bn1_b"])]


def _unround(params):
    # Values that float16 rounds: the masters must keep every fp32 bit.
    return {k: (v + np.float32(1e-4) * np.arange(v.size, dtype=np.float32).reshape(v.shape))
            .astype(np.float32) for k, v in params.items()}


def test_loading_in_a_pseudo_fp16_scope_sets_every_master_exactly(cnn):
    import tfinit.mixed_precision as mp

    params = _unround(cnn[0])
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = keras.Sequential([keras.Input((8, 8, 3)), *_cnn_layers()])
    report = load_into_keras(model, params)
    assert len(report.assigned) == len(params)
    assert _assert_masters_exact(model, _cnn_expected(model, params)) == 4
    assert not np.array_equal(params["fc_w"].astype(np.float16).astype(np.float32),
                              params["fc_w"])  # the control: fp16 would have rounded them


def test_to_keras_in_a_pseudo_fp16_scope_keeps_masters_exact():
    import tfinit.mixed_precision as mp
    from tfinit.caffe2 import to_keras

    predict, params = nets.cnn(seed=3)
    params = _unround(params)
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = to_keras(predict, params, (3, 8, 8))
    assert _assert_masters_exact(model, _cnn_expected(model, params)) == 4

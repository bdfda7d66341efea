"""Nets built by Caffe2's own model code, converted and checked blob by blob.

``tests/data/realmodels/<net>_*``: ``caffe2.python.models.resnet.create_resnet_32x32``,
``models.shufflenet.ShuffleNetV2Builder`` (0.5x) and the ``examples.char_rnn`` LSTM, exported
with ``mobile_exporter`` and run forward in Caffe2 (PyTorch 1.8.1 wheel, CPU);
``<net>_forward.npz`` holds what was fed and what Caffe2 computed (the ground truth).
"""

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import (
    Caffe2LSTM,
    NetDef,
    Operator,
    check_forward,
    load_init_net,
    read_netdef,
    to_keras,
)

NETS = ("resnet_32x32", "shufflenet_v2", "char_rnn")
LSTM_INPUTS = ("input_blob", "hidden_init", "cell_init", "seq_lengths")


def _files(name):
    folder = nets.realmodels_dir()
    ref = np.load(folder / f"{name}_forward.npz", allow_pickle=False)
    return (folder / f"{name}_predict_net.pb", folder / f"{name}_init_net.pb",
            {key: ref[key] for key in ref.files})


def _stored(ref):
    return sorted(key[5:] for key in ref if key.startswith("blob/"))


def _assert_matches(report, ref):
    assert report.skipped == {}
    assert sorted(c.blob for c in report.blobs) == _stored(ref)
    assert report.ok, str(report)
    assert report.first_divergent is None


def _lstm_shapes(ref):
    return {blob: ref[f"input/{blob}"].shape[1:] for blob in LSTM_INPUTS}


def _lstm_feed(ref, **changes):
    return [changes.get(blob, ref[f"input/{blob}"]) for blob in LSTM_INPUTS]


@pytest.mark.parametrize("name", NETS)
def test_param_init_net_replays_bit_exactly(name):
    folder = nets.realmodels_dir()
    expected = np.load(folder / f"{name}_init_blobs.npz", allow_pickle=False)
    blobs = load_init_net(folder / f"{name}_param_init_net.pb")
    for blob in expected.files:
        assert blobs[blob].dtype == expected[blob].dtype, blob
        assert blobs[blob].tobytes() == expected[blob].tobytes(), blob


# ---------------------------------------------------------------- ResNet-32x32


@pytest.fixture(scope="module")
def resnet():
    return _files("resnet_32x32")


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("input_format", [None, "channels_last"])
def test_resnet_matches_caffe2_blob_by_blob(resnet, input_format):
    predict, init, ref = resnet
    report = check_forward(predict, init, ref, input_format=input_format)
    _assert_matches(report, ref)
    assert [c.blob for c in report.blobs][:3] == ["conv1", "conv1_spatbn", "relu1"]  # net order
    assert "all 10 blobs match Caffe2" in str(report)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_resnet_in_nhwc_order_matches_caffe2(resnet):
    # The same net with order="NHWC" and [O, kh, kw, I] conv weights computes the
    # transposed blobs (the FC reads a 1x1 average, so its columns need no reorder).
    predict, init, ref = resnet
    net, params = nets.to_nhwc(read_netdef(predict), load_init_net(init))
    nhwc_ref = nets.nchw_to_nhwc(ref)
    _assert_matches(check_forward(net, params, nhwc_ref), nhwc_ref)
    model = to_keras(net, params, (32, 32, 3))
    assert not any(isinstance(layer, keras.layers.Permute) for layer in model.layers)
    both = check_forward(net, params, nhwc_ref, input_format="channels_first")
    assert both.ok, str(both)


def test_a_wrong_weight_is_named_as_the_first_divergent_blob(resnet):
    predict, init, ref = resnet
    params = load_init_net(init)
    params["comp_0_spatbn_2_b"] = params["comp_0_spatbn_2_b"] + 0.01
    report = check_forward(predict, params, ref)
    assert not report.ok
    assert report.first_divergent.blob == "comp_0_sum_2"
    assert [c.ok for c in report.blobs][:3] == [True, True, True]
    assert "the first is 'comp_0_sum_2' (op #9 Relu)" in str(report)  # Relu in place


def test_an_intermediate_output_converts_and_matches(resnet):
    predict, init, ref = resnet
    model = to_keras(predict, init, (3, 32, 32), outputs=["conv1"])
    out = np.asarray(model(ref["input/data"]))
    np.testing.assert_allclose(out, ref["blob/conv1"], rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_resnet_trains_and_round_trips_through_a_keras_file(resnet, tmp_path):
    predict, init, ref = resnet
    model = to_keras(predict, init, (3, 32, 32))
    x = ref["input/data"]
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    before = model.get_layer("last_out").kernel.numpy().copy()
    history = model.fit(x, np.array([1, 7]), epochs=2, batch_size=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert not np.array_equal(model.get_layer("last_out").kernel.numpy(), before)
    path = tmp_path / "resnet.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(reloaded(x)), np.asarray(model(x)), rtol=1e-6,
                               atol=1e-7)


# ---------------------------------------------------------------- ShuffleNet v2


@pytest.fixture(scope="module")
def shufflenet():
    return _files("shufflenet_v2")


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_shufflenet_matches_caffe2_blob_by_blob(shufflenet):
    predict, init, ref = shufflenet
    report = check_forward(predict, init, ref)
    _assert_matches(report, ref)
    assert "stage3_stride2_ch_shuffle" in [c.blob for c in report.blobs]


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_shufflenet_default_outputs_hold_concats_split_info(shufflenet):
    predict, init, ref = shufflenet
    net = read_netdef(predict)
    model = to_keras(predict, init, (3, 224, 224))
    outs = model(ref["input/data"])
    assert len(outs) == len(net.external_output) == 17
    for blob, out in zip(net.external_output, outs, strict=True):
        expected = ref[f"blob/{blob}"]
        assert np.asarray(out).dtype == expected.dtype, blob
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_shufflenet_in_nhwc_order_matches_caffe2(shufflenet):
    predict, init, ref = shufflenet
    net, params = nets.to_nhwc(read_netdef(predict), load_init_net(init))
    nhwc_ref = nets.nchw_to_nhwc(ref)
    _assert_matches(check_forward(net, params, nhwc_ref), nhwc_ref)


def test_shufflenet_first_layers_as_an_intermediate_output(shufflenet):
    predict, init, ref = shufflenet
    model = to_keras(predict, init, (3, 224, 224), outputs=["stage2_stride2left_dwconv"])
    np.testing.assert_allclose(np.asarray(model(ref["input/data"])),
                               ref["blob/stage2_stride2left_dwconv"], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- char_rnn (LSTM)


@pytest.fixture(scope="module")
def char_rnn():
    predict, init, ref = _files("char_rnn")
    return predict, init, ref, to_keras(predict, init, _lstm_shapes(ref),
                                        outputs=["LSTM/hidden_state_all", "LSTM/hidden_state_last",
                                                 "LSTM/cell_state_all", "LSTM/cell_state_last",
                                                 "softmax"])


def test_char_rnn_matches_caffe2_blob_by_blob(char_rnn):
    predict, init, ref, _ = char_rnn
    _assert_matches(check_forward(predict, init, ref), ref)


def test_char_rnn_default_outputs_leave_out_the_step_workspaces(char_rnn):
    predict, init, ref, _ = char_rnn
    model = to_keras(predict, init, _lstm_shapes(ref))
    expected = ["LSTM/hidden_state_last", "LSTM/cell_state_all", "LSTM/cell_state_last",
                "softmax_reshaped", "_"]
    for blob, out in zip(expected, model(_lstm_feed(ref)), strict=True):
        np.testing.assert_allclose(np.asarray(out), ref[f"blob/{blob}"], rtol=1e-4, atol=1e-5)
    assert [inp.name for inp in model.inputs] == list(LSTM_INPUTS)
    assert model.inputs[3].dtype == "int32"
    with pytest.raises(ValueError, match="LSTM/step_workspaces.*step workspace"):
        to_keras(predict, init, _lstm_shapes(ref), outputs=["LSTM/step_workspaces"])


def _numpy_lstm(ref, lengths, drop_states=False):
    gates_x = ref["input/input_blob"] @ ref["param/LSTM/i2h_w"].T + ref["param/LSTM/i2h_b"]
    return nets.lstm(gates_x, ref["input/hidden_init"], ref["input/cell_init"],
                     ref["param/LSTM/gates_t_w"], ref["param/LSTM/gates_t_b"], lengths,
                     drop_states=drop_states)


def test_char_rnn_honours_shorter_seq_lengths(char_rnn):
    _, _, ref, model = char_rnn
    lengths = np.array([5, 2], np.int32)
    outs = model(_lstm_feed(ref, seq_lengths=lengths))
    expected = _numpy_lstm(ref, lengths)
    for out, exp in zip(outs[:4], expected, strict=True):
        np.testing.assert_allclose(np.asarray(out), exp, rtol=1e-5, atol=1e-6)
    hidden_all = np.asarray(outs[0])
    np.testing.assert_array_equal(hidden_all[2:, 1], np.repeat(hidden_all[1:2, 1], 3, 0))
    np.testing.assert_allclose(np.asarray(outs[1])[0, 1], hidden_all[1, 1])  # last = step 2
    full = np.asarray(model(_lstm_feed(ref))[0])
    assert np.abs(full[2:, 1] - hidden_all[2:, 1]).max() > 1e-3  # the lengths did something


def test_char_rnn_with_drop_states_zeroes_finished_sequences(char_rnn):
    predict, init, ref, _ = char_rnn
    net = read_netdef(predict)
    step = net.ops[1].args["step_net"]
    step.ops[2].args["drop_states"] = 1
    model = to_keras(net, init, _lstm_shapes(ref), outputs=["LSTM/hidden_state_all"])
    lengths = np.array([3, 4], np.int32)
    out = np.asarray(model(_lstm_feed(ref, seq_lengths=lengths)))
    np.testing.assert_allclose(out, _numpy_lstm(ref, lengths, drop_states=True)[0],
                               rtol=1e-5, atol=1e-6)
    assert np.all(out[3:, 0] == 0) and np.all(out[4:, 1] == 0)


def test_char_rnn_weights_train_and_round_trip(char_rnn, tmp_path):
    import tensorflow as tf

    predict, init, ref, model = char_rnn
    layer = next(layer for layer in model.layers if isinstance(layer, Caffe2LSTM))
    np.testing.assert_array_equal(layer.recurrent_kernel.numpy(), ref["param/LSTM/gates_t_w"].T)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(_lstm_feed(ref))[4] ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    assert len(grads) == 6 and all(g is not None and np.abs(g).max() > 0 for g in grads)
    path = tmp_path / "char_rnn.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    for a, b in zip(reloaded(_lstm_feed(ref)), model(_lstm_feed(ref)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_an_lstm_step_net_other_than_rnn_cells_is_refused(char_rnn):
    predict, init, ref, _ = char_rnn
    net = read_netdef(predict)
    step = net.ops[1].args["step_net"]
    step.ops.insert(2, Operator("Tanh", ("LSTM/gates_t",), ("LSTM/gates_t",)))
    with pytest.raises(ValueError, match=r"op #1 RecurrentNetwork.*unsupported RecurrentNetwork "
                                         r"whose step net is \['FC', 'Sum', 'Tanh', 'LSTMUnit'\]"):
        to_keras(net, init, _lstm_shapes(ref))
    assert isinstance(net, NetDef)

"""The converted char_rnn (RecurrentNetwork) trains with Keras's ``fit``: ``to_keras(...,
time_major=False)`` gives Keras's batch-major form (sequences ``[N, T, D]``, states ``[N, H]``,
``N`` free), every output named after its Caffe2 blob; ``time_major=True`` (the default) keeps
Caffe2's time-major blobs, as ``check_forward`` compares them."""

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import Caffe2LSTM, NetDef, Operator, check_forward, read_netdef, to_keras

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

T, D, H, V = 5, 26, 16, 26  # char_rnn: 5 steps of 26-letter one-hots, 16 hidden units
BATCH_MAJOR = {"input_blob": (None, D), "hidden_init": (H,), "cell_init": (H,),
               "seq_lengths": ()}
DEFAULT_OUTPUTS = ["LSTM/hidden_state_last", "LSTM/cell_state_all", "LSTM/cell_state_last",
                   "softmax_reshaped", "_"]


@pytest.fixture(scope="module")
def char_rnn():
    folder = nets.realmodels_dir()
    ref = np.load(folder / "char_rnn_forward.npz", allow_pickle=False)
    return (folder / "char_rnn_predict_net.pb", folder / "char_rnn_init_net.pb",
            {key: ref[key] for key in ref.files})


def _batch_major_feed(ref):
    """Caffe2's time-major inputs in Keras's batch-major form."""
    return {"input_blob": ref["input/input_blob"].transpose(1, 0, 2),
            "hidden_init": ref["input/hidden_init"][0], "cell_init": ref["input/cell_init"][0],
            "seq_lengths": ref["input/seq_lengths"]}


def _task(n, steps, seed):
    """Random letters as one-hots; the target at each step is the letter itself."""
    letters = np.random.default_rng(seed).integers(0, V, (n, steps))
    x = {"input_blob": np.eye(V, dtype="float32")[letters],
         "hidden_init": np.zeros((n, H), "float32"), "cell_init": np.zeros((n, H), "float32"),
         "seq_lengths": np.full(n, steps, "int32")}
    return x, letters


def _keras_reference(model, x):
    """The same maths with keras.layers.LSTM (gates i, f, g, o; Caffe2's are i, f, o, g) and
    a Dense softmax, from the converted model's (trained) weights."""
    blocks = [0, 1, 3, 2]

    def keras_order(w):
        return np.concatenate([np.split(w, 4, axis=-1)[k] for k in blocks], axis=-1)

    i2h = model.get_layer("LSTM_i2h")
    lstm = next(layer for layer in model.layers if isinstance(layer, Caffe2LSTM))
    out = next(layer for layer in model.layers if layer.name == "char_rnn_blob_0")
    inputs = keras.Input((None, D))
    h0, c0 = keras.Input((H,)), keras.Input((H,))
    seq = keras.layers.LSTM(H, return_sequences=True)(inputs, initial_state=[h0, c0])
    probs = keras.layers.Dense(V, activation="softmax")(seq)
    reference = keras.Model([inputs, h0, c0], probs)
    to_numpy = keras.ops.convert_to_numpy
    reference.layers[3].set_weights([
        keras_order(to_numpy(i2h.kernel)), keras_order(to_numpy(lstm.recurrent_kernel)),
        keras_order(to_numpy(i2h.bias) + to_numpy(lstm.bias))])
    reference.layers[4].set_weights([to_numpy(out.kernel), to_numpy(out.bias)])
    return np.asarray(reference([x["input_blob"], x["hidden_init"], x["cell_init"]]))


def test_batch_major_model_computes_caffe2s_blobs_transposed(char_rnn):
    predict, init, ref = char_rnn
    model = to_keras(predict, init, BATCH_MAJOR, time_major=False)
    assert model.output_names == [blob.replace("/", "_") for blob in DEFAULT_OUTPUTS]
    assert [tuple(inp.shape) for inp in model.inputs] == [(None, None, D), (None, H), (None, H),
                                                         (None,)]
    outs = [np.asarray(out) for out in model(_batch_major_feed(ref))]
    batch_major = {"LSTM/hidden_state_last": lambda a: a[0], "LSTM/cell_state_all":
                   lambda a: a.transpose(1, 0, 2), "LSTM/cell_state_last": lambda a: a[0]}
    # the others come out as Caffe2 holds them
    for blob, out in zip(DEFAULT_OUTPUTS, outs, strict=True):
        expected = batch_major.get(blob, lambda a: a)(ref[f"blob/{blob}"])
        assert out.shape == expected.shape, blob
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5, err_msg=blob)
    probe = to_keras(predict, init, BATCH_MAJOR, ["softmax", "LSTM/hidden_state_all"],
                     time_major=False)
    assert probe.output_names == ["softmax", "LSTM_hidden_state_all"]
    for blob, out in zip(["softmax", "LSTM/hidden_state_all"], probe(_batch_major_feed(ref)),
                         strict=True):
        np.testing.assert_allclose(np.asarray(out), ref[f"blob/{blob}"].transpose(1, 0, 2),
                                   rtol=1e-4, atol=1e-5, err_msg=blob)


def test_check_forward_of_the_batch_major_model_compares_caffe2s_blobs(char_rnn):
    predict, init, ref = char_rnn
    report = check_forward(predict, init, ref, time_major=False)
    default = check_forward(predict, init, ref)
    assert report.ok and default.ok, str(report)
    assert [c.blob for c in report.blobs] == [c.blob for c in default.blobs]
    assert len(report.blobs) == 9 and report.skipped == default.skipped
    assert [c.shape for c in report.blobs] == [c.shape for c in default.blobs]  # Caffe2's
    changed = {**ref, "blob/LSTM/cell_state_last": ref["blob/LSTM/cell_state_last"] + 1e-2}
    wrong = check_forward(predict, init, changed, time_major=False)
    assert wrong.first_divergent.blob == "LSTM/cell_state_last"
    assert sum(not c.ok for c in wrong.blobs) == 1


def test_time_major_default_keeps_caffe2s_layout_with_distinct_output_names(char_rnn):
    predict, init, ref = char_rnn
    shapes = {blob: ref[f"input/{blob}"].shape[1:] for blob in BATCH_MAJOR}
    model = to_keras(predict, init, shapes)
    names = model.output_names
    assert len(set(names)) == len(names) == 5
    assert names[:3] == ["LSTM_hidden_state_last", "LSTM_cell_state_all", "LSTM_cell_state_last"]
    feed = [ref[f"input/{blob}"] for blob in BATCH_MAJOR]
    for blob, out in zip(DEFAULT_OUTPUTS, model(feed), strict=True):
        np.testing.assert_allclose(np.asarray(out), ref[f"blob/{blob}"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # fit twice, a .keras file: over 1 s on 2 cores
def test_fit_with_two_batch_sizes_lowers_the_loss_and_round_trips(char_rnn, tmp_path):
    predict, init, _ = char_rnn
    x, y = _task(24, T, seed=0)
    for batch_size in (4, 6):
        keras.utils.set_random_seed(0)
        model = to_keras(predict, init, BATCH_MAJOR, outputs=["softmax"], time_major=False)
        model.compile(optimizer=keras.optimizers.Adam(0.05),
                      loss="sparse_categorical_crossentropy")
        history = keras.callbacks.History()
        stop = keras.callbacks.EarlyStopping(monitor="loss", patience=2)
        model.fit(x, y, batch_size=batch_size, epochs=4, shuffle=False, verbose=0,
                  callbacks=[history, stop])
        losses = history.history["loss"]
        assert len(losses) == 4 and all(np.isfinite(losses)), losses
        assert losses[-1] < 0.8 * losses[0], (batch_size, losses)
    longer, _ = _task(3, T + 2, seed=1)  # another batch size and sequence length
    probs = np.asarray(model(longer))
    assert probs.shape == (3, T + 2, V)
    np.testing.assert_allclose(probs, _keras_reference(model, longer), rtol=1e-4, atol=1e-5)
    path = tmp_path / "char_rnn.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.output_names == ["softmax"]
    np.testing.assert_array_equal(np.asarray(reloaded(longer)), probs)


def test_shorter_seq_lengths_keep_the_last_state_batch_major(char_rnn):
    predict, init, ref = char_rnn
    model = to_keras(predict, init, BATCH_MAJOR, time_major=False,
                     outputs=["LSTM/hidden_state_all", "LSTM/hidden_state_last"])
    feed = {**_batch_major_feed(ref), "seq_lengths": np.array([5, 2], np.int32)}
    every, last = (np.asarray(out) for out in model(feed))
    gates_x = ref["input/input_blob"] @ ref["param/LSTM/i2h_w"].T + ref["param/LSTM/i2h_b"]
    expected = nets.lstm(gates_x, ref["input/hidden_init"], ref["input/cell_init"],
                         ref["param/LSTM/gates_t_w"], ref["param/LSTM/gates_t_b"],
                         feed["seq_lengths"])
    np.testing.assert_allclose(every, expected[0].transpose(1, 0, 2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last, expected[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(last[1], every[1, 1])  # the second sequence ended at step 2


@pytest.mark.parametrize("shape", [[-1, 26], [-1, 0, 13], [0, 0, -1], [0, -1]])
def test_a_reshape_of_time_major_blobs_runs_as_caffe2s_with_a_free_batch(char_rnn, shape):
    # N is unknown when the model is built: the reshape (and its old shape) is done at run
    # time on Caffe2's time-major blob, and comes out as Caffe2 holds it.
    predict, init, ref = char_rnn
    net = read_netdef(predict)
    net.ops[4].args["shape"] = np.array(shape)
    model = to_keras(net, init, BATCH_MAJOR, ["softmax_reshaped", "_"], time_major=False)
    reshaped, old = (np.asarray(out) for out in model(_batch_major_feed(ref)))
    softmax = ref["blob/softmax"]
    target = [softmax.shape[k] if v == 0 else v for k, v in enumerate(shape)]
    np.testing.assert_allclose(reshaped, softmax.reshape(target), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(old, ref["blob/_"])


def test_what_has_no_batch_major_form_is_refused(char_rnn):
    predict, init, ref = char_rnn
    with pytest.raises(TypeError, match=r"`time_major` must be a bool.*time_major='no'"):
        to_keras(predict, init, BATCH_MAJOR, time_major="no")
    with pytest.raises(ValueError, match=r"input_shape` for 'hidden_init' \(a RecurrentNetwork"
                                         r"'s state\) must be \(H,\).*Received: \(1, 16\)"):
        to_keras(predict, init, {**BATCH_MAJOR, "hidden_init": (1, H)}, time_major=False)
    mlp = nets.models_dir()
    with pytest.raises(ValueError, match=r"`time_major=False` takes a net with a "
                                         r"RecurrentNetwork op.*Received: time_major=False"):
        to_keras(mlp / "mlp_predict_net.pb", mlp / "mlp_init_net.pb", (10,), time_major=False)
    net = read_netdef(predict)  # a data input added to the sequence: no known form
    ops = [Operator("Add", ("input_blob", "bias_input"), ("shifted",)), *net.ops]
    ops[1] = Operator("FC", ("shifted", *net.ops[0].inputs[1:]), net.ops[0].outputs,
                      net.ops[0].args)
    changed = NetDef(ops=ops, external_input=[*net.external_input, "bias_input"],
                     external_output=net.external_output)
    with pytest.raises(ValueError, match=r"data input\(s\) \['bias_input'\] are "
                                         r"neither a RecurrentNetwork's sequence"):
        to_keras(changed, init, {**BATCH_MAJOR, "bias_input": (None, D)}, time_major=False)


def test_recurrent_network_links_of_unequal_lengths_are_refused(char_rnn):
    """Caffe2 refuses a RecurrentNetwork whose `link_internal` and `link_external` differ in
    length; the converter did not look and paired the links it had."""
    predict, init, _ = char_rnn
    net = read_netdef(predict)
    index = next(i for i, op in enumerate(net.ops) if op.type == "RecurrentNetwork")
    op = net.ops[index]
    args = {**op.args, "link_external": [*op.args["link_external"], "extra"]}
    ops = list(net.ops)
    ops[index] = Operator(op.type, op.inputs, op.outputs, args, op.name, op.engine)
    changed = NetDef(ops=ops, external_input=net.external_input,
                     external_output=net.external_output)
    with pytest.raises(ValueError, match=r"RecurrentNetwork's arguments `link_internal`, "
                                         r"`link_external` must be of one length"):
        to_keras(changed, init, BATCH_MAJOR, time_major=False)

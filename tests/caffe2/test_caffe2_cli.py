"""`tfinit inspect` and `tfinit convert` (run in-process through tfinit.cli.main)."""

import keras
import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import NetDef, Operator
from tfinit.cli import main


def test_inspect_init_net_prints_every_op_and_blob_statistics(capsys):
    models = nets.models_dir()
    assert main(["inspect", str(models / "mlp_init_net.pb")]) == 0
    out = capsys.readouterr().out
    assert "op #0 GivenTensorFill() -> fc1_w [shape=ints [16, 10], values=floats[160]]" in out
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)["param/fc1_w"]
    line = next(l for l in out.splitlines() if l.strip().startswith("fc1_w:"))
    assert "shape [16, 10] dtype float32" in line
    assert f"min {ref.min():.6g} max {ref.max():.6g}" in line
    assert "data: shape [1, 1] dtype float32" in out


def test_inspect_predict_net_lists_ops(capsys):
    assert main(["inspect", str(nets.models_dir() / "mlp_predict_net.pb")]) == 0
    out = capsys.readouterr().out
    assert "op #0 FC(data, fc1_w, fc1_b) -> fc1" in out
    assert "external_output: prob" in out


def test_inspect_predict_net_with_its_init_net_shows_parameter_shapes(capsys):
    models = nets.models_dir()
    assert main(["inspect", str(models / "mlp_predict_net.pb"),
                 "--init-net", str(models / "mlp_init_net.pb")]) == 0
    assert "op #0 FC(data[1, 1], fc1_w[16, 10], fc1_b[16]) -> fc1" in capsys.readouterr().out


def test_inspect_marks_random_fills(tmp_path, capsys):
    path = tmp_path / "init.pb"
    path.write_bytes(NetDef(ops=[Operator("XavierFill", (), ("w",), {"shape": [3, 4]})])
                     .to_bytes())
    assert main(["inspect", str(path), "--seed", "1"]) == 0
    assert "w: shape [3, 4] dtype float32" in capsys.readouterr().out


def test_convert_writes_a_keras_model(tmp_path, capsys):
    predict, params = nets.cnn()
    init_path, predict_path = tmp_path / "init_net.pb", tmp_path / "predict_net.pb"
    init_path.write_bytes(nets.given_tensor_init_net(params).to_bytes())
    predict_path.write_bytes(predict.to_bytes())
    out = tmp_path / "cnn.keras"
    assert main(["convert", str(init_path), str(predict_path), str(out),
                 "--input-shape", "3,8,8"]) == 0
    assert "wrote" in capsys.readouterr().out
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
    model = keras.saving.load_model(out)
    np.testing.assert_allclose(np.asarray(model(x)), nets.cnn_forward(x, params)["prob"],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argv, text", [
    (["inspect", "/nonexistent.pb"], "No such file"),
    (["inspect", "GARBAGE"], "not a valid Caffe2 NetDef"),
    (["inspect", "EMPTY"], "is empty (0 bytes)"),
    (["convert", "a.pb", "b.pb", "out.keras"], "--input-shape is required"),
    (["convert", "a.pb", "b.pb", "out.keras", "--input-shape", "a=1", "--input-shape", "2"],
     "NAME=dims each"),
    (["convert", "a.pb", "b.pb", "out.keras", "--input-shape", "3,x"],
     "Argument `--input-shape` must be comma-separated ints such as 3,224,224 (or NAME=2,26 "
     "per data input). Received: --input-shape=3,x"),
    (["convert", "a.pb", "b.pb", "out.h5", "--input-shape", "3"],
     "Argument `output` must end in .keras. Received: output=out.h5"),
])
def test_bad_arguments_exit_nonzero_with_one_line(argv, text, capsys, tmp_path):
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xff\xff not a protobuf")
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    argv = [{"GARBAGE": str(garbage), "EMPTY": str(empty)}.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err and "Traceback" not in err


def test_convert_reports_unsupported_ops_in_one_line(tmp_path, capsys):
    predict, params = nets.cnn()
    predict.ops.append(Operator("Im2Col", ("prob",), ("n",)))
    (tmp_path / "i.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    (tmp_path / "p.pb").write_bytes(predict.to_bytes())
    assert main(["convert", str(tmp_path / "i.pb"), str(tmp_path / "p.pb"),
                 str(tmp_path / "o.keras"), "--input-shape", "3,8,8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Im2Col (op #6)" in err


def test_convert_with_the_two_nets_swapped_says_so_in_one_line(tmp_path, capsys):
    """Issue 40, 6: PREDICT INIT OUT (to_keras's order) names the swap and the fix."""
    predict, params = nets.cnn()
    (tmp_path / "i.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    (tmp_path / "p.pb").write_bytes(predict.to_bytes())
    out = str(tmp_path / "o.keras")
    assert main(["convert", str(tmp_path / "p.pb"), str(tmp_path / "i.pb"), out,
                 "--input-shape", "3,8,8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "look swapped" in err and "'Conv' is not an operator tfinit replays" in err
    assert f"tfinit convert {tmp_path / 'i.pb'} {tmp_path / 'p.pb'} {out}" in err
    assert main(["convert", str(tmp_path / "i.pb"), str(tmp_path / "p.pb"), out,
                 "--input-shape", "3,8,8"]) == 0  # the fix it gives works


def test_convert_says_when_the_model_needs_tfinit_to_load(tmp_path, capsys):
    predict, _ = nets.padded_pools()
    (tmp_path / "i.pb").write_bytes(NetDef(name="no_params").to_bytes())
    (tmp_path / "p.pb").write_bytes(predict.to_bytes())
    assert main(["convert", str(tmp_path / "i.pb"), str(tmp_path / "p.pb"),
                 str(tmp_path / "o.keras"), "--input-shape", "3,8,7"]) == 0
    out = capsys.readouterr().out
    assert "Caffe2Pooling2D" in out and "import tfinit.caffe2" in out


def _real(name):
    folder = nets.realmodels_dir()
    return [str(folder / f"{name}_init_net.pb"), str(folder / f"{name}_predict_net.pb")]


def test_convert_check_reports_every_blob_of_a_real_net(tmp_path, capsys):
    out = tmp_path / "char_rnn.keras"
    forward = str(nets.realmodels_dir() / "char_rnn_forward.npz")
    assert main(["convert", *_real("char_rnn"), str(out), "--check", forward]) == 0
    text = capsys.readouterr().out
    for blob in ("LSTM/i2h", "LSTM/hidden_state_all", "softmax_reshaped", "_"):
        assert any(line.startswith(blob + " ") and line.endswith(" ok")
                   for line in text.splitlines()), blob
    assert "all 9 blobs match Caffe2" in text and "Caffe2LSTM" in text
    assert out.exists()


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_the_readmes_convert_example_prints_what_the_readme_shows(tmp_path, capsys,
                                                                   monkeypatch):
    """Every line of the README's `tfinit convert` block up to its "..." is printed."""
    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    block = readme.split("$ tfinit convert ", 1)[1].split("```", 1)[0].splitlines()
    command, shown = block[0].split(), block[1:]
    monkeypatch.chdir(REPO / "tfinit" / "caffe2" / "examples")
    command[2] = str(tmp_path / command[2])  # the output file
    assert main(["convert", *command]) == 0
    printed = capsys.readouterr().out.replace(str(tmp_path) + "/", "").splitlines()
    for line in shown:
        head = line.split("...")[0]
        assert any(p.startswith(head) for p in printed), (line, printed)


def test_convert_batch_major_checks_against_caffe2s_time_major_blobs(tmp_path, capsys):
    out = tmp_path / "char_rnn.keras"
    forward = str(nets.realmodels_dir() / "char_rnn_forward.npz")
    assert main(["convert", *_real("char_rnn"), str(out), "--batch-major", "--check",
                 forward]) == 0
    text = capsys.readouterr().out
    assert "all 9 blobs match Caffe2" in text and "Caffe2TimeMajor" in text
    assert "input [(None, None, 26), (None, 16), (None, 16), (None,)]" in text
    model = keras.saving.load_model(out)
    assert model.output_names == ["LSTM_hidden_state_last", "LSTM_cell_state_all",
                                  "LSTM_cell_state_last", "softmax_reshaped", "_"]


def test_convert_check_exits_nonzero_past_the_tolerance(tmp_path, capsys):
    folder = nets.realmodels_dir()
    ref = dict(np.load(folder / "char_rnn_forward.npz", allow_pickle=False))
    ref["blob/char_rnn_blob_0"] = ref["blob/char_rnn_blob_0"] + 1e-2
    forward = tmp_path / "forward.npz"
    np.savez(forward, **ref)
    shapes = ["--input-shape", "input_blob=2,26", "--input-shape", "hidden_init=2,16",
              "--input-shape", "cell_init=2,16", "--input-shape", "seq_lengths="]
    assert main(["convert", *_real("char_rnn"), str(tmp_path / "m.keras"), *shapes,
                 "--check", str(forward)]) == 1
    text = capsys.readouterr().out
    assert "1 of 9 blobs diverge; the first is 'char_rnn_blob_0' (op #2 FC)" in text
    assert "DIVERGES" in text

"""Progress of long Caffe2 work as Keras's fit shows it: ``verbose=`` in the library (silent
by default), ``keras.utils.Progbar`` lines on stderr in the CLI (``--progress``)."""

import re

import pytest

import caffe2_nets as nets
from tfinit.caffe2 import load_init_net, load_into_keras, read_netdef, to_keras
from tfinit.cli import main

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(text):
    """Progbar output without its colours; each redraw on a line of its own."""
    return _ANSI.sub("", text).replace("\b", "").replace("\r", "\n")


@pytest.fixture
def cnn_files(tmp_path):
    predict, params = nets.cnn()
    init_path, predict_path = tmp_path / "init_net.pb", tmp_path / "predict_net.pb"
    init_path.write_bytes(nets.given_tensor_init_net(params).to_bytes())
    predict_path.write_bytes(predict.to_bytes())
    return init_path, predict_path


def _final(text, total, unit):
    """The Progbar's last line for ``total`` units of ``unit``, e.g. '8/8 ━━━ 0s 1ms/op'."""
    lines = [line for line in _plain(text).splitlines()
             if re.match(rf"\s*{total}/{total} ━+ \d+s .*/{unit}\b", line)]
    assert len(lines) == 1, f"not one finished {total}/{total} {unit} bar in {text!r}"
    return lines[0]


def test_the_library_prints_nothing_by_default(cnn_files, capsys):
    init_path, predict_path = cnn_files
    params = load_init_net(init_path)
    model = to_keras(predict_path, init_path, (3, 8, 8))
    load_into_keras(model, params)
    assert capsys.readouterr() == ("", "")


def test_verbose_1_shows_a_progbar_while_an_init_net_is_read_and_replayed(cnn_files, capsys):
    init_path, _ = cnn_files
    load_init_net(init_path, verbose=1)
    out, err = capsys.readouterr()
    assert err == ""
    size = init_path.stat().st_size
    assert f"Reading {init_path}: {size} bytes" in out
    _final(out, size, "B")
    assert "Replaying the 8 ops of init net 'init'" in out
    _final(out, 8, "op")


def test_read_netdef_reports_the_bytes_op_by_op(cnn_files):
    init_path, _ = cnn_files
    seen = []
    read_netdef(init_path, progress=lambda done, total: seen.append((done, total)))
    size = init_path.stat().st_size
    assert {total for _, total in seen} == {size}
    done = [d for d, _ in seen]
    assert done[0] == 0 and done[-1] == size and done == sorted(done)
    assert len(set(done)) == 1 + 8 + 1  # the start, where each of the 8 ops begins, the end


def test_verbose_2_prints_one_line_when_done(cnn_files, capsys):
    init_path, _ = cnn_files
    load_init_net(init_path, verbose=2)
    lines = _plain(capsys.readouterr().out).splitlines()
    assert "Replaying the 8 ops of init net 'init'" in lines
    assert any(re.fullmatch(r"8/8 - \d+s - .*/op", line.strip()) for line in lines), lines
    assert not any(re.match(r"\s*[1-7]/8 ", line) for line in lines)


def test_to_keras_shows_the_ops_converted_and_the_layers_assigned(cnn_files, capsys):
    init_path, predict_path = cnn_files
    to_keras(predict_path, init_path, (3, 8, 8), verbose=1)
    out = capsys.readouterr().out
    assert "Converting the 6 ops of predict net 'cnn'" in out
    _final(out, 6, "op")
    assert "Assigning Caffe2 parameters to the 3 layers of model 'cnn' that take them" in out
    _final(out, 3, "layer")


@pytest.mark.parametrize("verbose", [3, -1, "yes", 1.0])
def test_verbose_takes_what_keras_fit_takes(verbose):
    with pytest.raises(ValueError, match="Argument `verbose` must be 0"):
        load_init_net(nets.given_tensor_init_net({}), verbose=verbose)


def test_cli_progress_goes_to_stderr_with_the_right_totals(cnn_files, tmp_path, capsys):
    init_path, predict_path = cnn_files
    out_path = tmp_path / "cnn.keras"
    assert main(["convert", str(init_path), str(predict_path), str(out_path),
                 "--input-shape", "3,8,8", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("wrote ") and "━" not in out
    _final(err, init_path.stat().st_size, "B")
    _final(err, 8, "op")
    _final(err, 6, "op")
    _final(err, 3, "layer")
    assert main(["inspect", str(init_path), "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "blobs (8):" in out and "━" not in out
    _final(err, 8, "op")


@pytest.mark.parametrize("flag", ["--quiet", None])
def test_cli_is_quiet_with_quiet_or_off_a_terminal(cnn_files, tmp_path, capsys, flag):
    init_path, predict_path = cnn_files
    argv = ["convert", str(init_path), str(predict_path), str(tmp_path / "m.keras"),
            "--input-shape", "3,8,8"]
    assert main(argv + ([flag] if flag else [])) == 0  # capsys: stderr is not a terminal
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("wrote ")


def test_cli_progress_and_quiet_exclude_each_other(capsys):
    assert main(["inspect", "x.pb", "--progress", "--quiet"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err

"""Model files are untrusted input: sizes over the memory limit are refused before anything
is allocated (fills of an init net, blobs of a predict net), with the op, its index and the
bytes; ``max_bytes`` moves the limit."""

import os
import resource
import time

import numpy as np
import pytest

import caffe2_nets as nets
from tfinit.caffe2 import NetDef, Operator, fill, load_init_net, to_keras
from tfinit.caffe2._memory import Limit, available_bytes
from tfinit.cli import main

TERA = 4 * 10**12  # bytes of nets.HUGE in float32 / int32


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kB


def _refused(call):
    """The ValueError ``call`` raises, checked to come fast and without allocating."""
    before, start = _peak_rss(), time.perf_counter()
    with pytest.raises(ValueError) as info:
        call()
    assert time.perf_counter() - start < 1.0
    assert _peak_rss() - before < 200 * 2**20
    return str(info.value)


def test_available_memory_is_measured():
    available = available_bytes()
    assert available is not None and 2**20 < available
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert available <= total


@pytest.mark.parametrize("limit, usage, cache, expected", [
    ("1000", "600", 100, 500),  # limit - (usage - reclaimable page cache)
    ("1000", "1200", 0, 0),
    ("max", "600", 0, None),  # cgroup v2: no limit
    (str(2**63 - 4096), "600", 0, None),  # cgroup v1: no limit
])
def test_a_cgroup_memory_limit_lowers_what_is_available(tmp_path, monkeypatch, limit, usage,
                                                        cache, expected):
    from tfinit.caffe2 import _memory

    files = [tmp_path / name for name in ("memory.max", "memory.current", "memory.stat")]
    for path, text in zip(files, (limit, usage, f"anon 5\ninactive_file {cache}\n"), strict=True):
        path.write_text(text + "\n")
    monkeypatch.setattr(_memory, "_CGROUPS", ((*map(str, files), "inactive_file"),))
    assert _memory._cgroup() == expected
    if expected is not None:  # far below MemAvailable: the cgroup's figure is the one used
        assert _memory.available_bytes() == expected


@pytest.mark.parametrize("op_type, args, dtype", [
    ("XavierFill", {}, "float32"),
    ("ConstantFill", {"value": 1.0}, "float32"),
    ("GaussianFill", {}, "float32"),
    ("UniformIntFill", {"min": 0, "max": 9}, "int32"),
    ("DiagonalFill", {"value": 2.0}, "float32"),
])
def test_an_init_net_fill_over_the_memory_available_is_refused_before_allocating(
        tmp_path, op_type, args, dtype):
    path = tmp_path / "init_net.pb"
    path.write_bytes(nets.huge_fill_init_net(op_type, **args).to_bytes())
    message = _refused(lambda: load_init_net(path))
    assert message.startswith(f"init net op #1 ({op_type} -> w): {op_type}: its {dtype} output "
                              "of shape [1000000, 1000000] needs 4000000000000 bytes (4.0 TB)")
    assert "with the 8 bytes of the blobs before it" not in message  # a file's values: free
    assert "of memory available" in message and "Received: shape=[1000000, 1000000]" in message


def test_a_string_constant_fill_counts_its_object_pointers():
    message = _refused(lambda: fill("ConstantFill", shape=nets.HUGE, dtype="STRING",
                                    value="x"))
    assert "its object output of shape [1000000, 1000000] needs 8000000000000 bytes" in message


def test_a_shape_from_an_input_blob_is_checked_too():
    net = NetDef(ops=[
        Operator("GivenTensorInt64Fill", (), ("dims",), {"shape": [2], "values": nets.HUGE}),
        Operator("ConstantFill", ("dims",), ("w",), {"input_as_shape": 1}),
    ])
    assert "init net op #1 (ConstantFill -> w)" in _refused(lambda: load_init_net(net))


def test_max_bytes_is_the_limit_exactly():
    assert fill("ConstantFill", shape=[10], value=1.0, max_bytes=40).tolist() == [1.0] * 10
    with pytest.raises(ValueError, match=r"needs 40 bytes, more than the limit max_bytes=39;"):
        fill("ConstantFill", shape=[10], max_bytes=39)


def test_the_default_limit_is_the_memory_available():
    over = Limit().bytes // 4  # int64 elements: twice what is available
    message = _refused(lambda: fill("ConstantFill", shape=[over], dtype="INT64"))
    assert f"needs {over * 8} bytes" in message and "of memory available" in message


def test_the_replay_counts_what_its_generated_blobs_hold():
    net = NetDef(ops=[Operator("ConstantFill", (), (f"b{k}",), {"shape": [10]})
                      for k in range(3)])
    assert len(load_init_net(net, max_bytes=120)) == 3
    with pytest.raises(ValueError) as info:
        load_init_net(net, max_bytes=119)
    assert str(info.value).startswith("init net op #2 (ConstantFill -> b2)")
    assert "with the 80 bytes of the blobs before it, that is more than the limit" in str(
        info.value)


def test_values_a_file_holds_are_not_counted_but_conversions_are():
    values = np.arange(100, dtype=np.float32)
    net = NetDef(ops=[
        Operator("GivenTensorFill", (), ("v",), {"shape": [100], "values": values}),
        Operator("FloatToHalf", ("v",), ("h",)),
    ])
    assert load_init_net(net, max_bytes=200)["h"].dtype == np.float16
    with pytest.raises(ValueError, match=r"op #1 \(FloatToHalf -> h\).*needs 200 bytes"):
        load_init_net(net, max_bytes=199)


@pytest.mark.parametrize("value, kind", [(0, ValueError), (-5, ValueError), (1e9, TypeError),
                                         ("1G", TypeError), (True, TypeError)])
def test_max_bytes_must_be_a_positive_int(value, kind):
    with pytest.raises(kind, match="Argument `max_bytes`"):
        load_init_net(NetDef(), max_bytes=value)


@pytest.mark.parametrize("kind, where, shape", [
    ("conv", "op #1 Conv -> ['y']: one example of its input 'x' padded",
     "(N, 3, 2000008, 2000008)"),
    ("pool", "op #1 MaxPool -> ['y']: one example of its input 'x' padded",
     "(N, 3, 2000008, 2000008)"),
    ("broadcast", "op #1 Mul -> ['y']: one example of its output 'y'", "(N, 1000000, 1000000)"),
])
def test_a_predict_net_whose_blobs_explode_is_refused_while_planned(tmp_path, kind, where,
                                                                    shape):
    predict, params = nets.exploding_predict_net(kind)
    path = tmp_path / "predict_net.pb"
    path.write_bytes(predict.to_bytes())
    inputs = {"a": (1, 10**6), "c": (10**6, 1)} if kind == "broadcast" else (3, 8, 8)
    message = _refused(lambda: to_keras(path, params, inputs))
    assert message.startswith(f"to_keras: {where} (shape {shape}, float32) needs ")
    assert "bytes (48.0 TB)" in message or "bytes (4.0 TB)" in message
    assert f"Received: {predict.ops[1].type} with " in message


def test_max_bytes_moves_the_predict_net_limit():
    predict, params = nets.exploding_predict_net("conv")
    predict.ops[1].args["pad"] = 100  # padded input: 3 x 208 x 208 float32 per example
    needed = 3 * 208 * 208 * 4
    with pytest.raises(ValueError, match=f"needs {needed} bytes .*max_bytes={needed - 1};"):
        to_keras(predict, params, (3, 8, 8), max_bytes=needed - 1)
    model = to_keras(predict, params, (3, 8, 8), max_bytes=needed)
    assert model.output_shape == (None, 2, 208, 208)


def test_cli_exits_2_with_one_line_for_a_huge_fill(tmp_path, capsys):
    path = tmp_path / "init_net.pb"
    path.write_bytes(nets.huge_fill_init_net("ConstantFill").to_bytes())
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "init net op #1 (ConstantFill -> w)" in err and "4000000000000 bytes" in err


def test_cli_exits_2_with_one_line_for_an_exploding_predict_net(tmp_path, capsys):
    predict, params = nets.exploding_predict_net("conv")
    (tmp_path / "i.pb").write_bytes(nets.given_tensor_init_net(params).to_bytes())
    (tmp_path / "p.pb").write_bytes(predict.to_bytes())
    argv = ["convert", str(tmp_path / "i.pb"), str(tmp_path / "p.pb"),
            str(tmp_path / "o.keras"), "--input-shape", "3,8,8"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "op #1 Conv" in err and "--max-bytes" in err
    assert main([*argv, "--max-bytes", "64T"]) == 0  # the caller's limit: it converts
    assert "output (None, 2, 2000008, 2000008)" in capsys.readouterr().out


@pytest.mark.parametrize("text, expected", [("4000", 4000), ("64G", 64 * 10**9),
                                            ("64GB", 64 * 10**9), ("2KiB", 2048),
                                            ("1TiB", 2**40)])
def test_cli_max_bytes_takes_units(tmp_path, text, expected, capsys):
    net = NetDef(ops=[Operator("ConstantFill", (), ("w",), {"shape": [expected // 4]})])
    path = tmp_path / "init.pb"
    path.write_bytes(net.to_bytes())
    below = NetDef(ops=[Operator("ConstantFill", (), ("w",), {"shape": [expected // 4 + 1]})])
    (tmp_path / "over.pb").write_bytes(below.to_bytes())
    assert main(["inspect", str(tmp_path / "over.pb"), "--max-bytes", text]) == 2
    assert f"max_bytes={expected}" in capsys.readouterr().err
    if expected <= 10**6:  # small enough to fill here
        assert main(["inspect", str(path), "--max-bytes", text]) == 0


@pytest.mark.parametrize("text", ["0", "-3", "lots", "5X"])
def test_cli_refuses_a_bad_max_bytes(text, capsys):
    assert main(["inspect", "x.pb", "--max-bytes", text]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfinit: error: Argument `--max-bytes` must be a ")
    assert err.endswith(f"Received: --max-bytes={text}") and len(err.splitlines()) == 1

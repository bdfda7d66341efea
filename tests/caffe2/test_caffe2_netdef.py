"""tfinit.caffe2.read_netdef: decoding Caffe2 NetDefs without caffe2, and the fuzz test."""

import random
import time

import numpy as np
import pytest

from caffe2_nets import cnn, models_dir
from tfinit.caffe2 import DeviceOption, NetDef, Operator, read_netdef
from tfinit.caffe2._netdef import make_arg

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


def test_reads_the_exported_mlp_init_net():
    models = models_dir()
    net = read_netdef(models / "mlp_init_net.pb")
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)
    assert [op.type for op in net.ops] == ["GivenTensorFill"] * 7
    assert [op.outputs for op in net.ops][-1] == ("data",)  # the exporter's placeholder
    fc1 = net.ops[0]
    assert fc1.outputs == ("fc1_w",) and fc1.inputs == ()
    assert fc1.args["shape"].dtype == np.int64 and fc1.args["shape"].tolist() == [16, 10]
    assert fc1.args["values"].dtype == np.float32
    np.testing.assert_array_equal(fc1.args["values"].reshape(16, 10), ref["param/fc1_w"])


def test_reads_the_predict_net_and_its_pbtxt_alike():
    models = models_dir()
    net = read_netdef(models / "mlp_predict_net.pb")
    assert net.name == "mlp_default_1"
    assert [op.type for op in net.ops] == ["FC", "Relu", "FC", "Relu", "FC", "Softmax"]
    assert net.ops[0].inputs == ("data", "fc1_w", "fc1_b") and net.ops[0].outputs == ("fc1",)
    assert net.ops[0].args == {"order": b"NCHW", "use_cudnn": 1, "cudnn_exhaustive_search": 0}
    assert net.ops[1].engine == "CUDNN"
    assert net.external_input == ["data", "fc1_w", "fc1_b", "fc2_w", "fc2_b", "fc3_w", "fc3_b"]
    assert net.external_output == ["prob"]
    assert read_netdef(models / "mlp_predict_net.pbtxt") == net
    assert read_netdef(models.joinpath("mlp_predict_net.pb").read_bytes()) == net


def test_argument_fields_keep_their_types():
    # Caffe2 ops read one protobuf field; the decoded Python type says which.
    assert make_arg("f", 0.1) == float(np.float32(0.1)) != 0.1  # f is a 32-bit float
    assert make_arg("i", True) == 1 and isinstance(make_arg("i", True), int)
    assert make_arg("s", "NCHW") == b"NCHW"
    assert make_arg("ints", [1, 2]).dtype == np.int64
    assert make_arg("floats", [1.0, 1e100]).tolist() == [1.0, np.inf]
    assert make_arg("strings", ["a", b"b"]) == [b"a", b"b"]
    assert make_arg("name_only", None) is None
    with pytest.raises(TypeError, match="'mixed'"):
        make_arg("mixed", [1, 2.5])


def test_round_trip_with_device_options_and_nested_nets():
    inner = NetDef(name="inner", ops=[Operator("Relu", ("a",), ("b",))])
    net = NetDef(
        name="outer",
        ops=[Operator("GaussianFill", (), ("w",), {"shape": [2, 3], "std": 0.5},
                      name="g", engine="X", device_option=DeviceOption(random_seed=7))],
        external_input=["x"], external_output=["w"],
        device_option=DeviceOption(device_type=1, device_id=2, random_seed=0),
        args={"sub": inner, "subs": [inner, inner], "note": b"\xff\x00"},
    )
    back = read_netdef(net.to_bytes())
    assert back.device_option == DeviceOption(device_type=1, device_id=2, random_seed=0)
    op = back.ops[0]
    assert op.device_option.random_seed == 7 and (op.name, op.engine) == ("g", "X")
    assert op.args["shape"].tolist() == [2, 3] and op.args["std"] == 0.5
    assert back.args["sub"] == inner and back.args["subs"] == [inner, inner]
    assert back.args["note"] == b"\xff\x00"
    # An unset random_seed is None, not 0: Caffe2 then seeds from the clock.
    assert read_netdef(NetDef(ops=[Operator("Relu", device_option=DeviceOption())])
                       .to_bytes()).ops[0].device_option.random_seed is None


def test_bad_sources():
    with pytest.raises(TypeError, match="path, bytes or a NetDef"):
        read_netdef(42)
    with pytest.raises(FileNotFoundError):
        read_netdef("/nonexistent/init_net.pb")
    with pytest.raises(ValueError, match="not a valid Caffe2 NetDef"):
        read_netdef(b"\xff\xff\xff")


def test_invalid_utf8_in_a_blob_name_is_a_value_error():
    data = bytearray(models_dir().joinpath("mlp_predict_net.pb").read_bytes())
    data[data.index(b"fc1_w")] = 0xFF  # proto2 parsers accept it; tfinit must not pass bytes on
    with pytest.raises(ValueError, match="not valid UTF-8"):
        read_netdef(bytes(data))


def _fuzz_cases(data, count, rng):
    for trial in range(count):
        if trial % 2:
            yield bytes(data[: rng.randrange(len(data))])
        else:
            mutated = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                index = rng.randrange(len(mutated))
                mutated[index] ^= 1 << rng.randrange(8)
            yield bytes(mutated)


@pytest.mark.parametrize("name", ["mlp_init_net.pb", "mlp_predict_net.pb", "cnn_predict"])
def test_fuzz_truncated_and_bit_flipped_files_raise_value_error_only(name):
    if name == "cnn_predict":
        data = cnn()[0].to_bytes()
    else:
        data = models_dir().joinpath(name).read_bytes()
    rng = random.Random(20260)
    outcomes = {"decoded": 0, "ValueError": 0}
    for case in _fuzz_cases(data, 1500, rng):
        start = time.perf_counter()
        try:
            net = read_netdef(case)
            assert isinstance(net, NetDef)
            outcomes["decoded"] += 1
        except ValueError as err:
            assert "read_netdef" in str(err)
            outcomes["ValueError"] += 1
        # never a hang: each decode of a < 3 kB file is far below a second
        assert time.perf_counter() - start < 1.0
    # Truncations inside a field must be detected, so errors are common (not all: a cut
    # between two ops, or a flip inside a float value, still decodes).
    assert outcomes["ValueError"] > 300, outcomes
    assert outcomes["decoded"] > 0, outcomes


def test_an_empty_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "init_net.pb"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"init_net.pb is empty \(0 bytes\); expected a "
                                         r"serialized Caffe2 NetDef"):
        read_netdef(path)
    with pytest.raises(ValueError, match="the given bytes is empty"):
        read_netdef(b"")
    with pytest.raises(TypeError, match=r"Argument `source` must be a path, bytes or a "
                                        r"NetDef. Received: source=3 \(of type int\)"):
        read_netdef(3)
    text = tmp_path / "predict_net.pbtxt"
    text.write_text("  \n")
    with pytest.raises(ValueError, match="predict_net.pbtxt is empty"):
        read_netdef(text)


# ---------------------------------------------------------------- large float arguments


def _protobuf_only(data):
    """The NetDef as protobuf alone decodes it (no numpy fast path for large floats)."""
    from tfinit.caffe2._netdef import _PB, _decode_net

    pb = _PB["NetDef"]()
    pb.ParseFromString(data)
    return _decode_net(pb)


def _assert_same_net(net, expected):
    assert (net.name, net.external_input, net.external_output) == (
        expected.name, expected.external_input, expected.external_output)
    assert len(net.ops) == len(expected.ops)
    for op, ref in zip(net.ops, expected.ops, strict=True):
        assert (op.type, op.inputs, op.outputs) == (ref.type, ref.inputs, ref.outputs)
        assert op.args.keys() == ref.args.keys()
        for key, value in op.args.items():
            assert type(value) is type(ref.args[key]), key
            if isinstance(value, np.ndarray):
                assert value.dtype == ref.args[key].dtype, key
                np.testing.assert_array_equal(value, ref.args[key])
            else:
                assert value == ref.args[key], key


def _len_field(number, payload):
    from benchmarks.caffe2_import import _field

    return _field(number, payload)


def _floats(values):
    from tfinit.caffe2._large_floats import FLOAT_ELEMENT

    elements = np.empty(len(values), FLOAT_ELEMENT)
    elements["tag"], elements["value"] = 0x2D, values
    return elements.tobytes()


@pytest.mark.parametrize("layout", ["exporter", "floats_then_name", "floats_then_int",
                                    "int_then_floats", "short", "two_ops"])
def test_large_float_arguments_decode_as_protobuf_does(layout):
    values = np.random.default_rng(0).normal(size=300).astype(np.float32)
    name = _len_field(1, b"values")
    arg = {"exporter": name + _floats(values),
           "floats_then_name": _floats(values) + name,
           "floats_then_int": name + _floats(values) + b"\x18\x07",
           "int_then_floats": name + b"\x18\x07" + _floats(values),
           "short": name + _floats(values[:5]),
           "two_ops": name + _floats(values)}[layout]
    op = _len_field(2, b"w") + _len_field(4, b"GivenTensorFill") + _len_field(5, arg)
    data = _len_field(1, b"init") + _len_field(2, op)
    if layout == "two_ops":
        data += _len_field(2, op.replace(b"\x12\x01w", b"\x12\x01v")) + _len_field(7, b"x")
    net = read_netdef(data)
    _assert_same_net(net, _protobuf_only(data))
    if layout in ("floats_then_int", "int_then_floats"):
        assert net.ops[0].args["values"] == 7  # protobuf's rule: `i` is read before `floats`
    if layout in ("exporter", "floats_then_name", "two_ops"):
        np.testing.assert_array_equal(net.ops[0].args["values"], values)
        assert net.ops[0].args["values"].dtype == np.float32
    if layout == "two_ops":
        assert [op.outputs for op in net.ops] == [("w",), ("v",)]
        assert net.external_input == ["x"]


def test_a_truncated_init_net_is_still_refused():
    values = np.ones(300, np.float32)
    op = (_len_field(2, b"w") + _len_field(4, b"GivenTensorFill")
          + _len_field(5, _len_field(1, b"values") + _floats(values)))
    data = _len_field(2, op)
    for cut in (len(data) - 3, len(data) // 2, 7):
        with pytest.raises(ValueError, match="not a valid Caffe2 NetDef"):
            read_netdef(data[:cut])


def test_benchmark_init_net_writer_round_trips(tmp_path):
    from benchmarks.caffe2_import import resnet50_shapes, vgg19_shapes, write_init_net
    from tfinit.caffe2 import load_init_net

    # the real parameter counts of VGG-19 and ResNet-50 (Caffe2 model zoo: BN _rm/_riv too)
    assert sum(int(np.prod(s)) for _, s in vgg19_shapes()) == 143_667_240
    assert sum(int(np.prod(s)) for _, s in resnet50_shapes()) == 25_610_152
    shapes = vgg19_shapes(64, 32)
    path = tmp_path / "init_net.pb"
    write_init_net(path, shapes, seed=3)
    blobs = load_init_net(path)
    assert [(k, v.shape) for k, v in blobs.items()] == [(k, tuple(s)) for k, s in shapes]
    rng = np.random.default_rng(3)
    first = rng.standard_normal(shapes[0][1], dtype=np.float32) * np.float32(0.01)
    np.testing.assert_array_equal(blobs[shapes[0][0]], first)
    _assert_same_net(read_netdef(path), _protobuf_only(path.read_bytes()))

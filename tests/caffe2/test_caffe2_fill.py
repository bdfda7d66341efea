"""tfinit.caffe2.fill / load_init_net against Caffe2's fill semantics (docs/caffe2-semantics.md)."""

from pathlib import Path

import numpy as np
import pytest

from caffe2_nets import models_dir
from tfinit.caffe2 import DeviceOption, NetDef, Operator, fill, load_init_net
from tfinit.caffe2 import _fill, _fill_args

# ---------------------------------------------------------------- ConstantFill


def test_constant_fill_defaults_and_inferred_dtypes():
    out = fill("ConstantFill", shape=[2, 3])
    assert out.dtype == np.float32 and out.shape == (2, 3) and not out.any()
    scalar = fill("ConstantFill", value=1.5)  # no shape: a 0-d tensor
    assert scalar.shape == () and scalar.dtype == np.float32 and scalar == 1.5
    assert fill("ConstantFill", shape=[], value=1.5).shape == ()
    as_int = fill("ConstantFill", shape=[2], value=3)
    assert as_int.dtype == np.int64 and as_int.tolist() == [3, 3]
    as_bool = fill("ConstantFill", shape=[2], value=True)  # stored as int 1 -> INT64
    assert as_bool.dtype == np.int64 and as_bool.tolist() == [1, 1]
    # Float arguments pass through float32.
    assert fill("ConstantFill", shape=[1], value=0.1, dtype="DOUBLE")[0] == float(np.float32(0.1))


@pytest.mark.parametrize("dtype, value, expected", [
    ("FLOAT", 2.5, np.float32), ("DOUBLE", 2.5, np.float64), ("BOOL", 1, np.bool_),
    ("INT8", -3, np.int8), ("INT16", 300, np.int16), ("INT32", 7, np.int32),
    ("INT64", 2**40, np.int64), ("UINT8", 200, np.uint8), ("UINT16", 60000, np.uint16),
    (1, 2.5, np.float32), (10, 5, np.int64), ("int32", 7, np.int32),
])
def test_constant_fill_supported_dtypes(dtype, value, expected):
    out = fill("ConstantFill", shape=[2, 2], value=value, dtype=dtype)
    assert out.dtype == expected and out.shape == (2, 2)
    np.testing.assert_array_equal(out, np.full((2, 2), value, dtype=expected))


def test_constant_fill_string_dtype():
    out = fill("ConstantFill", shape=[2], value="ab", dtype="STRING")
    assert out.dtype == object and out.tolist() == [b"ab", b"ab"]


@pytest.mark.parametrize("kwargs, error, text", [
    ({"value": 2, "dtype": 12}, ValueError, "Unexpected 'dtype' argument value: 12"),
    ({"value": 2, "dtype": 99}, ValueError, "Unexpected 'dtype' argument value: 99"),
    ({"value": 2, "dtype": 0}, ValueError, "cannot have undefined 'dtype'"),
    ({"value": 2.5, "dtype": "INT32"}, TypeError, "expected field i"),
    ({"value": 1.0, "dtype": "BOOL"}, TypeError, "expected field i"),
    ({"value": 2, "dtype": "FLOAT"}, TypeError, "expected field f"),
    ({"value": 300, "dtype": "INT8"}, ValueError, "300"),
    ({"value": b"x"}, TypeError, "unexpected type"),
    ({"value": 1.0, "dtype": "NOPE"}, ValueError, "dtype='NOPE', an unknown Caffe2 data type"),
])
def test_constant_fill_dtype_errors_name_the_op_and_argument(kwargs, error, text):
    with pytest.raises(error, match="ConstantFill") as info:
        fill("ConstantFill", shape=[2], **kwargs)
    assert text in str(info.value)
    arg = "dtype" if "dtype" in text or "data type" in text else "value"
    assert f"`{arg}`" in str(info.value)


def test_filler_shape_from_inputs():
    source = np.zeros((2, 3), np.float32)
    out = fill("ConstantFill", source, value=1.0)
    assert out.shape == (2, 3) and (out == 1).all()
    assert fill("ConstantFill", source, extra_shape=[4], value=1.0).shape == (2, 3, 4)
    as_shape = fill("ConstantFill", np.array([4, 5], np.int64), input_as_shape=1, value=2.0)
    assert as_shape.shape == (4, 5)
    assert fill("GaussianFill", np.array([3], np.int64), input_as_shape=True,
                extra_shape=[2]).shape == (3, 2)


@pytest.mark.parametrize("inputs, kwargs, arg, text", [
    ((), {"shape": 5}, "shape", "was a scalar"),
    ((np.zeros(3),), {"shape": [4]}, "shape", "Cannot set the shape argument and pass in"),
    ((), {"extra_shape": [4]}, "extra_shape", "Cannot set extra_shape when there is no input"),
    ((), {"input_as_shape": 1}, "input_as_shape", "An input must be given"),
    ((), {"shape": [2, -1]}, "shape", "negative"),
])
def test_filler_shape_errors(inputs, kwargs, arg, text):
    for op in ("ConstantFill", "GaussianFill", "XavierFill"):  # every filler shares them
        with pytest.raises(ValueError, match=op) as info:
            fill(op, *inputs, **kwargs)
        assert f"`{arg}`" in str(info.value) and text in str(info.value)


def test_input_as_shape_needs_a_1d_int64_input():
    for source in (np.zeros((2, 2), np.int64), np.array([2, 3], np.int32)):
        with pytest.raises(TypeError, match="ConstantFill: Argument `input_as_shape`.*1-D int64"):
            fill("ConstantFill", source, input_as_shape=1)


def test_unknown_arguments_and_ops():
    with pytest.raises(TypeError, match=r"GaussianFill: unexpected argument\(s\) sdt"):
        fill("GaussianFill", shape=[2], sdt=1.0)
    with pytest.raises(ValueError, match="'NoSuchFill'.*XavierFill"):
        fill("NoSuchFill", shape=[2])
    with pytest.raises(TypeError, match="mixed|cannot store"):
        fill("GivenTensorFill", shape=[2], values=[1.0, 2])


# ---------------------------------------------------------------- GivenTensor*Fill


def test_argument_precision_given_tensor_double_fill():
    out = fill("GivenTensorDoubleFill", values=[0.1, 0.2, 0.3, 1e100], shape=[4])
    assert out.dtype == np.float64
    assert out.tolist() == [0.10000000149011612, 0.20000000298023224, 0.30000001192092896,
                            np.inf]


@pytest.mark.parametrize("op, values, dtype", [
    ("GivenTensorFill", [1.5, -2.0], np.float32),
    ("GivenTensorDoubleFill", [1.5, -2.0], np.float64),
    ("GivenTensorIntFill", [1, -2], np.int32),
    ("GivenTensorInt64Fill", [2**40, -2], np.int64),
    ("GivenTensorInt16Fill", [300, -2], np.int16),
    ("GivenTensorBoolFill", [1, 0], np.bool_),
    ("GivenTensorBoolFill", [True, False], np.bool_),
])
def test_given_tensor_fill_output_dtypes(op, values, dtype):
    out = fill(op, values=values, shape=[2])
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.asarray(values).astype(dtype))
    # The typed variants ignore a dtype argument.
    if op != "GivenTensorFill":
        assert fill(op, values=values, shape=[2], dtype="FLOAT").dtype == dtype


def test_given_tensor_string_and_bytes_fills():
    strings = fill("GivenTensorStringFill", values=["a", b"bc"], shape=[2])
    assert strings.dtype == object and strings.tolist() == [b"a", b"bc"]
    raw = fill("GivenTensorByteStringToUInt8Fill", values=[b"\x01\x02\xff"], shape=[3])
    assert raw.dtype == np.uint8 and raw.tolist() == [1, 2, 255]


def test_given_tensor_fill_values_are_row_major_and_shape_optional():
    out = fill("GivenTensorFill", values=[float(v) for v in range(6)], shape=[2, 3])
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3))
    scalar = fill("GivenTensorFill", values=[1.5])  # no shape: 0-d, one element
    assert scalar.shape == () and scalar == 1.5


@pytest.mark.parametrize("dtype, values, expected", [
    ("DOUBLE", [1.5], np.float64), ("BOOL", [1, 0], np.bool_), ("INT16", [3, 4], np.int16),
    ("INT32", [3, 4], np.int32), ("INT64", [3, 4], np.int64), ("FLOAT", [1.5], np.float32),
])
def test_only_given_tensor_fill_honours_dtype(dtype, values, expected):
    out = fill("GivenTensorFill", values=values, shape=[len(values)], dtype=dtype)
    assert out.dtype == expected
    np.testing.assert_array_equal(out, np.asarray(values).astype(expected))


def test_given_tensor_fill_string_dtype():
    out = fill("GivenTensorFill", values=["x"], shape=[1], dtype="STRING")
    assert out.tolist() == [b"x"]


@pytest.mark.parametrize("op, kwargs, error, text", [
    ("GivenTensorFill", {"values": [1.0] * 5, "shape": [2, 3]}, ValueError, "6 vs 5"),
    ("GivenTensorFill", {"values": [1, 2], "shape": [2]}, ValueError, "2 vs 0"),
    ("GivenTensorIntFill", {"values": [1.0, 2.0], "shape": [2]}, ValueError, "2 vs 0"),
    ("GivenTensorFill", {"shape": [2]}, ValueError, "Argument 'values' is required"),
    ("GivenTensorInt16Fill", {"values": [70000], "shape": [1]}, ValueError, "70000"),
    ("GivenTensorFill", {"values": [1.0], "shape": [1], "dtype": 12}, ValueError,
     "Unexpected 'dtype' argument value: 12"),
    ("GivenTensorFill", {"values": [1.0], "shape": [1], "dtype": 0}, ValueError, "undefined"),
])
def test_given_tensor_fill_errors(op, kwargs, error, text):
    with pytest.raises(error, match=op) as info:
        fill(op, **kwargs)
    assert text in str(info.value)
    assert "`values`" in str(info.value) or "`dtype`" in str(info.value)


def test_wrong_field_error_explains_which_field_caffe2_reads():
    with pytest.raises(ValueError, match="reads only the `floats` field"):
        fill("GivenTensorFill", values=[1, 2], shape=[2])


# ---------------------------------------------------------------- RangeFill / DiagonalFill


def test_range_fill_ignores_dtype():
    out = fill("RangeFill", shape=[2, 3], dtype="INT32")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3))


def test_diagonal_fill():
    tall = fill("DiagonalFill", shape=[7, 5], value=1.0)
    expected = np.zeros((7, 5), np.float32)
    expected[range(5), range(5)] = 1
    expected[6, 0] = 1  # the flat stride wraps a tall matrix
    np.testing.assert_array_equal(tall, expected)
    wide = fill("DiagonalFill", shape=[3, 5], value=2.0)
    np.testing.assert_array_equal(wide, np.eye(3, 5, dtype=np.float32) * 2)
    cube = fill("DiagonalFill", shape=[3, 3, 3], value=2)  # step 13; int value -> INT64
    assert cube.dtype == np.int64
    assert np.flatnonzero(cube).tolist() == [0, 13, 26]
    assert [cube[i, i, i] for i in range(3)] == [2, 2, 2]
    assert not fill("DiagonalFill", shape=[2, 2]).any()  # default value 0


@pytest.mark.parametrize("shape, text", [
    ([3], "Input shape must be >= 2D"),
    ([3, 4, 3], "All dimensions of input must be of equal length"),
])
def test_diagonal_fill_errors(shape, text):
    with pytest.raises(ValueError, match="DiagonalFill") as info:
        fill("DiagonalFill", shape=shape, value=1.0)
    assert text in str(info.value)


# ---------------------------------------------------------------- random fills

# Statistical checks use fixed sample sizes; tolerances are 6 standard errors.


def test_uniform_fill_range_and_errors():
    out = fill("UniformFill", shape=[4096], min=-2.0, max=3.0, dtype="DOUBLE")
    assert out.dtype == np.float32  # dtype is ignored
    assert out.min() >= -2.0 and out.max() < 3.0
    with pytest.raises(TypeError, match="UniformFill: Argument `min`.*expected field f"):
        fill("UniformFill", shape=[2], min=0, max=1.0)
    with pytest.raises(ValueError, match="UniformFill.*`min`.*bigger than min"):
        fill("UniformFill", shape=[2], min=1.0, max=1.0)


def test_uniform_fill_three_input_form():
    source = np.zeros((4, 2), np.float32)
    empty = fill("UniformFill", source, np.float32(3.0), np.float32(1.0))
    assert empty.shape == (0, 2) and empty.dtype == np.float32  # min > max: first dim 0
    drawn = fill("UniformFill", source, np.float32(1.0), np.float32(3.0))
    assert drawn.shape == (4, 2) and drawn.min() >= 1.0 and drawn.max() < 3.0
    with pytest.raises(ValueError, match="UniformFill: Argument `min` cannot be set together"):
        fill("UniformFill", source, np.float32(1.0), np.float32(3.0), min=0.5)


def test_uniform_int_fill_is_max_inclusive():
    out = fill("UniformIntFill", shape=[600], min=0, max=5)
    assert out.dtype == np.int32
    assert sorted(set(out.tolist())) == [0, 1, 2, 3, 4, 5]  # P(a value missing) < 1e-46
    with pytest.raises(TypeError, match="UniformIntFill: Argument `min`.*expected field i"):
        fill("UniformIntFill", shape=[2], min=0.0, max=5.0)
    with pytest.raises(ValueError, match="UniformIntFill.*bigger than min"):
        fill("UniformIntFill", shape=[2], min=1, max=1)


def test_unique_uniform_fill():
    perm = fill("UniqueUniformFill", shape=[50], min=0, max=49)
    assert perm.dtype == np.int32 and sorted(perm.tolist()) == list(range(50))
    wide = fill("UniqueUniformFill", shape=[5], min=0, max=49, dtype="INT64")
    assert wide.dtype == np.int64 and len(set(wide.tolist())) == 5
    avoided = fill("UniqueUniformFill", np.zeros(5), np.array([1, 2, 3]), min=0, max=7)
    assert sorted(avoided.tolist()) == [0, 4, 5, 6, 7]


@pytest.mark.parametrize("kwargs, error, text", [
    ({"shape": [51], "min": 0, "max": 49}, ValueError, "Cannot satisfy the unique requirement"),
    ({"shape": [5], "min": 0, "max": 49, "dtype": 1}, ValueError,
     "Unexpected 'dtype' argument value: 1"),
    ({"shape": [5], "min": 0}, ValueError, "`max`"),
    ({"shape": [5], "min": 0.0, "max": 9.0}, TypeError, "expected field i"),
    ({"shape": [5], "min": 3, "max": 3}, ValueError, "bigger than min"),
])
def test_unique_uniform_fill_errors(kwargs, error, text):
    with pytest.raises(error, match="UniqueUniformFill") as info:
        fill("UniqueUniformFill", **kwargs)
    assert text in str(info.value)


def test_gaussian_fill():
    const = fill("GaussianFill", shape=[3], mean=2.0, std=0.0, dtype="DOUBLE")
    assert const.dtype == np.float32 and const.tolist() == [2.0, 2.0, 2.0]
    sample = fill("GaussianFill", shape=[20000], mean=1.0, std=0.5)
    assert abs(sample.mean() - 1.0) < 6 * 0.5 / np.sqrt(20000)
    assert abs(sample.std() - 0.5) < 6 * 0.5 / np.sqrt(2 * 20000)
    with pytest.raises(ValueError, match="GaussianFill: Argument `std`.*stdv_in must be positive"):
        fill("GaussianFill", shape=[3], std=-1.0)
    with pytest.raises(TypeError, match="GaussianFill: Argument `std`.*expected field f"):
        fill("GaussianFill", shape=[3], std=1)


@pytest.mark.parametrize("shape, fan_in", [
    ([256, 128], 128), ([64, 32, 3, 3], 288), ([1000], 1), ([4, 6, 5], 30),
])
def test_xavier_fill_uses_caffe2_fan_in(shape, fan_in):
    limit = np.sqrt(3 / fan_in)  # Caffe2: 0.15309, 0.10206, 1.7320 for the first three
    out = fill("XavierFill", shape=shape)
    assert out.dtype == np.float32 and list(out.shape) == shape
    assert np.abs(out).max() <= limit * (1 + 1e-5)
    assert np.abs(out).max() > 0.9 * limit  # P(all of >= 1000 samples inside 0.9L) < 1e-45


def test_msra_fill_uses_caffe2_fan_out():
    out = fill("MSRAFill", shape=[256, 128])
    std = np.sqrt(2 / 256)  # fan_out = numel / shape[1] = 256 (Keras layout would give 128)
    assert abs(out.std() - std) < 6 * std / np.sqrt(2 * out.size)


@pytest.mark.parametrize("op, shape, text", [
    ("XavierFill", [], "at least 1 dimension"),
    ("MSRAFill", [5], "at least 2 dimensions"),
    ("MSRAFill", [], "at least 2 dimensions"),
])
def test_fan_errors(op, shape, text):
    with pytest.raises(ValueError, match=op) as info:
        fill(op, shape=shape)
    assert text in str(info.value)


def test_zero_sized_fan_shapes_give_empty_arrays():
    # Caffe2 raises ([k, 0] Xavier) or dies with SIGFPE (Xavier [0, k], MSRA [k, 0]);
    # tfinit's fills give an empty tensor: there is nothing to draw.
    for op, shape in (("XavierFill", [0, 4]), ("XavierFill", [4, 0]), ("MSRAFill", [4, 0])):
        out = fill(op, shape=shape)
        assert out.shape == tuple(shape) and out.dtype == np.float32


# ---------------------------------------------------------------- fp16


def test_float_to_half_rounding():
    x = np.array([65519, 65520, 2.0**-25, 3 * 2.0**-25, np.nan, -65520], np.float32)
    out = fill("FloatToHalf", x)
    assert out.dtype == np.float16
    assert out[:4].tolist() == [65504, np.inf, 0.0, 2.0**-23]
    assert np.isnan(out[4]) and out[5] == -np.inf
    rng = np.random.default_rng(0)
    sample = (rng.standard_normal(4096) * 10.0 ** rng.uniform(-8, 5, 4096)).astype(np.float32)
    with np.errstate(over="ignore"):
        expected = sample.astype(np.float16)
    np.testing.assert_array_equal(fill("FloatToHalf", sample).view(np.uint16),
                                  expected.view(np.uint16))


def test_float_to_half_clip_saturates_nan_too():
    x = np.array([65519, 65520, 1e9, -1e9, np.nan, -np.nan, np.inf, -np.inf, 1.5], np.float32)
    out = fill("FloatToHalf", x, clip=1)
    # NaN -> -65504 (either sign) is what Caffe2 (PyTorch 1.8.1, CPU) printed when run;
    # Caffe2's rule: "NaN also becomes 65504".
    assert out.tolist() == [65504, 65504, 65504, -65504, -65504, -65504, 65504, -65504, 1.5]


def test_half_conversions_check_input_types():
    with pytest.raises(TypeError, match="FloatToHalf.*float32.*Tensor type mismatch"):
        fill("FloatToHalf", np.array([1.0], np.float64))
    with pytest.raises(TypeError, match="HalfToFloat.*float16"):
        fill("HalfToFloat", np.array([1.0], np.float32))
    back = fill("HalfToFloat", np.array([1.5, 65504], np.float16))
    assert back.dtype == np.float32 and back.tolist() == [1.5, 65504]


def test_float16_fills():
    const = fill("Float16ConstantFill", shape=[2], value=0.1)
    assert const.dtype == np.float16 and const.tolist() == [np.float16(0.1)] * 2
    uniform = fill("Float16UniformFill", shape=[64], min=-1.0, max=1.0)
    assert uniform.dtype == np.float16 and uniform.min() >= -1 and uniform.max() <= 1


# ---------------------------------------------------------------- seeds (plumbing)


class _Recorder:
    """Stands in for tfinit.registry: records what each fill is built with."""

    def __init__(self):
        self.calls = []

    def lookup(self, name):
        class Fill:
            def __init__(self, seed=None, rng=None, **kwargs):
                pass
        return Fill

    def build(self, name, kwargs):
        self.calls.append((name, dict(kwargs)))

        def draw(shape, dtype=None):
            return np.zeros(shape, dtype=dtype)
        return draw


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(_fill_args, "registry", rec)  # where the fills are built
    return rec


def test_fill_seed_asks_for_caffe2_stream(recorder):
    fill("GaussianFill", shape=[2], std=0.5, seed=20256)
    fill("XavierFill", shape=[4, 3], seed=7)
    fill("GaussianFill", shape=[2])
    fill("ConstantFill", shape=[2], value=1.0, seed=3)  # deterministic: seed not passed
    assert recorder.calls == [
        ("GaussianFill", {"mean": 0.0, "std": 0.5, "seed": 20256, "rng": "caffe2"}),
        ("XavierFill", {"layout": "caffe2", "seed": 7, "rng": "caffe2"}),
        ("GaussianFill", {"mean": 0.0, "std": 1.0}),
        ("ConstantFill", {"value": 1.0, "dtype": "float32"}),
    ]
    with pytest.raises(TypeError, match="GaussianFill: Argument `seed`"):
        fill("GaussianFill", shape=[2], seed=-1)


def _random_net(net_seed=None, op_seeds=(None, None, None)):
    ops = [Operator("GaussianFill", (), (f"w{k}",), {"shape": [2, 2]},
                    device_option=None if s is None else DeviceOption(random_seed=s))
           for k, s in enumerate(op_seeds)]
    return NetDef(ops=ops, device_option=None if net_seed is None else DeviceOption(
        random_seed=net_seed))


def test_load_init_net_seed_priority(recorder):
    net = _random_net(net_seed=11, op_seeds=(None, 5, None))
    load_init_net(net.to_bytes(), seeds={"w2": 99})
    seeds = [(kw.get("seed"), kw.get("rng")) for _, kw in recorder.calls]
    # net seed goes to every op (Caffe2 merges it in), an op's own wins, `seeds` wins over both
    assert seeds == [(11, "caffe2"), (5, "caffe2"), (99, "caffe2")]


def test_load_init_net_keras_seed_is_per_op_and_not_caffe2(recorder):
    load_init_net(_random_net(), seed=3)
    load_init_net(_random_net(), seed=3)
    load_init_net(_random_net(op_seeds=(None, 8, None)), seed=3)
    first, second, third = (recorder.calls[k:k + 3] for k in (0, 3, 6))
    assert first == second
    assert all("rng" not in kw for _, kw in first)
    assert len({kw["seed"] for _, kw in first}) == 3  # distinct per op
    assert third[1][1] == {"mean": 0.0, "std": 1.0, "seed": 8, "rng": "caffe2"}
    assert third[0] == first[0] and third[2] == first[2]


# ---------------------------------------------------------------- load_init_net


def test_load_init_net_replays_the_exported_mlp_exactly():
    models = models_dir()
    ref = np.load(models / "mlp_forward.npz", allow_pickle=False)
    blobs = load_init_net(models / "mlp_init_net.pb")
    assert list(blobs) == ["fc1_w", "fc1_b", "fc2_w", "fc2_b", "fc3_w", "fc3_b", "data"]
    for name in list(blobs)[:-1]:
        assert blobs[name].dtype == np.float32
        np.testing.assert_array_equal(blobs[name], ref[f"param/{name}"])
    assert blobs["data"].shape == (1, 1)


def test_load_init_net_keras_seeded_and_unseeded_draws():
    net = _random_net()
    a, b = load_init_net(net, seed=3), load_init_net(net, seed=3)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["w0"], a["w1"])  # distinct per op, unlike a net-level seed
    assert not np.array_equal(load_init_net(net, seed=4)["w0"], a["w0"])
    fresh = load_init_net(net)
    assert fresh["w0"].shape == (2, 2) and fresh["w0"].dtype == np.float32


def test_load_init_net_replays_a_pseudo_fp16_param_init_net():
    # PseudoFP16Initializer: the fill writes P_fp32, then FloatToHalf(P_fp32) -> P.
    net = NetDef(ops=[
        Operator("GaussianFill", (), ("fc_w_fp32",), {"shape": [4, 3], "std": 0.01}),
        Operator("FloatToHalf", ("fc_w_fp32",), ("fc_w",)),
        Operator("ConstantFill", (), ("fc_b_fp32",), {"shape": [4]}),
        Operator("FloatToHalf", ("fc_b_fp32",), ("fc_b",)),
        Operator("ConstantFill", (), ("ITER",), {"shape": [1], "value": 0, "dtype": 10},
                 device_option=DeviceOption()),
    ])
    blobs = load_init_net(net.to_bytes(), seed=0)
    assert blobs["fc_w"].dtype == np.float16 and blobs["fc_w_fp32"].dtype == np.float32
    np.testing.assert_array_equal(blobs["fc_w"], blobs["fc_w_fp32"].astype(np.float16))
    assert blobs["ITER"].dtype == np.int64 and blobs["ITER"].tolist() == [0]


def test_load_init_net_ignores_arguments_an_op_does_not_read():
    net = NetDef(ops=[Operator("GivenTensorFill", (), ("w",),
                               {"shape": [2], "values": [1.0, 2.0], "order": "NCHW"})])
    assert load_init_net(net)["w"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("ops, text", [
    ([Operator("ConstantFill", (), ("x",), {"shape": [2]}), Operator("Relu", ("x",), ("y",))],
     r"init net op #1 \(Relu -> y\): 'Relu' is not an operator tfinit replays"),
    ([Operator("FloatToHalf", ("nowhere",), ("y",))],
     r"init net op #0 \(FloatToHalf -> y\): input\(s\) nowhere are not written"),
    ([Operator("UniformFill", (), ("u",), {"shape": [2], "min": 0, "max": 1})],
     r"init net op #0 \(UniformFill -> u\): UniformFill: Argument `min`"),
    ([Operator("GivenTensorFill", (), ("w",), {"shape": [2, 3], "values": [1.0]})],
     r"op #0 .*6 vs 1"),
])
def test_load_init_net_errors_name_the_op_and_position(ops, text):
    with pytest.raises((ValueError, TypeError), match=text):
        load_init_net(NetDef(ops=ops))


def test_load_init_net_seed_arguments_are_checked():
    with pytest.raises(KeyError, match="'nope'"):
        load_init_net(_random_net(), seeds={"nope": 1})
    with pytest.raises(TypeError, match=r"seeds\['w0'\]"):
        load_init_net(_random_net(), seeds={"w0": 1.5})
    with pytest.raises(TypeError, match="`seed`"):
        load_init_net(_random_net(), seed="x")


def test_fuzzed_init_nets_raise_value_error_only():
    import random

    data = models_dir().joinpath("mlp_init_net.pb").read_bytes()
    rng = random.Random(7)
    errors = 0
    for trial in range(400):
        case = bytearray(data)
        if trial % 2:
            case = case[: rng.randrange(len(case))]
        else:
            for _ in range(rng.randint(1, 4)):
                case[rng.randrange(len(case))] ^= 1 << rng.randrange(8)
        try:
            load_init_net(bytes(case))
        except ValueError:
            errors += 1
    assert errors > 100


def test_replayed_ops():
    from tfinit.caffe2 import replayed_ops

    assert set(replayed_ops()) == {
        "ConstantFill", "DiagonalFill", "RangeFill", "GaussianFill", "UniformFill",
        "UniformIntFill", "UniqueUniformFill", "XavierFill", "MSRAFill", "Float16ConstantFill",
        "Float16UniformFill", "FloatToHalf", "HalfToFloat", "GivenTensorFill",
        "GivenTensorDoubleFill", "GivenTensorIntFill", "GivenTensorInt64Fill",
        "GivenTensorInt16Fill", "GivenTensorBoolFill", "GivenTensorStringFill",
        "GivenTensorByteStringToUInt8Fill"}


def test_deterministic_init_net_is_bit_identical_to_what_caffe2_produced():
    """``data/c2import_deterministic_init_net.pb`` (35 ops: ConstantFill in every dtype and
    shape mode, the GivenTensor*Fill family, RangeFill, DiagonalFill, FloatToHalf with and
    without clip, HalfToFloat, ...) was written with tfinit's encoder and run by the real
    Caffe2 (PyTorch 1.8.1 wheel, CPU); the .npz holds Caffe2's blobs."""
    data = Path(__file__).resolve().parents[1] / "data"
    expected = np.load(data / "c2import_deterministic_init_net.npz", allow_pickle=False)
    blobs = load_init_net(data / "c2import_deterministic_init_net.pb")
    assert list(blobs) == list(expected.files)
    for name in expected.files:
        assert blobs[name].dtype == expected[name].dtype, name
        assert blobs[name].shape == expected[name].shape, name
        assert blobs[name].tobytes() == expected[name].tobytes(), name


def test_data_type_is_the_named_caffe2_enum():
    assert _fill.data_type("int64") is _fill.DataType.INT64 == 10
    assert _fill.data_type(13) is _fill.DataType.DOUBLE
    assert _fill.data_type(99) == 99 and not isinstance(_fill.data_type(99), _fill.DataType)
    assert _fill.DATA_TYPES == {m.name: m.value for m in _fill.DataType}
    with pytest.raises(ValueError, match="Received: dtype=99 \\(unknown\\)"):
        fill("GivenTensorFill", values=[1.0], shape=[1], dtype=99)

"""rng="caffe2": Caffe2's CPU random streams, bit for bit.

The expected arrays come from the real Caffe2 (torch 1.8.1 wheel) and from
torch 2.13's ``torch.randint``; tests/data/README.md says how each was made.
"""

import hashlib
import json
import os

import keras
import numpy as np
import pytest

import tfinit
from tfinit import registry
from tfinit.fills import _caffe2_rng

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def _load(stem):
    with open(os.path.join(DATA, stem + ".json")) as f:
        meta = json.load(f)
    with np.load(os.path.join(DATA, stem + ".npz"), allow_pickle=False) as arrays:
        return meta, {k: arrays[k] for k in arrays.files}


CAFFE2_META, CAFFE2 = _load("caffe2_rng_cases")
TORCH_META, TORCH = _load("torch_randint")
with np.load(os.path.join(DATA, "caffe2_seeded_init_net.npz"), allow_pickle=False) as _net:
    INIT_NET_VALUES = {k: _net[k] for k in _net.files}


def _fill_for(op, seed, args, layout="caffe2"):
    """The tfinit fill for a Caffe2 op's arguments (shape excluded), rng='caffe2'."""
    kwargs = {k: v for k, v in args.items() if k not in ("shape", "dtype")}
    if op in ("XavierFill", "MSRAFill"):
        kwargs["layout"] = layout
    return registry.build(op, {**kwargs, "seed": seed, "rng": "caffe2"})


def assert_same_bits(actual, expected):
    actual = np.asarray(keras.ops.convert_to_numpy(actual))
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("case", CAFFE2_META["cases"], ids=lambda c: c["name"])
def test_every_op_matches_real_caffe2_bit_for_bit(case):
    expected = CAFFE2[case["name"]]
    init = _fill_for(case["op"], case["random_seed"], case["args"])
    assert_same_bits(init(case["args"]["shape"], dtype=case["dtype"]), expected)


def test_fixtures_hold_the_shared_reference_samples():
    # The two samples of tests/data/seeded_samples.npz, regenerated.
    names = {c["name"] for c in CAFFE2_META["cases"]}
    assert {"UniformFill_seed20262_7x5", "GaussianFill_seed20256_7x5"} <= names


@pytest.mark.parametrize(
    "case", CAFFE2_META["digests"], ids=lambda c: f"{c['op']}{c['args']['shape']}"
)
def test_large_outputs_match_real_caffe2_digest(case):
    # 10**6-element outputs: exercises every float32 rounding step (and GaussianFill's
    # libm last bits) on far more values than the small fixtures.
    out = _fill_for(case["op"], case["random_seed"], case["args"])(case["args"]["shape"])
    values = np.ascontiguousarray(keras.ops.convert_to_numpy(out))
    assert str(values.dtype) == case["dtype"]
    assert hashlib.sha256(values.tobytes()).hexdigest() == case["sha256"]


def test_whole_seeded_param_init_net_replays():
    # Ops without their own seed inherit the net's device_option.random_seed.
    net = CAFFE2_META["init_net"]
    random_ops = {"XavierFill", "MSRAFill", "GaussianFill", "UniformFill"}
    assert {op["type"] for op in net["ops"]} >= random_ops
    for op in net["ops"]:
        args = dict(op["args"])
        if op["type"] == "ConstantFill":
            value = {k: v for k, v in args.items() if k != "shape"}
            out = tfinit.ConstantFill(**value)(args["shape"])
        else:
            seed = op["op_random_seed"]
            seed = net["net_random_seed"] if seed is None else seed
            out = _fill_for(op["type"], seed, args)(args["shape"])
        assert_same_bits(out, INIT_NET_VALUES[op["output"]])


# ---------------------------------------------------------------- Keras layout


def _case(name):
    case = next(c for c in CAFFE2_META["cases"] if c["name"] == name)
    return case, CAFFE2[name]


@pytest.mark.parametrize(
    "name, to_keras",
    [
        ("XavierFill_seed11_7x5", lambda w: w.T),  # [out, in] -> Dense [in, out]
        ("MSRAFill_seed21_7x5", lambda w: w.T),
        ("XavierFill_seed12_4x3x3x3", lambda w: w.transpose(2, 3, 1, 0)),  # OIHW -> HWIO
        ("MSRAFill_seed22_4x3x3x3", lambda w: w.transpose(2, 3, 1, 0)),
        ("MSRAFill_seed23_5x3x3x1", lambda w: w.transpose(2, 3, 1, 0)),
        ("XavierFill_seed14_3x4x5", lambda w: w.transpose(2, 1, 0)),  # (O, I, k) -> (k, I, O)
        ("MSRAFill_seed24_3x4x5", lambda w: w.transpose(2, 1, 0)),
        ("XavierFill_seed13_9", lambda w: w),  # 1-D: the same in both layouts
    ],
)
def test_keras_layout_is_caffe2_values_moved(name, to_keras):
    case, caffe2_values = _case(name)
    expected = np.ascontiguousarray(to_keras(caffe2_values))
    init = _fill_for(case["op"], case["random_seed"], case["args"], layout="keras")
    assert_same_bits(init(expected.shape), expected)


def test_dense_kernel_is_the_caffe2_fc_weight_transposed():
    case, weight = _case("XavierFill_seed11_7x5")  # Caffe2 FC weight [out=7, in=5]
    layer = keras.layers.Dense(7, kernel_initializer=tfinit.XavierFill(seed=11, rng="caffe2"))
    layer.build((None, 5))
    assert_same_bits(layer.kernel.value, weight.T.copy())


# ---------------------------------------------------------------- torch cross-check, seeds


@pytest.mark.parametrize("case", TORCH_META["cases"], ids=lambda c: c["name"])
def test_integer_draws_match_torch_randint(case):
    # torch.randint uses ATen's uniform_int_from_to, as Caffe2's RandUniform<int>.
    span = case["high"] - case["low"] + 1
    ours = _caffe2_rng._int_candidates(
        _caffe2_rng.Stream(case["seed"]), case["count"], case["low"], span,
        wide=case["dtype"] == "int64",
    )
    np.testing.assert_array_equal(ours, TORCH[case["name"]])


def test_uniform_int_fill_with_negative_and_huge_seeds_matches_torch():
    for name in ("randint_1", "randint_2"):  # seeds 2**32 + 31 and -1
        case = next(c for c in TORCH_META["cases"] if c["name"] == name)
        init = tfinit.UniformIntFill(case["low"], case["high"], seed=case["seed"], rng="caffe2")
        assert_same_bits(init((case["count"],)), TORCH[name].astype(np.int32))


def test_seeds_are_reduced_mod_2_32():
    assert _caffe2_rng.reduce_seed(-1) == 2**32 - 1
    assert _caffe2_rng.reduce_seed(2**32 + 5) == 5
    case, expected = _case("UniformFill_seed4294967295_3x5x2x3")
    for seed in (-1, 2**32 - 1, 2**64 - 1):
        init = _fill_for("UniformFill", seed, case["args"])
        assert_same_bits(init(case["args"]["shape"]), expected)


# ---------------------------------------------------------------- self-consistency


@pytest.mark.parametrize("count", [1, 2, 3, 35, 36, 1001])
def test_gaussian_stream_is_row_major_prefix_consistent(count):
    # Element i depends only on the pair it belongs to, so any count is a prefix of a
    # longer one: an odd count ends on a cosine value and drops the pair's sine.
    longer = _caffe2_rng.gaussian(5, 2000, 0.25, 2.0)
    np.testing.assert_array_equal(_caffe2_rng.gaussian(5, count, 0.25, 2.0), longer[:count])
    np.testing.assert_array_equal(
        _caffe2_rng.uniform(5, count, -1.0, 2.0), _caffe2_rng.uniform(5, 2000, -1.0, 2.0)[:count]
    )


def test_gaussian_moments():
    # Tolerance: 6 standard errors of the mean (std/sqrt(n)) and of the std (std/sqrt(2n)).
    n, mean, std = 200_000, 0.5, 2.0
    values = _caffe2_rng.gaussian(3, n, mean, std).astype(np.float64)
    assert abs(values.mean() - mean) < 6 * std / np.sqrt(n)
    assert abs(values.std() - std) < 6 * std / np.sqrt(2 * n)


def test_unique_uniform_rejects_duplicates_and_avoided_values():
    avoid = list(range(100, 200))
    values = _caffe2_rng.unique_uniform_int(11, 900, 0, 999, avoid)
    assert len(set(values.tolist())) == 900
    assert values.min() >= 0 and values.max() <= 999 and not set(avoid) & set(values.tolist())
    # The output is the stream's first distinct, non-avoided candidates, in order.
    candidates = _caffe2_rng._int_candidates(_caffe2_rng.Stream(11), 50, 0, 1000, wide=False)
    kept = list(dict.fromkeys(v for v in candidates.tolist() if v not in avoid))
    np.testing.assert_array_equal(values[: len(kept)], kept)


def test_libm_last_bit_is_recomputed_near_float32_boundaries():
    # 1 + 2**-24 is halfway between two float32s: the side decides the last bit.
    halfway = 1.0 + 2.0**-24
    approx = np.array([halfway - 2.0**-52, 0.5])
    result = _caffe2_rng._to_float32(approx, lambda i: halfway + 2.0**-52)
    assert result[0] == np.float32(1.0 + 2.0**-23)
    assert result[1] == np.float32(0.5)


def test_other_dtypes_are_the_float32_values_cast():
    init = tfinit.GaussianFill(std=3.0, seed=8, rng="caffe2")
    values = keras.ops.convert_to_numpy(init((33,), dtype="float32"))
    assert_same_bits(init((33,), dtype="float16"), values.astype(np.float16))
    assert_same_bits(init((33,), dtype="float64"), values.astype(np.float64))
    ints = tfinit.UniqueUniformFill(0, 99, seed=4, rng="caffe2")
    expected = keras.ops.convert_to_numpy(ints((10,))).astype(np.int16)
    assert_same_bits(ints((10,), dtype="int16"), expected)


# ---------------------------------------------------------------- config, default, errors


@pytest.mark.parametrize(
    "init",
    [
        tfinit.UniformFill(-1.0, 2.0, seed=3, rng="caffe2"),
        tfinit.GaussianFill(0.5, 0.1, seed=3, rng="caffe2"),
        tfinit.XavierFill(seed=3, rng="caffe2"),
        tfinit.MSRAFill(seed=3, layout="caffe2", rng="caffe2"),
        tfinit.UniformIntFill(-4, 4, seed=3, rng="caffe2"),
        tfinit.UniqueUniformFill(0, 99, avoid=[5], seed=3, rng="caffe2"),
    ],
    ids=lambda i: i.op_name,
)
def test_config_round_trip_keeps_rng(init):
    config = init.get_config()
    assert config["rng"] == "caffe2" and config["seed"] == 3
    again = keras.initializers.deserialize(keras.initializers.serialize(init))
    assert again.rng == "caffe2"
    assert_same_bits(again((4, 6)), keras.ops.convert_to_numpy(init((4, 6))))


def test_default_rng_is_unchanged_keras():
    init = tfinit.GaussianFill(std=2.0, seed=5)
    assert init.get_config()["rng"] == "keras"
    expected = keras.random.normal((4, 3), stddev=2.0, seed=5)
    assert_same_bits(init((4, 3)), keras.ops.convert_to_numpy(expected))
    assert not np.array_equal(
        keras.ops.convert_to_numpy(init((4, 3))),
        keras.ops.convert_to_numpy(tfinit.GaussianFill(std=2.0, seed=5, rng="caffe2")((4, 3))),
    )


@pytest.mark.parametrize(
    "seed", [None, 1.0, True, "7", keras.random.SeedGenerator(1)],
    ids=["None", "1.0", "True", "'7'", "SeedGenerator"],  # the same ids in every process
)
@pytest.mark.parametrize(
    "cls", [tfinit.UniformFill, tfinit.GaussianFill, tfinit.XavierFill, tfinit.MSRAFill]
)
def test_caffe2_rng_needs_an_int_seed(cls, seed):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: rng='caffe2'.*`seed` must be an int"):
        cls(seed=seed, rng="caffe2")


def test_bad_rng_and_non_random_ops():
    with pytest.raises(
        ValueError, match=r"UniformFill: Argument `rng` must be one of.*Received: rng='numpy'"
    ):
        tfinit.UniformFill(seed=1, rng="numpy")
    for op in ("ConstantFill", "RangeFill", "GivenTensorFill"):
        with pytest.raises(ValueError, match=rf"{op}: Caffe2 draws no random numbers"):
            registry.build(op, {"rng": "caffe2", "seed": 1})
    with pytest.raises(ValueError, match=r"ConstantFill: Caffe2 draws no random numbers"):
        tfinit.get(("ConstantFill", {"value": 1.0, "rng": "caffe2"}))


def test_caffe2_range_limits():
    with pytest.raises(
        ValueError,
        match=r"UniformIntFill: Arguments `min` and `max` must be in the int32 range.*"
        r"Caffe2's UniformIntFill is int32",
    ):
        tfinit.UniformIntFill(0, 2**40, seed=1, rng="caffe2")
    with pytest.raises(
        ValueError,
        match=r"UniformFill: Arguments `min` and `max` must stay min < max in float32",
    ):
        tfinit.UniformFill(1.0, 1.0 + 1e-12, seed=1, rng="caffe2")
    with pytest.raises(ValueError, match=r"max - min <="):
        tfinit.UniformFill(-3e38, 3e38, seed=1, rng="caffe2")((2,))

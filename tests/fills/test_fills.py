"""The Caffe2 fill operators as Keras initializers: maths, dtypes, seeds, errors.

Statistical checks use fixed seeds and tolerances of 6 standard errors for the
sample size, so a correct fill fails with probability < 1e-8 per check and a fill
with the wrong scale (e.g. Glorot instead of Caffe2's LeCun rule) fails surely.
"""

import math

import keras
import numpy as np
import pytest
from _arrays import to_numpy as _np

import tfinit

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

N_SIGMA = 6


def assert_mean_std(values, mean, std, kurtosis):
    """Sample mean/std within 6 standard errors; SE(std) = std*sqrt((kurt-1)/(4n))."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    n = values.size
    assert abs(values.mean() - mean) < N_SIGMA * std / math.sqrt(n)
    assert abs(values.std() - std) < N_SIGMA * std * math.sqrt((kurtosis - 1) / (4 * n))


UNIFORM_KURTOSIS = 1.8
NORMAL_KURTOSIS = 3.0


# ------------------------------------------------------------------ random fills


@pytest.mark.parametrize(
    "shape, layout, fan_in",
    [
        ((256, 128), "caffe2", 128),
        ((128, 256), "keras", 128),
        ((64, 32, 3, 3), "caffe2", 288),
        ((3, 3, 32, 64), "keras", 288),
    ],
)
def test_xavier_fill_is_lecun_uniform_on_caffe2_fan_in(shape, layout, fan_in):
    init = tfinit.XavierFill(seed=7, layout=layout)
    values = _np(init(shape))
    limit = math.sqrt(3 / fan_in)
    assert init.limit(shape) == pytest.approx(limit, rel=1e-7)
    assert values.shape == shape and values.dtype == np.float32
    n = values.size
    assert np.all(np.abs(values) <= np.float32(limit))
    # The extremes of n uniforms come within 20/n of the limit with prob 1 - e^-20.
    assert values.max() > limit * (1 - 20 / n) and values.min() < -limit * (1 - 20 / n)
    assert_mean_std(values, 0.0, limit / math.sqrt(3), UNIFORM_KURTOSIS)


def test_xavier_fill_1d_uses_caffe2_fan_in_of_one():
    values = _np(tfinit.XavierFill(seed=3)((100_000,)))
    limit = math.sqrt(3)
    assert np.abs(values).max() <= np.float32(limit)
    assert np.abs(values).max() > limit * (1 - 20 / values.size)


@pytest.mark.parametrize(
    "shape, layout, fan_out",
    [
        ((256, 128), "caffe2", 256),
        ((128, 256), "keras", 256),
        ((64, 32, 3, 3), "caffe2", 576),
        ((3, 3, 32, 64), "keras", 576),
    ],
)
def test_msra_fill_is_he_normal_on_caffe2_fan_out(shape, layout, fan_out):
    init = tfinit.MSRAFill(seed=11, layout=layout)
    values = _np(init(shape))
    std = math.sqrt(2 / fan_out)
    assert init.std(shape) == pytest.approx(std, rel=1e-7)
    assert_mean_std(values, 0.0, std, NORMAL_KURTOSIS)
    # Not truncated: a normal sample this size has values beyond 3 std (P(none) < e^-80).
    assert np.abs(values).max() > 3 * std


def test_xavier_and_msra_match_their_keras_equivalents_on_keras_layouts():
    # Same keras.random call and the same scale => the same numbers, up to the
    # float32 rounding of Caffe2's limit/std.
    for shape in [(128, 256), (3, 3, 32, 64)]:
        ours = _np(tfinit.XavierFill(seed=5)(shape))
        ref = _np(keras.initializers.VarianceScaling(1.0, "fan_in", "uniform", seed=5)(shape))
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0)
        ours = _np(tfinit.MSRAFill(seed=5)(shape))
        ref = _np(
            keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal", seed=5)(shape)
        )
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0)


def test_gaussian_fill_moments_and_not_truncated():
    values = _np(tfinit.GaussianFill(mean=2.0, std=0.5, seed=1)((200, 200)))
    assert_mean_std(values, 2.0, 0.5, NORMAL_KURTOSIS)
    assert np.abs(values - 2.0).max() > 3 * 0.5


def test_gaussian_fill_std_zero_gives_the_mean():
    values = _np(tfinit.GaussianFill(mean=1.25, std=0.0, seed=1)((4, 5)))
    np.testing.assert_array_equal(values, np.full((4, 5), 1.25, np.float32))


def test_uniform_fill_half_open_range_and_moments():
    values = _np(tfinit.UniformFill(min=-2.0, max=3.0, seed=4)((300, 300)))
    assert values.min() >= -2.0 and values.max() < 3.0
    assert_mean_std(values, 0.5, 5 / math.sqrt(12), UNIFORM_KURTOSIS)


def test_uniform_fill_defaults_are_zero_one():
    init = tfinit.UniformFill(seed=2)
    assert (init.min, init.max) == (0.0, 1.0)
    values = _np(init((1000,)))
    assert values.min() >= 0.0 and values.max() < 1.0


def test_uniform_int_fill_includes_max_and_is_uniform():
    values = _np(tfinit.UniformIntFill(min=0, max=5, seed=9)((60_000,)))
    assert values.dtype == np.int32
    counts = np.bincount(values, minlength=6)
    assert counts.size == 6  # nothing above max
    n, p = values.size, 1 / 6
    # Binomial count per value: mean n*p, SE sqrt(n p (1-p)); max=5 must appear.
    assert np.all(np.abs(counts - n * p) < N_SIGMA * math.sqrt(n * p * (1 - p)))


def test_uniform_int_fill_negative_and_wide_ranges():
    values = _np(tfinit.UniformIntFill(min=-3, max=-1, seed=1)((1000,)))
    assert set(np.unique(values)) == {-3, -2, -1}
    wide = _np(tfinit.UniformIntFill(min=0, max=2**31 - 1, seed=1)((1000,), dtype="int64"))
    assert wide.dtype == np.int64 and wide.min() >= 0 and wide.max() <= 2**31 - 1


def test_unique_uniform_fill_permutation_when_range_equals_count():
    values = _np(tfinit.UniqueUniformFill(0, 49, seed=3)((50,)))
    np.testing.assert_array_equal(np.sort(values), np.arange(50))


def test_unique_uniform_fill_avoids_values_and_stays_distinct():
    avoid = [0, 3, 4, 9, 100]  # 100 is outside the range and so frees nothing
    values = _np(tfinit.UniqueUniformFill(0, 9, avoid=avoid, seed=5)((2, 3)))
    assert values.shape == (2, 3)
    flat = values.reshape(-1)
    assert len(set(flat.tolist())) == 6
    assert set(flat.tolist()) == {1, 2, 5, 6, 7, 8}  # all 6 available values


def test_unique_uniform_fill_large_range_is_spread():
    values = _np(tfinit.UniqueUniformFill(0, 2**30, seed=1)((1000,), dtype="int64"))
    assert len(np.unique(values)) == 1000
    assert values.min() >= 0 and values.max() <= 2**30
    # Uniform over the range: the mean is within 6 SE of the middle.
    assert abs(values.mean() - 2**29) < N_SIGMA * (2**30 / math.sqrt(12)) / math.sqrt(1000)


# ------------------------------------------------------------------ deterministic fills


def test_constant_fill_value_and_own_dtype():
    np.testing.assert_array_equal(_np(tfinit.ConstantFill()((2, 3))), np.zeros((2, 3), np.float32))
    out = tfinit.ConstantFill(value=7, dtype="int64")((3,))
    assert _np(out).dtype == np.int64 and _np(out).tolist() == [7, 7, 7]
    # The call's dtype wins when the cast is exact.
    assert _np(tfinit.ConstantFill(value=7, dtype="int64")((2,), dtype="float16")).tolist() == [
        7.0,
        7.0,
    ]


def test_range_fill_row_major():
    np.testing.assert_array_equal(
        _np(tfinit.RangeFill()((2, 3))), np.arange(6, dtype=np.float32).reshape(2, 3)
    )
    assert _np(tfinit.RangeFill()((4,), dtype="int32")).tolist() == [0, 1, 2, 3]


def test_diagonal_fill_caffe2_tall_matrix_wraps():
    values = _np(tfinit.DiagonalFill(value=1.0, layout="caffe2")((7, 5)))
    expected = np.zeros((7, 5), np.float32)
    for i in range(5):
        expected[i, i] = 1
    expected[6, 0] = 1  # flat index 36 = 6 * step(6)
    np.testing.assert_array_equal(values, expected)


def test_diagonal_fill_caffe2_wide_matrix_main_diagonal_only():
    values = _np(tfinit.DiagonalFill(value=2.0, layout="caffe2")((3, 5)))
    expected = np.zeros((3, 5), np.float32)
    expected[[0, 1, 2], [0, 1, 2]] = 2
    np.testing.assert_array_equal(values, expected)


def test_diagonal_fill_keras_layout_is_the_caffe2_parameter_transposed():
    caffe2 = _np(tfinit.DiagonalFill(value=3.0, layout="caffe2")((7, 5)))
    keras_layout = _np(tfinit.DiagonalFill(value=3.0)((5, 7)))
    np.testing.assert_array_equal(keras_layout, caffe2.T)


def test_diagonal_fill_nd_equal_dims_step():
    values = _np(tfinit.DiagonalFill(value=1.0)((3, 3, 3)))
    flat = values.reshape(-1)
    assert np.flatnonzero(flat).tolist() == [0, 13, 26]  # step = 1 + 3 + 9
    assert all(values[i, i, i] == 1 for i in range(3))


def test_diagonal_fill_int_value_dtype():
    values = _np(tfinit.DiagonalFill(value=4, dtype="int64")((2, 2)))
    assert values.dtype == np.int64 and values.tolist() == [[4, 0], [0, 4]]


@pytest.mark.parametrize(
    "cls, dtype, values",
    [
        (tfinit.GivenTensorFill, np.float32, [0.5, -1.25, 3.0, 4.0]),
        (tfinit.GivenTensorDoubleFill, np.float64, [0.1, 0.2, 0.3, 1e100]),
        (tfinit.GivenTensorIntFill, np.int32, [1, -2, 3, 2**31 - 1]),
        (tfinit.GivenTensorInt64Fill, np.int64, [1, -2, 3, 2**40]),
        (tfinit.GivenTensorInt16Fill, np.int16, [1, -2, 3, 32767]),
        (tfinit.GivenTensorBoolFill, np.bool_, [True, False, 1, 0]),
    ],
)
def test_given_tensor_fills_give_exact_values_in_their_dtype(cls, dtype, values):
    out = _np(cls(values, shape=[2, 2])((2, 2)))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.asarray(values).astype(dtype).reshape(2, 2))


def test_given_tensor_fill_rounds_to_float32_like_caffe2_arguments():
    out = _np(tfinit.GivenTensorFill([0.1])((1,), dtype="float64"))
    assert out[0] == np.float64(np.float32(0.1))


def test_given_tensor_fill_without_shape_takes_the_call_shape_row_major():
    out = _np(tfinit.GivenTensorFill(np.arange(6))((3, 2)))
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(3, 2))


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize(
    "init",
    [
        tfinit.XavierFill(seed=1),
        tfinit.MSRAFill(seed=1),
        tfinit.GaussianFill(std=0.1, seed=1),
        tfinit.UniformFill(seed=1),
        tfinit.ConstantFill(0.5),
        tfinit.RangeFill(),
        tfinit.DiagonalFill(1.0),
        tfinit.GivenTensorFill(np.linspace(-1, 1, 32)),
    ],
    ids=lambda i: type(i).__name__,
)
def test_low_and_high_precision_outputs(init, dtype):
    out = init((4, 8), dtype=dtype)
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    assert np.all(np.isfinite(_np(keras.ops.cast(out, "float32"))))


def test_float16_output_is_the_rounded_float32_values():
    given = np.linspace(-1, 1, 32, dtype=np.float32)
    out = _np(tfinit.GivenTensorFill(given)((32,), dtype="float16"))
    np.testing.assert_array_equal(out, given.astype(np.float16))


def test_random_integer_fills_cast_exactly_to_float():
    out = _np(tfinit.UniformIntFill(0, 5, seed=1)((100,), dtype="float32"))
    assert out.dtype == np.float32 and set(np.unique(out)) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}


# ------------------------------------------------------------------ seeds


def test_int_seed_repeats_and_different_seeds_differ():
    a, b = tfinit.GaussianFill(seed=3), tfinit.GaussianFill(seed=3)
    np.testing.assert_array_equal(_np(a((10,))), _np(a((10,))))
    np.testing.assert_array_equal(_np(a((10,))), _np(b((10,))))
    assert not np.array_equal(_np(a((10,))), _np(tfinit.GaussianFill(seed=4)((10,))))


def test_seed_generator_advances():
    init = tfinit.UniformFill(seed=keras.random.SeedGenerator(1))
    assert not np.array_equal(_np(init((10,))), _np(init((10,))))


def test_unique_uniform_fill_follows_keras_seed_rules():
    seeded = tfinit.UniqueUniformFill(0, 1000, seed=2)
    np.testing.assert_array_equal(_np(seeded((20,))), _np(seeded((20,))))
    advancing = tfinit.UniqueUniformFill(0, 1000, seed=keras.random.SeedGenerator(2))
    assert not np.array_equal(_np(advancing((20,))), _np(advancing((20,))))


# ------------------------------------------------------------------ zero-sized shapes


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0,), (2, 0, 3, 3)])
@pytest.mark.parametrize(
    "init",
    [
        tfinit.XavierFill(seed=1),
        tfinit.GaussianFill(seed=1),
        tfinit.UniformIntFill(seed=1),
        tfinit.RangeFill(),
    ],
    ids=lambda i: type(i).__name__,
)
def test_zero_sized_shapes_give_empty_tensors(init, shape):
    assert tuple(init(shape).shape) == shape


def test_msra_zero_sized_shape_that_killed_caffe2():
    assert tuple(tfinit.MSRAFill()((5, 0)).shape) == (5, 0)  # Caffe2: SIGFPE


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "make, error, pattern",
    [
        (
            lambda: tfinit.UniformFill(min=1.0, max=1.0),
            ValueError,
            "UniformFill.*`min`.*`max`.*min=1.0",
        ),
        (lambda: tfinit.UniformFill(min=2.0, max=1.0), ValueError, "UniformFill.*bigger than min"),
        (lambda: tfinit.UniformIntFill(min=5, max=5), ValueError, "UniformIntFill.*`min`"),
        (
            lambda: tfinit.UniformIntFill(min=0.5, max=5),
            TypeError,
            "UniformIntFill.*`min`.*integer",
        ),
        (lambda: tfinit.UniqueUniformFill(min=3, max=1), ValueError, "UniqueUniformFill.*`min`"),
        (
            lambda: tfinit.UniqueUniformFill(0, 5, avoid=[0.5]),
            TypeError,
            "UniqueUniformFill.*`avoid`",
        ),
        (lambda: tfinit.GaussianFill(std=-1.0), ValueError, "GaussianFill.*`std`.*>= 0.*-1.0"),
        (lambda: tfinit.GaussianFill(mean="0"), TypeError, "GaussianFill.*`mean`.*real number"),
        (lambda: tfinit.UniformFill(max=float("inf")), ValueError, "UniformFill.*`max`.*finite"),
        (
            lambda: tfinit.GivenTensorFill([[1, 2], [3]]),
            ValueError,
            "GivenTensorFill.*`values`.*array",
        ),
        (
            lambda: tfinit.GivenTensorFill(["a", "b"]),
            TypeError,
            "GivenTensorFill.*`values`.*numbers",
        ),
        (
            lambda: tfinit.GivenTensorFill([1.0] * 5, shape=[2, 3]),
            ValueError,
            "GivenTensorFill.*6 vs 5",
        ),
        (lambda: tfinit.GivenTensorIntFill([1.5]), ValueError, "GivenTensorIntFill.*1.5.*int32"),
        (lambda: tfinit.GivenTensorBoolFill([2]), ValueError, "GivenTensorBoolFill.*2.*bool"),
        (
            lambda: tfinit.ConstantFill(value=2.5, dtype="int32"),
            ValueError,
            "ConstantFill.*2.5.*int32",
        ),
        (lambda: tfinit.ConstantFill(dtype="float17"), ValueError, "ConstantFill.*`dtype`"),
        (lambda: tfinit.XavierFill(layout="NCHW"), ValueError, "XavierFill.*`layout`"),
        (lambda: tfinit.XavierFill(seed="1"), ValueError, "XavierFill.*`seed`"),
    ],
)
def test_bad_arguments_are_refused_at_construction(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize(
    "init, shape, dtype, error, pattern",
    [
        (
            tfinit.GivenTensorFill([1.0] * 5),
            (2, 3),
            None,
            ValueError,
            r"GivenTensorFill.*\(2, 3\) has 6.*`values` has 5",
        ),
        (
            tfinit.GivenTensorFill([1.0] * 6, shape=[3, 2]),
            (2, 3),
            None,
            ValueError,
            "GivenTensorFill.*built for shape.*transposed",
        ),
        (tfinit.DiagonalFill(1.0), (5,), None, ValueError, "DiagonalFill.*at least 2 dimensions"),
        (tfinit.DiagonalFill(1.0), (2, 3, 3), None, ValueError, "DiagonalFill.*equal"),
        (tfinit.MSRAFill(), (5,), None, ValueError, "MSRAFill.*at least 2 dimensions"),
        (tfinit.XavierFill(), (), None, ValueError, "XavierFill.*0-d"),
        (tfinit.MSRAFill(), (), None, ValueError, "MSRAFill"),
        (
            tfinit.UniqueUniformFill(0, 49),
            (51,),
            None,
            ValueError,
            "UniqueUniformFill.*51.*50 available",
        ),
        (
            tfinit.UniqueUniformFill(0, 9, avoid=[1]),
            (10,),
            None,
            ValueError,
            "UniqueUniformFill.*9 available",
        ),
        (tfinit.GaussianFill(), (3,), "int32", ValueError, "GaussianFill.*float dtype.*int32"),
        (tfinit.RangeFill(), (3000,), "float16", ValueError, "RangeFill.*float16"),
        (tfinit.ConstantFill(70000.0), (2,), "float16", ValueError, "ConstantFill.*70000.*float16"),
        (tfinit.ConstantFill(300), (2,), "int8", ValueError, "ConstantFill.*300.*int8"),
        (tfinit.UniformIntFill(0, 300), (2,), "int8", ValueError, "UniformIntFill.*300.*int8"),
        (tfinit.ConstantFill(), (2, -1), None, ValueError, "ConstantFill.*negative"),
        (tfinit.ConstantFill(), (2, None), None, ValueError, "ConstantFill.*fully known"),
        (tfinit.ConstantFill(), 5, None, TypeError, "ConstantFill.*sequence"),
    ],
)
def test_bad_calls_are_refused_with_the_operator_named(init, shape, dtype, error, pattern):
    with pytest.raises(error, match=pattern):
        init(shape, dtype=dtype)


@pytest.mark.parametrize(
    "cls, dtype",
    [
        (tfinit.GivenTensorFill, "float32"),
        (tfinit.GivenTensorDoubleFill, "float64"),
        (tfinit.GivenTensorIntFill, "int32"),
    ],
)
def test_given_tensor_fill_large_values_are_a_private_copy(cls, dtype):
    """Large values reach the variable through one private copy (no memory shared either way)."""
    source = (np.arange(2**19) % 1000).astype(dtype)  # 2-4 MiB: takes the one-copy path
    expected = source.copy()
    fill = cls(source)
    variable = keras.Variable(fill, shape=source.shape, dtype=dtype)
    np.testing.assert_array_equal(_np(variable), expected)
    source[:10] = 7  # the caller's array changes: the variable does not
    np.testing.assert_array_equal(_np(variable)[:10], expected[:10])
    variable.assign_add(keras.ops.ones(source.shape, dtype))  # updates stay in the variable
    np.testing.assert_array_equal(source[10:20], expected[10:20])
    np.testing.assert_array_equal(_np(variable)[10:20], expected[10:20] + 1)
    again = _np(fill(source.shape))  # every call gives its own tensor of the current values
    np.testing.assert_array_equal(again[:10], 7)
    np.testing.assert_array_equal(_np(variable)[:10], expected[:10] + 1)

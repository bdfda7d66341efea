"""tfinit.initializers: Caffe2's initializer family creating TensorFlow variables.

The first tests port the scenarios of Caffe2's ``modeling/initializers_test.py`` (default
op, custom op, class vs instance, PseudoFP16, external parameters) through a minimal
stand-in for ``brew.fc`` that calls ``update_initializer`` and ``create_param`` the way
brew does; the rest check names, dtypes, values and errors. Tests that create TensorFlow
variables are marked ``tensorflow_only``; the others also run under ``KERAS_BACKEND=jax``
(``.ci/run``), where the classes work as Keras initializers.
"""

import functools

import keras
import ml_dtypes
import numpy as np
import pytest

import tfinit
from tfinit import (
    ExternalInitializer,
    Initializer,
    ParameterInfo,
    PseudoFP16Initializer,
    ReversePseudoFP16Initializer,
    update_initializer,
)
from tfinit.initializers import create_master_copy_pair

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

TENSORFLOW_ONLY = pytest.mark.tensorflow_only


def brew_fc(init_net, name, dim_in, dim_out, weight_init=None, bias_init=None,
            WeightInitializer=None, BiasInitializer=None, external=None):  # noqa: N803
    """What brew.fc does with initializers (Caffe2 layout: weight [out, in])."""
    xavier = ("XavierFill", {"layout": "caffe2"})
    w_init = update_initializer(WeightInitializer, weight_init, xavier)
    b_init = update_initializer(BiasInitializer, bias_init, ("ConstantFill", {}))
    if external is not None:  # ModelHelper(init_params=False)
        w_init = b_init = external
    w = w_init.create_param(param_name=name + "_w", init_net=init_net, shape=[dim_out, dim_in])
    b = b_init.create_param(param_name=name + "_b", init_net=init_net, shape=[dim_out])
    return w_init, w, b


# ---------------------------------------------------------------- Caffe2's scenarios


@TENSORFLOW_ONLY
def test_fc_initializer_default_custom_and_no_class(tf):
    net = tf.Module()
    # fc1: nothing given -> Initializer with brew's default XavierFill.
    init, w, b = brew_fc(net, "fc1", dim_in=16, dim_out=8)
    assert type(init) is Initializer and init.operator_name == "XavierFill"
    assert w.name == "fc1_w" and w.param.name == "fc1_w:0"
    assert w.shape == (8, 16) and w.param.shape == (8, 16) and w.dtype == tf.float32
    limit = np.sqrt(np.float32(3) / np.float32(16))  # Caffe2 fan_in = numel / shape[0] = 16
    values = w.param.numpy()
    assert np.all(np.abs(values) <= limit)
    # 128 draws all inside half the limit has probability 2**-128.
    assert np.abs(values).max() > limit / 2
    np.testing.assert_array_equal(b.param.numpy(), np.zeros(8, np.float32))
    # fc2: no operator name set, the class given -> the default operator.
    init, w, _ = brew_fc(net, "fc2", 1, 1, WeightInitializer=Initializer)
    assert type(init) is Initializer and init.operator_name == "XavierFill"
    # fc3: class + custom operator.
    init, w, _ = brew_fc(net, "fc3", 2, 3, WeightInitializer=Initializer,
                         weight_init=("ConstantFill", {"value": 0.5}))
    assert init.operator_name == "ConstantFill" and init.operator_kwargs == {"value": 0.5}
    np.testing.assert_array_equal(w.param.numpy(), np.full((3, 2), 0.5, np.float32))
    # fc4: operator given, no class -> plain Initializer.
    init, w, _ = brew_fc(net, "fc4", 1, 1, WeightInitializer=None,
                         weight_init=("ConstantFill", {}))
    assert type(init) is Initializer and w.param.numpy().tolist() == [[0.0]]
    assert sorted(net.tfinit_params) == [f"fc{i}_{p}" for i in range(1, 5) for p in "bw"]


@pytest.mark.parametrize("compute_dtype, np_dtype", [
    ("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)])
@TENSORFLOW_ONLY
def test_fc_pseudo_fp16_initializer(tf, compute_dtype, np_dtype):
    net = tf.Module()
    cls = PseudoFP16Initializer if compute_dtype == "float16" else (
        functools.partial(PseudoFP16Initializer, compute_dtype="bfloat16"))
    # default operator (XavierFill), then a specified one.
    init, w, _ = brew_fc(net, "fc2", 4, 3, WeightInitializer=cls)
    assert isinstance(init, PseudoFP16Initializer) and init.operator_name == "XavierFill"
    assert w.name == "fc2_w" and w.dtype == tf.as_dtype(compute_dtype) and w.shape == (3, 4)
    master = w.blob_copy[tf.float32]
    assert list(w.blob_copy) == [tf.float32]
    assert master.name == "fc2_w_fp32:0" and master.dtype == tf.float32 and master.shape == (3, 4)
    # P == FloatToHalf(P_fp32), which is numpy's round-to-nearest-even cast.
    np.testing.assert_array_equal(w.param.numpy().view(np.uint16),
                                  master.numpy().astype(np_dtype).view(np.uint16))
    _, w, _ = brew_fc(net, "fc3", 2, 2, WeightInitializer=cls,
                      weight_init=("ConstantFill", {"value": 0.1}))
    np.testing.assert_array_equal(w.blob_copy[tf.float32].numpy(), np.full((2, 2), np.float32(0.1)))
    assert w.param.numpy()[0, 0] == np.float32(0.1).astype(np_dtype)
    assert w.param.numpy()[0, 0] != np.float32(0.1)  # really rounded to 16 bits
    assert {"fc2_w", "fc2_w_fp32", "fc3_w", "fc3_w_fp32"} <= set(net.tfinit_params)


@TENSORFLOW_ONLY
def test_fc_external_initializer_creates_no_values_of_its_own():
    rng = np.random.default_rng(1)
    given = {"fc1_w": rng.standard_normal((3, 2)).astype(np.float32),
             "fc1_b": rng.standard_normal(3).astype(np.float32)}
    net = {}
    init, w, b = brew_fc(net, "fc1", 2, 3, external=ExternalInitializer(given))
    np.testing.assert_array_equal(w.param.numpy(), given["fc1_w"])
    np.testing.assert_array_equal(b.param.numpy(), given["fc1_b"])
    assert w.name == "fc1_w" and w.blob_copy is None
    assert set(net) == {"fc1_w", "fc1_b"}


@TENSORFLOW_ONLY
def test_instance_passed_to_create_param_directly():
    # model.create_param(initializer=<instance>) in Caffe2: no update_initializer involved.
    info = Initializer("RangeFill").create_param(param_name="r", shape=[2, 3], init_net=None)
    np.testing.assert_array_equal(info.param.numpy(), np.arange(6).reshape(2, 3))


# ---------------------------------------------------------------- update / update_initializer


def test_update_sets_operator_once():
    init = Initializer()
    assert init.operator_name is None and init.operator_kwargs == {}
    init.update("ConstantFill", {"value": 2.0})
    assert init.operator_name == "ConstantFill" and init.operator_kwargs == {"value": 2.0}
    with pytest.raises(ValueError, match="operator name overwrites are not allowed") as err:
        init.update("XavierFill", {})
    assert "'ConstantFill'" in str(err.value) and "'XavierFill'" in str(err.value)
    assert init.operator_name == "ConstantFill"
    with pytest.raises(ValueError, match="overwrites are not allowed"):
        PseudoFP16Initializer("ConstantFill").update("ConstantFill", {})


def test_failed_update_leaves_initializer_unset():
    init = Initializer()
    with pytest.raises(ValueError, match="Unknown fill operator 'NoSuchFill'"):
        init.update("NoSuchFill", {})
    assert init.operator_name is None and init.fill is None
    init.update("ConstantFill", {})
    assert init.operator_name == "ConstantFill"


def test_unknown_operator_or_argument_fails_at_construction():
    with pytest.raises(ValueError, match="Unknown fill operator 'XavierFil'.*XavierFill"):
        Initializer("XavierFil")
    with pytest.raises(TypeError, match="GaussianFill: unexpected argument.*'stdev'.*'std'"):
        Initializer("GaussianFill", stdev=0.1)
    with pytest.raises(ValueError, match="std"):
        Initializer("GaussianFill", std=-1.0)
    with pytest.raises(TypeError, match="must be a string"):
        Initializer(3)


@TENSORFLOW_ONLY
def test_layout_is_checked_and_dropped_for_layout_free_fills():
    init = Initializer("ConstantFill", value=1.0, layout="caffe2")
    assert init.operator_kwargs == {"value": 1.0, "layout": "caffe2"}
    assert init.create_param(param_name="b", shape=[2]).param.numpy().tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="layout"):
        Initializer("ConstantFill", layout="nchw")


@TENSORFLOW_ONLY
def test_layout_caffe2_reads_fans_from_the_front():
    # [out=2, in=50]: Caffe2 fan_in 50; read as Keras [in, out] it would be 100 / 50 = 2.
    info = Initializer("XavierFill", layout="caffe2", seed=3).create_param(
        param_name="w", shape=[2, 50])
    limit = np.sqrt(np.float32(3) / np.float32(50))
    values = info.param.numpy()
    # 100 draws all inside half the limit has probability 2**-100.
    assert np.all(np.abs(values) <= limit) and np.abs(values).max() > limit / 2


def test_update_initializer_four_cases():
    default = ("ConstantFill", {"value": 1.0})
    custom = ("ConstantFill", {"value": 2.0})
    cases = [(None, None, Initializer, 1.0), (None, custom, Initializer, 2.0),
             (ReversePseudoFP16Initializer, None, ReversePseudoFP16Initializer, 1.0),
             (ReversePseudoFP16Initializer, custom, ReversePseudoFP16Initializer, 2.0)]
    for cls, given, expected_type, value in cases:
        init = update_initializer(cls, given, default)
        assert type(init) is expected_type
        assert init.operator_name == "ConstantFill" and init.operator_kwargs == {"value": value}


def test_update_initializer_errors():
    with pytest.raises(TypeError, match="must be a class.*instance of Initializer"):
        update_initializer(Initializer("XavierFill"), None, ("XavierFill", {}))
    with pytest.raises(TypeError, match="must be a class.*instance of str"):
        update_initializer("Initializer", None, ("XavierFill", {}))
    with pytest.raises(TypeError, match="ExternalInitializer takes no fill operator"):
        update_initializer(ExternalInitializer, None, ("XavierFill", {}))
    with pytest.raises(TypeError, match=r"\(operator_name, kwargs_dict\) pair"):
        update_initializer(None, "XavierFill", ("XavierFill", {}))
    with pytest.raises(TypeError, match="pair"):
        update_initializer(None, None, None)
    with pytest.raises(ValueError, match="Unknown fill operator 'NoSuchFill'"):
        update_initializer(None, ("NoSuchFill", {}), ("XavierFill", {}))


# ---------------------------------------------------------------- create_param


@TENSORFLOW_ONLY
def test_create_param_names_shapes_dtypes_and_record(tf):
    info = Initializer("ConstantFill", value=3.0).create_param(
        param_name="scale", shape=(2, 1, 3), dtype="float64", trainable=False)
    assert isinstance(info, ParameterInfo)
    assert info.name == "scale" and str(info) == "scale" and info.blob is info.param
    assert info.param.dtype == tf.float64 and not info.param.trainable
    assert info.shape == (2, 1, 3) and info.size == 6 and info.length == 1
    assert info.param_id is None and info.key is None and info.grad is None
    assert info.blob_copy is None and info.variables == [info.param]
    np.testing.assert_array_equal(info.param.numpy(), np.full((2, 1, 3), 3.0))
    ints = Initializer("GivenTensorIntFill", values=[1, 2]).create_param(param_name="i", shape=[2])
    assert ints.param.dtype == tf.int32  # the fill's own dtype without an asked one


@TENSORFLOW_ONLY
def test_create_param_inside_name_scope_is_prefixed_like_caffe2(tf):
    with tf.name_scope("gpu_0"):
        info = PseudoFP16Initializer("ConstantFill").create_param(param_name="w", shape=[1])
    assert info.name == "gpu_0/w"
    assert info.blob_copy[tf.float32].name == "gpu_0/w_fp32:0"


@TENSORFLOW_ONLY
def test_create_param_argument_errors(tf):
    init = Initializer("ConstantFill")
    with pytest.raises(TypeError, match="positional order was \\(param_name, init_net, shape\\)"):
        init.create_param("w", tf.Module(), [2])
    with pytest.raises(ValueError, match="negative"):
        init.create_param(param_name="w", shape=[-1])
    with pytest.raises(TypeError, match="Argument `param_name` must be a non-empty string"):
        init.create_param(param_name="", shape=[1])
    with pytest.raises(
        TypeError,
        match="Argument `init_net` must be None, a tf.Module.*Received: init_net of type list",
    ):
        init.create_param(param_name="w", shape=[1], init_net=[])
    with pytest.raises(ValueError, match="no fill operator yet"):
        Initializer().create_param(param_name="w", shape=[1])
    with pytest.raises(ValueError, match="no fill operator yet"):
        Initializer()((2,))


@TENSORFLOW_ONLY
def test_duplicate_name_in_one_init_net_is_refused_before_creating(tf, monkeypatch):
    net = tf.Module()
    Initializer("ConstantFill").create_param(param_name="w", shape=[1], init_net=net)
    PseudoFP16Initializer("ConstantFill").create_param(param_name="p", shape=[1], init_net=net)
    with tf.name_scope("s"):
        Initializer("ConstantFill").create_param(param_name="w", shape=[1], init_net=net)
    assert sorted(net.tfinit_params) == ["p", "p_fp32", "s/w", "w"]
    created = []
    monkeypatch.setattr(tf, "Variable", lambda *a, **k: created.append(k))
    with pytest.raises(ValueError, match="already holds a variable named 'w'"):
        Initializer("ConstantFill", value=1.0).create_param(param_name="w", shape=[1], init_net=net)
    with pytest.raises(ValueError, match="named 'p_fp32'"):
        ReversePseudoFP16Initializer("ConstantFill").create_param(
            param_name="p_fp32", shape=[1], init_net=net)
    with pytest.raises(ValueError, match="named 'w'"):
        ExternalInitializer({"w": np.ones(1)}).create_param(param_name="w", shape=[1], init_net=net)
    with tf.name_scope("s"), pytest.raises(ValueError, match="named 's/w'"):
        Initializer("ConstantFill").create_param(param_name="w", shape=[1], init_net=net)
    assert created == []
    monkeypatch.undo()
    assert net.tfinit_params["w"].numpy().tolist() == [0.0]


@TENSORFLOW_ONLY
def test_unseeded_fill_draws_new_values_per_parameter_seeded_repeats():
    unseeded = Initializer("GaussianFill")
    a = unseeded.create_param(param_name="a", shape=[64]).param.numpy()
    b = unseeded.create_param(param_name="b", shape=[64]).param.numpy()
    assert not np.array_equal(a, b)
    seeded = Initializer("GaussianFill", seed=7)
    c = seeded.create_param(param_name="c", shape=[64]).param.numpy()
    d = seeded.create_param(param_name="d", shape=[64]).param.numpy()
    np.testing.assert_array_equal(c, d)


@TENSORFLOW_ONLY
def test_checkpoint_round_trip_of_variables_created_in_init_net(tf, tmp_path):
    def build(value):
        net = tf.Module()
        for cls in (Initializer, PseudoFP16Initializer, ReversePseudoFP16Initializer):
            cls("ConstantFill", value=value).create_param(
                param_name=cls.__name__[:4], shape=[2, 2], init_net=net)
        return net

    saved = build(0.0)
    rng = np.random.default_rng(0)
    for var in saved.tfinit_params.values():
        var.assign(rng.standard_normal((2, 2)).astype(var.dtype.as_numpy_dtype))
    prefix = tf.train.Checkpoint(net=saved).save(str(tmp_path / "ck"))
    keys = {k for k, _ in tf.train.list_variables(prefix)}
    assert {f"net/tfinit_params/{n}/.ATTRIBUTES/VARIABLE_VALUE"
            for n in ("Init", "Pseu", "Pseu_fp32", "Reve", "Reve_fp16")} <= keys
    restored = build(1.0)
    tf.train.Checkpoint(net=restored).restore(prefix).assert_existing_objects_matched()
    assert set(restored.tfinit_params) == set(saved.tfinit_params)
    for name, var in saved.tfinit_params.items():
        np.testing.assert_array_equal(restored.tfinit_params[name].numpy(), var.numpy())


# ---------------------------------------------------------------- PseudoFP16 pairs


@TENSORFLOW_ONLY
def test_reverse_pseudo_fp16_names_and_values(tf):
    for compute, suffix, np_dtype in (("float16", "_fp16", np.float16),
                                      ("bfloat16", "_bf16", ml_dtypes.bfloat16)):
        info = ReversePseudoFP16Initializer("GaussianFill", seed=5, compute_dtype=compute)\
            .create_param(param_name="P", shape=[8, 8])
        assert info.name == "P" and info.dtype == tf.float32 and info.param.trainable
        copy = info.blob_copy[tf.as_dtype(compute)]
        assert list(info.blob_copy) == [tf.as_dtype(compute)]
        assert copy.name == f"P{suffix}:0" and copy.dtype == tf.as_dtype(compute)
        assert not copy.trainable
        np.testing.assert_array_equal(copy.numpy().view(np.uint16),
                                      info.param.numpy().astype(np_dtype).view(np.uint16))


@TENSORFLOW_ONLY
def test_pseudo_fp16_fill_runs_in_fp32_then_casts(tf):
    # Same seed, same draw: the master equals the fp32 Initializer's variable exactly.
    fp32 = Initializer("GaussianFill", seed=11).create_param(param_name="a", shape=[256])
    pair = PseudoFP16Initializer("GaussianFill", seed=11).create_param(param_name="b", shape=[256])
    master = pair.blob_copy[tf.float32]
    np.testing.assert_array_equal(master.numpy(), fp32.param.numpy())
    np.testing.assert_array_equal(pair.param.numpy(), fp32.param.numpy().astype(np.float16))
    assert pair.param.trainable and not master.trainable
    assert pair.variables == [pair.param, master]


@TENSORFLOW_ONLY
def test_pseudo_fp16_rounding_edges_match_caffe2_float_to_half():
    values = [65504.0, 65519.0, 2.0**-25, 3 * 2.0**-25, 1 + 2.0**-11, -0.0]
    info = PseudoFP16Initializer("GivenTensorFill", values=values).create_param(
        param_name="e", shape=[6])
    expected = np.array([65504, 65504, 0, 2.0**-23, 1, -0.0], np.float16)  # docs: "Dtype rules"
    np.testing.assert_array_equal(info.param.numpy().view(np.uint16), expected.view(np.uint16))


@TENSORFLOW_ONLY
def test_pseudo_fp16_overflow_is_refused_not_inf():
    with pytest.raises(ValueError, match="'big'.*65520.*float16's range"):
        PseudoFP16Initializer("ConstantFill", value=65520.0).create_param(
            param_name="big", shape=[2])
    info = PseudoFP16Initializer("ConstantFill", value=65520.0, compute_dtype="bfloat16")\
        .create_param(param_name="big", shape=[2])
    assert info.param.numpy()[0] == 65536.0  # bfloat16 rounding of 65520, finite


@TENSORFLOW_ONLY
def test_pseudo_fp16_refuses_integer_requests():
    with pytest.raises(ValueError, match="refusing integer dtype int32"):
        PseudoFP16Initializer("ConstantFill").create_param(param_name="i", shape=[1], dtype="int32")
    with pytest.raises(ValueError,
                       match="argument `compute_dtype` must be 'float16' or 'bfloat16'.*int8"):
        PseudoFP16Initializer("ConstantFill", compute_dtype="int8")
    with pytest.raises(ValueError, match="compute_dtype.*'float32'"):
        ReversePseudoFP16Initializer("ConstantFill", compute_dtype="float32")
    with pytest.raises(ValueError, match="UniformIntFill gives int32 values.*floating fill"):
        PseudoFP16Initializer("UniformIntFill", min=0, max=3)
    with pytest.raises(ValueError, match="ConstantFill gives int64"):
        ReversePseudoFP16Initializer().update("ConstantFill", {"value": 1, "dtype": "int64"})
    with pytest.raises(
        ValueError, match="primary variable 'p' is float16.*Received: dtype=float32"
    ):
        PseudoFP16Initializer("ConstantFill").create_param(param_name="p", shape=[1],
                                                           dtype="float32")


@TENSORFLOW_ONLY
def test_create_master_copy_pair_for_reuse(tf):
    calls = []

    def make_variable(initial_value, name, dtype, trainable):
        calls.append((name, tf.as_dtype(dtype).name, trainable))
        return tf.Variable(initial_value, name=name, dtype=dtype, trainable=trainable)

    info = create_master_copy_pair("k", lambda: np.array([0.1, 1e-8]), mode="pseudo_fp16",
                                   compute_dtype="bfloat16", make_variable=make_variable)
    assert calls == [("k_fp32", "float32", False), ("k", "bfloat16", True)]  # master first
    master = info.blob_copy[tf.float32]
    np.testing.assert_array_equal(master.numpy(), np.array([0.1, 1e-8], np.float32))
    np.testing.assert_array_equal(info.param.numpy(), master.numpy().astype(ml_dtypes.bfloat16))
    assert info.shape == (2,)
    with pytest.raises(ValueError, match="'n' has int32 values"):
        create_master_copy_pair("n", np.array([1], np.int32))
    with pytest.raises(ValueError, match="argument `mode` must be one of"):
        create_master_copy_pair("m", [1.0], mode="fp16")


# ---------------------------------------------------------------- as a Keras initializer


def test_initializer_as_keras_initializer_and_serialization():
    layer = keras.layers.Dense(3, kernel_initializer=Initializer("ConstantFill", value=0.25))
    layer.build((None, 4))
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((4, 3), 0.25, np.float32))
    for init in (Initializer("MSRAFill", seed=4, layout="caffe2"),
                 PseudoFP16Initializer("UniformFill", min=-1.0, max=1.0, seed=3,
                                       compute_dtype="bfloat16")):
        config = keras.initializers.serialize(init)
        clone = keras.initializers.deserialize(config)
        assert type(clone) is type(init) and clone.operator_name == init.operator_name
        assert clone.get_config() == init.get_config()
        # (the pair initializer draws only inside a mixed-precision scope: compare its fill)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone.fill((5, 6))),
                                      keras.ops.convert_to_numpy(init.fill((5, 6))))
    assert config["registered_name"] == "tfinit>PseudoFP16Initializer"


@pytest.mark.parametrize("make", [PseudoFP16Initializer, ReversePseudoFP16Initializer])
def test_pair_initializer_as_keras_initializer_refuses_outside_a_scope(make):
    """Issue 32 row 3: outside a scope a layer would get a plain fp32 variable, no master."""
    init = make("XavierFill", compute_dtype="bfloat16")
    with pytest.raises(RuntimeError, match=rf"{make.__name__} used as a Keras initializer "
                                           r"outside a mixed-precision scope.*Build the model "
                                           r"inside `with tfinit.mixed_precision.scope\("):
        keras.layers.Dense(4, kernel_initializer=init).build((None, 3))
    with pytest.raises(RuntimeError, match="outside a mixed-precision scope"):
        init((2, 2), "float32")


@TENSORFLOW_ONLY
def test_pseudo_fp16_as_keras_initializer_gives_cast_fp32_draw():
    from tfinit import mixed_precision as mp

    init = PseudoFP16Initializer("GaussianFill", seed=2)
    reference = keras.ops.convert_to_numpy(tfinit.GaussianFill(seed=2)((4, 4), "float32"))
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        _check_cast_draw(init, reference)


def _check_cast_draw(init, reference):
    half = keras.ops.convert_to_numpy(init((4, 4)))
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, reference.astype(np.float16))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(init((4, 4), "float32")), reference)
    with pytest.raises(ValueError, match="refusing integer dtype"):
        init((2,), "int32")
    with pytest.raises(ValueError, match="refusing non-float dtype bool"):
        init((2,), "bool")
    assert keras.ops.convert_to_numpy(init((4, 6), "float16", layout=None)).tobytes() == \
        reference_cast(init, (4, 6))


def reference_cast(init, shape):
    fp32 = keras.ops.convert_to_numpy(init.fill(shape, "float32"))
    return fp32.astype(np.float16).tobytes()


# ---------------------------------------------------------------- ExternalInitializer


@TENSORFLOW_ONLY
def test_external_checks_shape_and_dtype_before_creating(tf):
    ext = ExternalInitializer({"w": np.zeros((3, 2), np.float32)})
    with pytest.raises(ValueError, match=r"'w' was asked with shape \(2, 3\).*holds shape "
                                         r"\(3, 2\) \(transposed"):
        ext.create_param(param_name="w", shape=[2, 3])
    with pytest.raises(ValueError, match=r"'w' was asked with shape \(6,\).*\(3, 2\)"):
        ext.create_param(param_name="w", shape=[6])
    with pytest.raises(ValueError, match="'w' was asked as float16 but .* holds float32"):
        ext.create_param(param_name="w", shape=[3, 2], dtype="float16")
    with pytest.raises(KeyError, match="'b' is not in a mapping of 1 arrays; it holds 'w'"):
        ext.create_param(param_name="b", shape=[3])
    info = ext.create_param(param_name="w", shape=[3, 2], dtype=tf.float32, trainable=False)
    assert info.param.dtype == tf.float32 and not info.param.trainable


@TENSORFLOW_ONLY
def test_external_keeps_the_stored_dtype_and_exact_values(tf, tmp_path):
    path = tmp_path / "p.npz"
    w = np.random.default_rng(3).standard_normal((2, 5))  # float64, not converted
    np.savez(path, w=w, steps=np.array(5, np.int64))
    ext = ExternalInitializer(str(path))
    info = ext.create_param(param_name="w", shape=[2, 5])
    assert info.param.dtype == tf.float64
    np.testing.assert_array_equal(info.param.numpy(), w)
    steps = ext.create_param(param_name="steps", shape=[])
    assert steps.param.dtype == tf.int64 and steps.param.numpy() == 5


@TENSORFLOW_ONLY
def test_external_from_checkpoint_of_created_params(tf, tmp_path):
    net = tf.Module()
    made = PseudoFP16Initializer("GaussianFill", seed=9).create_param(
        param_name="fc_w", shape=[3, 3], init_net=net)
    prefix = tf.train.Checkpoint(model=net).save(str(tmp_path / "ck"))
    ext = ExternalInitializer(prefix)
    by_short = ext.create_param(param_name="fc_w_fp32", shape=[3, 3], dtype="float32")
    np.testing.assert_array_equal(by_short.param.numpy(), made.blob_copy[tf.float32].numpy())
    key = "model/tfinit_params/fc_w/.ATTRIBUTES/VARIABLE_VALUE"
    info = ext.create_param(param_name=key, shape=[3, 3])
    assert info.param.dtype == tf.float16
    np.testing.assert_array_equal(info.param.numpy(), made.param.numpy())


def test_external_source_errors_surface_at_construction(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.npz"):
        ExternalInitializer(str(tmp_path / "absent.npz"))
    with pytest.raises(TypeError, match="Argument `source` must be"):
        ExternalInitializer(3.5)
    assert "a mapping of 0 arrays" in repr(ExternalInitializer({}))


def test_keras_layer_as_init_net_is_refused_not_silently_unsaved():
    layer = keras.layers.Dense(2)
    with pytest.raises(TypeError, match="Keras Dense.*tracks only keras.Variables.*tf.Module"):
        Initializer("ConstantFill").create_param(param_name="x", shape=[1], init_net=layer)
    assert not hasattr(layer, "tfinit_params")


@TENSORFLOW_ONLY
def test_tf_train_checkpoint_as_init_net_and_dict_init_net(tf, tmp_path):
    ckpt = tf.train.Checkpoint()
    ReversePseudoFP16Initializer("ConstantFill", value=0.5).create_param(
        param_name="w", shape=[2], init_net=ckpt)
    prefix = ckpt.save(str(tmp_path / "ck"))
    keys = {k for k, _ in tf.train.list_variables(prefix)}
    assert "tfinit_params/w_fp16/.ATTRIBUTES/VARIABLE_VALUE" in keys
    params = {}
    info = Initializer("ConstantFill").create_param(param_name="b", shape=[2], init_net=params)
    assert params == {"b": info.param}


@pytest.mark.parametrize("make", [
    lambda: tfinit.XavierFill(seed=3), lambda: tfinit.ConstantFill(value=0.5),
    lambda: tfinit.Initializer("MSRAFill", seed=2)])
def test_initializers_take_keras_distribution_layout(make):
    """Keras 3.15's signature ``__call__(shape, dtype=None, layout=None)``: without a layout the
    call is the plain one; with a one-device layout the values are the same. (The PseudoFP16
    initializers draw only inside a scope: test_pseudo_fp16_as_keras_initializer_...)"""
    init = make()
    dtype = "float32"
    plain = keras.ops.convert_to_numpy(make()((4, 6), dtype))
    assert keras.ops.convert_to_numpy(init((4, 6), dtype, layout=None)).tobytes() == \
        plain.tobytes()
    if keras.backend.backend() == "jax":  # Keras's TF backend has no tensor layouts
        from keras.distribution import DeviceMesh, TensorLayout, list_devices

        mesh = DeviceMesh((1,), ["batch"], list_devices()[:1])
        laid = make()((4, 6), dtype, layout=TensorLayout([None, "batch"], mesh))
        assert keras.ops.convert_to_numpy(laid).tobytes() == plain.tobytes()

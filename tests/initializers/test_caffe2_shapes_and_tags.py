"""create_param reads Caffe2's shapes; ParameterTags on ParameterInfo; parameter_infos(model).

Caffe2's XavierFill on an FC weight ``[out, in]`` draws ``U(-sqrt(3/in), sqrt(3/in))``
(fan_in = numel // shape[0]); Keras's kernel ``[in, out]`` is the same parameter.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfinit
from tfinit import mixed_precision as mp

pytestmark = pytest.mark.tensorflow_only


def _bound(values):
    return float(np.abs(np.asarray(values)).max())


@pytest.mark.parametrize("make", [
    lambda: tfinit.Initializer("XavierFill", seed=5),
    lambda: tfinit.update_initializer(None, ("XavierFill", {"seed": 5}), None),
    lambda: tfinit.PseudoFP16Initializer("XavierFill", seed=5),
])
def test_create_param_reads_caffe2s_fc_shape_by_default(make):
    info = make().create_param("fc3_w", [500, 800])
    master = info.blob_copy[tf.float32] if info.blob_copy else info.param
    caffe2, keras_rule = math.sqrt(3 / 800), math.sqrt(3 / 500)
    assert 0.95 * caffe2 < _bound(master) <= caffe2 < keras_rule


def test_create_param_equals_caffe2s_array_for_the_seeded_stream():
    shape = [6, 4, 3, 3]  # OIHW
    got = tfinit.Initializer("MSRAFill", seed=11, rng="caffe2").create_param("conv_w", shape)
    want = tfinit.MSRAFill(seed=11, rng="caffe2", layout="caffe2")(shape)
    np.testing.assert_array_equal(got.param.numpy(), np.asarray(want))


def test_the_same_initializer_as_a_keras_kernel_initializer_keeps_keras_layout():
    init = tfinit.Initializer("XavierFill", seed=5)
    layer = keras.layers.Dense(800, kernel_initializer=init)
    layer.build((None, 500))                           # kernel [in=500, out=800]
    assert 0.95 * math.sqrt(3 / 500) < _bound(layer.kernel) <= math.sqrt(3 / 500)


@pytest.mark.parametrize("where", ["argument", "operator"])
def test_explicit_layout_wins_at_either_entry_point(where):
    if where == "argument":
        info = tfinit.Initializer("XavierFill", seed=5).create_param(
            "w", [800, 500], layout="keras")
    else:
        info = tfinit.Initializer("XavierFill", seed=5, layout="keras").create_param(
            "w", [800, 500])
    assert 0.95 * math.sqrt(3 / 800) < _bound(info.param) <= math.sqrt(3 / 800)
    as_keras = tfinit.Initializer("XavierFill", seed=5, layout="caffe2")([500, 800])
    assert _bound(as_keras) <= math.sqrt(3 / 800)


def test_a_bad_layout_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="`layout` must be one of"):
        tfinit.Initializer("XavierFill").create_param("w", [2, 2], layout="NCHW")


def test_layout_free_fills_ignore_it():
    info = tfinit.Initializer("ConstantFill", value=2.0).create_param("b", [3], layout="keras")
    np.testing.assert_array_equal(info.param.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("tags, want", [
    ("WEIGHT", ("WEIGHT",)), (["BIAS", "COMPUTED_PARAM"], ("BIAS", "COMPUTED_PARAM")),
    (None, ()),
])
def test_create_param_keeps_caffe2s_parameter_tags(tags, want):
    info = tfinit.Initializer("ConstantFill").create_param("p", [2], tags=tags)
    assert info.tags == want
    pair = tfinit.PseudoFP16Initializer("ConstantFill").create_param("q", [2], tags=tags)
    assert pair.tags == want
    ext = tfinit.ExternalInitializer({"e": np.zeros([2], np.float32)}).create_param(
        "e", [2], tags=tags)
    assert ext.tags == want


def test_an_unknown_tag_is_refused():
    with pytest.raises(ValueError, match="ParameterTags"):
        tfinit.Initializer("ConstantFill").create_param("p", [2], tags="KERNEL")


def test_parameter_infos_lists_every_trainable_weight_paired_or_not():
    with mp.scope("pseudo_fp16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                                  keras.layers.BatchNormalization()])
    infos = tfinit.parameter_infos(model)
    assert [i.param for i in infos] == list(model.trainable_weights)
    assert [i.tags for i in infos] == [("WEIGHT",), ("BIAS",), ("WEIGHT",), ("BIAS",)]
    assert [i.param_id for i in infos] == [0, 1, 2, 3]
    assert infos[0].blob_copy[tf.float32] is mp.parameter_info(model.layers[0].kernel).blob_copy[
        tf.float32]
    paired = [bool(i.blob_copy) for i in infos]
    assert paired[0] and paired[1] and not paired[2] and not paired[3]  # BN stays fp32


def test_parameter_infos_refuses_what_has_no_weights():
    with pytest.raises(TypeError, match="`model` must be a Keras model"):
        tfinit.parameter_infos(42)

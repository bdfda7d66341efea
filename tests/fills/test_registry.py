"""Fill-op lookup: names, brew-style tuples, Keras identifiers and their errors."""

import keras
import numpy as np
import pytest

import tfinit
from tfinit import registry

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

CAFFE2_FILL_OPS = {
    "ConstantFill",
    "GaussianFill",
    "UniformFill",
    "UniformIntFill",
    "UniqueUniformFill",
    "XavierFill",
    "MSRAFill",
    "RangeFill",
    "DiagonalFill",
    "GivenTensorFill",
    "GivenTensorDoubleFill",
    "GivenTensorIntFill",
    "GivenTensorInt64Fill",
    "GivenTensorInt16Fill",
    "GivenTensorBoolFill",
}


def test_fill_ops_lists_every_caffe2_fill():
    assert set(tfinit.fill_ops()) == CAFFE2_FILL_OPS
    assert tfinit.fill_ops() == sorted(tfinit.fill_ops())


# The ops without required arguments (GivenTensor*Fill needs values, UniqueUniformFill min/max).
NO_REQUIRED_ARGS = sorted(
    n for n in CAFFE2_FILL_OPS if not n.startswith("GivenTensor") and n != "UniqueUniformFill"
)


@pytest.mark.parametrize("name", NO_REQUIRED_ARGS)
def test_bare_names_are_keras_identifiers(name):
    assert type(keras.initializers.get(name)).__name__ == name
    assert type(tfinit.get(name)).__name__ == name


def test_dense_takes_a_bare_caffe2_name():
    layer = keras.layers.Dense(3, kernel_initializer="MSRAFill", bias_initializer="ConstantFill")
    layer.build((None, 4))
    assert isinstance(layer.kernel_initializer, tfinit.MSRAFill)
    assert np.all(keras.ops.convert_to_numpy(layer.bias) == 0)


def test_brew_style_tuple():
    init = tfinit.get(("GaussianFill", {"std": 0.01}))
    assert isinstance(init, tfinit.GaussianFill) and init.std == 0.01 and init.mean == 0.0
    assert isinstance(tfinit.get(["XavierFill", {}]), tfinit.XavierFill)


def test_config_dicts_instances_classes_and_none():
    cfg = keras.saving.serialize_keras_object(tfinit.UniformFill(min=-1.0, max=2.0, seed=3))
    init = tfinit.get(cfg)
    assert isinstance(init, tfinit.UniformFill) and (init.min, init.max, init.seed) == (
        -1.0,
        2.0,
        3,
    )
    same = tfinit.XavierFill()
    assert tfinit.get(same) is same
    assert isinstance(tfinit.get(tfinit.RangeFill), tfinit.RangeFill)
    assert tfinit.get(None) is None


def test_keras_names_still_work_through_tfinit_get():
    assert isinstance(tfinit.get("glorot_uniform"), keras.initializers.GlorotUniform)


def test_unknown_name_lists_close_matches():
    with pytest.raises(
        ValueError, match=r"Unknown fill operator 'XavierFil'.*Did you mean: XavierFill"
    ):
        tfinit.get("XavierFil")
    with pytest.raises(ValueError, match="Unknown fill operator 'NoSuchFill'"):
        tfinit.get(("NoSuchFill", {}))


def test_bad_tuple_arguments_name_the_op_and_argument():
    with pytest.raises(
        TypeError, match=r"GaussianFill.*'stdev'.*takes mean, std, seed.*Did you mean 'std'"
    ):
        tfinit.get(("GaussianFill", {"stdev": 0.01}))
    with pytest.raises(TypeError, match=r"\(op_name, kwargs_dict\)"):
        tfinit.get(("GaussianFill",))
    with pytest.raises(TypeError, match="tfinit.get.*int"):
        tfinit.get(3)
    with pytest.raises(TypeError, match="must be a string"):
        registry.lookup(3)

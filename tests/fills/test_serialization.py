"""get_config / from_config and .keras round trips of every fill.

The per-fill tests run once per name in ``tfinit.fill_ops()`` (the registry): a new fill
registers itself, and its case fails until ``EXAMPLES`` holds an instance of it.
"""

import importlib
import inspect
import json

import keras
import numpy as np
import pytest

import tfinit
from conftest import REPO
from tfinit import registry

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

#: one instance of every registered fill, with arguments other than the defaults
EXAMPLES = [
    tfinit.ConstantFill(value=2, dtype="int64"),
    tfinit.GaussianFill(mean=0.5, std=0.01, seed=3),
    tfinit.UniformFill(min=-1.0, max=2.0, seed=4),
    tfinit.UniformIntFill(min=-2, max=9, seed=5),
    tfinit.UniqueUniformFill(0, 99, avoid=[3, 7], seed=6),
    tfinit.XavierFill(seed=7, layout="caffe2"),
    tfinit.MSRAFill(seed=8),
    tfinit.RangeFill(),
    tfinit.DiagonalFill(value=1.5, layout="caffe2"),
    tfinit.GivenTensorFill([1.0, 2.0, 3.0, 4.0], shape=[2, 2]),
    tfinit.GivenTensorDoubleFill([0.1, 0.2, 0.3, 0.4]),
    tfinit.GivenTensorIntFill([1, 2, 3, 4]),
    tfinit.GivenTensorInt64Fill([1, 2, 3, 2**40]),
    tfinit.GivenTensorInt16Fill([1, 2, 3, 4]),
    tfinit.GivenTensorBoolFill([True, False, True, True]),
]
IDS = [type(e).__name__ for e in EXAMPLES]


def _example(name):
    """The example of registered fill ``name``."""
    found = [e for e in EXAMPLES if type(e).__name__ == name]
    assert found, f"registered fill {name} has no example in EXAMPLES ({__file__})"
    assert type(found[0]) is registry.lookup(name)
    return found[0]


@pytest.mark.parametrize("name", tfinit.fill_ops())
def test_config_keys_are_the_constructor_arguments(name):
    init = _example(name)
    params = [p for p in inspect.signature(type(init).__init__).parameters if p != "self"]
    assert sorted(init.get_config()) == sorted(params)


@pytest.mark.parametrize("name", tfinit.fill_ops())
def test_round_trip_through_keras_serialization_gives_the_same_values(name):
    init = _example(name)
    config = keras.saving.serialize_keras_object(init)
    assert config["registered_name"] == f"tfinit>{type(init).__name__}"
    clone = keras.saving.deserialize_keras_object(config)
    assert type(clone) is type(init) and clone.get_config() == init.get_config()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(clone((2, 2))), keras.ops.convert_to_numpy(init((2, 2)))
    )


def test_seed_generator_config_round_trips():
    init = tfinit.GaussianFill(seed=keras.random.SeedGenerator(5))
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(init))
    assert isinstance(clone.seed, keras.random.SeedGenerator)


def test_model_save_and_load_keep_the_initializers(tmp_path):
    inputs = keras.Input((6,))
    x = keras.layers.Dense(
        4, kernel_initializer=tfinit.XavierFill(seed=1), bias_initializer="ConstantFill"
    )(inputs)
    x = keras.layers.Dense(
        3,
        kernel_initializer=tfinit.MSRAFill(seed=2, layout="keras"),
        bias_initializer=tfinit.GivenTensorFill([0.1, 0.2, 0.3]),
    )(x)
    model = keras.Model(inputs, x)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    for old, new in zip(model.layers[1:], loaded.layers[1:], strict=True):
        assert type(new.kernel_initializer) is type(old.kernel_initializer)
        assert new.kernel_initializer.get_config() == old.kernel_initializer.get_config()
        assert new.bias_initializer.get_config() == old.bias_initializer.get_config()
        np.testing.assert_array_equal(new.get_weights()[0], old.get_weights()[0])
    # A fresh model from the saved config re-creates the same seeded kernels.
    rebuilt = keras.Model.from_config(loaded.get_config())
    np.testing.assert_array_equal(
        rebuilt.layers[1].get_weights()[0], model.layers[1].get_weights()[0]
    )
    np.testing.assert_allclose(rebuilt.layers[2].get_weights()[1], [0.1, 0.2, 0.3], rtol=1e-7)


def test_every_registered_fill_has_a_round_trip_example():
    # A new fill registers itself; this fails until it gets an example above.
    assert sorted(IDS) == tfinit.fill_ops()


def test_configs_saved_with_the_former_module_path_still_load():
    # Files saved before the fills were split recorded "module": "tfinit.fills".
    config = keras.saving.serialize_keras_object(tfinit.XavierFill(seed=3))
    config["module"] = "tfinit.fills"
    clone = keras.saving.deserialize_keras_object(config)
    assert type(clone) is tfinit.XavierFill and clone.get_config() == {
        "seed": 3, "rng": "keras", "layout": "keras"
    }


#: a .keras file and fill configs written by tfinit 0.1.0 (main at 829c102, before the fills
#: became the package tfinit/fills/): their configs name "tfinit.random_fills" and
#: "tfinit.constant_fills" as the module; Keras finds the class by its registered name
#: ("tfinit>XavierFill"), once tfinit is imported (0.1.0 needed that import too)
OLD = REPO / "tests" / "data" / "fills_0.1.0"


def test_the_module_paths_of_0_1_0_name_the_same_modules():
    assert importlib.import_module("tfinit.registry") is tfinit.fills.registry is registry
    assert importlib.import_module("tfinit.random_fills").XavierFill is tfinit.XavierFill
    constant_fills = importlib.import_module("tfinit.constant_fills")
    assert constant_fills.GivenTensorFill is tfinit.GivenTensorFill


def test_configs_written_by_0_1_0_load_as_the_same_fills_under_the_same_names():
    configs = json.loads((OLD / "fills_0.1.0_configs.json").read_text())
    assert {c["module"] for c in configs} == {"tfinit.random_fills", "tfinit.constant_fills"}
    fills = [keras.saving.deserialize_keras_object(c) for c in configs]
    assert [type(f) for f in fills] == [tfinit.XavierFill, tfinit.GivenTensorIntFill,
                                        tfinit.UniqueUniformFill, tfinit.RangeFill]
    assert [f.get_config() for f in fills] == [c["config"] for c in configs]
    again = [keras.saving.serialize_keras_object(f) for f in fills]
    assert [c["registered_name"] for c in again] == [c["registered_name"] for c in configs]
    assert [c["class_name"] for c in again] == [c["class_name"] for c in configs]


def test_a_keras_file_written_by_0_1_0_loads():
    model = keras.saving.load_model(OLD / "fills_0.1.0.keras")
    first, second = model.layers
    assert type(first.kernel_initializer) is tfinit.XavierFill
    assert type(first.bias_initializer) is tfinit.GivenTensorFill
    assert type(second.bias_initializer) is tfinit.ConstantFill
    # the file's kernel is what XavierFill(seed=1, rng="caffe2") draws (Caffe2's stream)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(first.kernel),
        keras.ops.convert_to_numpy(tfinit.XavierFill(seed=1, rng="caffe2")((4, 3))))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(first.bias), [0.5, -1.0, 2.0])

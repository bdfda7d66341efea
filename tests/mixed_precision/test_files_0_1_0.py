"""Files written by tfinit 0.1.0, before issue 43 moved ``tfinit.mixed_precision``'s modules
into folders by backend and Caffe2's training pieces into ``tfinit._caffe2_training``: they
load, masters and optimizer state exact (``tests/data/mixed_precision_0.1.0``, written by its
``make_files.py`` with 0.1.0 on TensorFlow)."""

import keras
import numpy as np
import pytest
from conftest import REPO

from tfinit import caffe2
from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

OLD = REPO / "tests" / "data" / "mixed_precision_0.1.0"


def _expected():
    """(masters, optimizer variables, x, y) at save time, in order."""
    with np.load(OLD / "expected.npz") as data:
        def ordered(prefix):
            keys = [k for k in data.files if k.startswith(prefix)]
            return [data[k] for k in sorted(keys, key=lambda k: int(k.rsplit("_", 1)[1]))]

        return ordered("master_"), ordered("optimizer_"), data["x"], data["y"]


def test_a_0_1_0_keras_file_loads_masters_optimizer_and_schedule_exactly():
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = keras.saving.load_model(OLD / "model.keras")
    masters, state, x, y = _expected()
    have = mp.get_master_weights(model)
    assert len(have) == len(masters) == 8
    for h, w in zip(have, masters, strict=True):
        assert h.dtype == w.dtype and h.tobytes() == w.tobytes()

    optimizer = model.optimizer
    assert isinstance(optimizer, mp.MasterWeightOptimizer)
    assert isinstance(optimizer.inner_optimizer, mp.Caffe2MomentumSGD)
    schedule = optimizer.inner_optimizer.get_config()["learning_rate"]
    assert schedule["class_name"] == "Caffe2LearningRate", schedule
    schedule = keras.saving.deserialize_keras_object(schedule)
    assert isinstance(schedule, caffe2.Caffe2LearningRate)
    made_now = caffe2.learning_rate("step", base_lr=0.05, stepsize=1, gamma=0.5)
    assert schedule.get_config() == made_now.get_config()
    assert float(optimizer.inner_optimizer.learning_rate) == float(made_now(2))
    # every variable the file's optimizer had, in order (on JAX the masters are optimizer
    # variables too, the state of fit's stateless step: compared above)
    weights = {w.path for w in model.weights}
    loaded = [v for v in optimizer.variables if v.path not in weights]
    assert len(loaded) == len(state) == 11, [v.path for v in loaded]
    for v, value in zip(loaded, state, strict=True):
        np.testing.assert_array_equal(np.asarray(v), value, err_msg=v.path)
    assert int(optimizer.iterations) == 2

    # and it trains on from there, with the copies re-cast from the masters
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert int(optimizer.iterations) == 4
    after = mp.get_master_weights(model)
    assert any(not np.array_equal(a, b) for a, b in zip(after, masters, strict=True))
    for variable, master in zip(model.weights, after, strict=True):
        np.testing.assert_array_equal(
            np.asarray(variable), master.astype(variable.dtype), err_msg=variable.path)

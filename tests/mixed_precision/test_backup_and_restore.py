"""``keras.callbacks.BackupAndRestore`` with masters on every backend (issue 53): a ``fit``
interrupted after an epoch and started again (a new model, as after a restart) ends with the
masters and optimizer state of the same ``fit`` uninterrupted, bit for bit; and
``get_state_tree`` / ``set_state_tree`` (what ``OrbaxCheckpoint`` saves and restores) carry
every master kind on JAX and torch, each variable tfinit adds under its own path (on
TensorFlow, where a pseudo_fp16 master is no Keras variable, a state tree is refused)."""

import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral  # TensorFlow, JAX and torch (CI's torch pass)

MASTERS = ["fp32"] + (["split"] if keras.backend.backend() != "torch" else [])


def _model(master):
    keras.utils.set_random_seed(0)
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master=master):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, name="hidden"),
                                  keras.layers.Dense(6, name="middle"),
                                  keras.layers.Dense(2, name="head")], name="net")
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(0.01, name="adam"),
                                                     name="mwo"), loss="mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")


class _Preempted(Exception):
    pass


class _PreemptAfter(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise _Preempted(epoch)


def _state(model):
    return ([m.tobytes() for m in mp.get_master_weights(model)],
            [np.asarray(v).tobytes() for v in model.optimizer.inner_optimizer.variables])


@pytest.mark.slow  # three fits
@pytest.mark.parametrize("master", MASTERS)
def test_an_interrupted_fit_resumes_to_the_uninterrupted_masters(master, tmp_path):
    x, y = _data()
    fit = dict(batch_size=8, epochs=3, shuffle=False, verbose=0)
    reference = _model(master)
    reference.fit(x, y, **fit)

    backup = str(tmp_path / "backup")
    interrupted = _model(master)
    with pytest.raises(_Preempted):
        interrupted.fit(x, y, callbacks=[keras.callbacks.BackupAndRestore(backup),
                                         _PreemptAfter(1)], **fit)
    restarted = _model(master)  # a new model, as after a restart
    restarted.fit(x, y, callbacks=[keras.callbacks.BackupAndRestore(backup)], **fit)
    assert int(restarted.optimizer.iterations) == int(reference.optimizer.iterations) == 6
    assert _state(restarted) == _state(reference)


@pytest.mark.parametrize("master", MASTERS)
def test_the_state_tree_carries_every_master_kind_under_unique_paths(master):
    x, y = _data()
    model = _model(master)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    if keras.backend.backend() == "tensorflow":  # the masters are no Keras variables there
        with pytest.raises(ValueError, match="CheckpointManager"):
            model.get_state_tree()
        return
    tree = model.get_state_tree()  # raised for split: "'kernel_rem' found twice"
    paths = [v.path for v in model.optimizer.variables]
    assert len(paths) == len(set(paths)), paths
    other = _model(master)
    other.optimizer.build(other.trainable_variables)
    # Orbax's restored tree lists the optimizer's part before the layers' (sorted keys)
    other.set_state_tree(dict(sorted(tree.items())))
    assert _state(other) == _state(model)

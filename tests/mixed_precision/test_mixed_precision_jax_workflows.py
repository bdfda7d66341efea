"""tfinit.mixed_precision workflows on Keras's JAX backend (CI's JAX pass, TensorFlow blocked).

- ``keras.distribution.DataParallel`` over two host devices (in a fresh process,
  tests/mixed_precision/_jax_data_parallel.py: ``XLA_FLAGS`` must be set before JAX is
  imported): masters bit-identical to Keras ``mixed_*`` under the same distribution, copies
  ``cast(master)``, both replicated and equal on both devices.
- ``save_weights(model, path, dtype)``: a plain Keras file of the masters in one dtype, which
  a plain model of that dtype loads (the TensorFlow tests' assertions, in
  test_mixed_precision_workflows.py).
- ``EarlyStopping(restore_best_weights=True)`` restores the best masters exactly (Keras's own
  callback rounds them to the 16-bit copies).
"""

import os
import subprocess
import sys

import keras
import ml_dtypes
import numpy as np
import pytest
from conftest import REPO, use_dtype_policy

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
ON_JAX = keras.backend.backend() == "jax"
jax_only = pytest.mark.skipif(not ON_JAX, reason="runs in CI's JAX pass (KERAS_BACKEND=jax)")
NP16 = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.fixture
def mp():
    from tfinit import mixed_precision

    return mixed_precision


def _mlp():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])


def _masters(mp, model):
    return [a.tobytes() for a in mp.get_master_weights(model)]


def _perturb(mp, model):
    """Give every master bits its 16-bit copy cannot hold, so any rounding shows."""
    rng = np.random.default_rng(0)
    arrays = [a + (rng.normal(size=a.shape) * 1e-4).astype(a.dtype)
              for a in mp.get_master_weights(model)]
    mp.set_master_weights(model, arrays)
    return arrays


def _assert_copies_synced(model):
    from tfinit.mixed_precision._keras_variables import pair_records as _jax_pairs

    pairs = _jax_pairs.pairs_of(model.weights)
    assert len(pairs) == 4
    for pair in pairs:
        copy = np.asarray(keras.ops.convert_to_numpy(pair.copy.value))
        assert pair.master_array().astype(copy.dtype).tobytes() == copy.tobytes(), pair.name


@pytest.mark.slow  # a subprocess, four trainings and their oracles (~15 s on 2 cores)
@jax_only
def test_data_parallel_masters_match_keras_mixed_bit_for_bit():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jax_data_parallel.py")
    proc = subprocess.run([sys.executable, script], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK"), proc.stdout[-3000:]


@pytest.mark.slow  # over 1 s on 2 cores
@jax_only
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("reverse", "bfloat16")])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_save_weights_writes_a_plain_file_a_plain_model_loads(mp, tmp_path, mode,
                                                              compute_dtype, dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = _mlp()
    masters = _perturb(mp, model)
    path = str(tmp_path / f"{dtype}.weights.h5")
    hooks = [layer.__dict__.get("save_own_variables") for layer in model.layers]
    mp.save_weights(model, path, dtype=dtype)
    assert [layer.__dict__.get("save_own_variables") for layer in model.layers] == hooks
    with use_dtype_policy(dtype):
        plain = _mlp()
    plain.load_weights(path)
    for want, have in zip(masters, plain.get_weights(), strict=True):
        assert have.dtype == NP16[dtype]
        assert have.tobytes() == want.astype(NP16[dtype]).tobytes()  # rounded to nearest
    with mp.scope(mode, compute_dtype=compute_dtype):
        fresh = _mlp()
    fresh.load_weights(path)  # a 16-bit file loads as its exact widening
    for want, have in zip(masters, mp.get_master_weights(fresh), strict=True):
        assert have.tobytes() == want.astype(NP16[dtype]).astype(np.float32).tobytes()
    _assert_copies_synced(fresh)
    assert _masters(mp, model) == [m.tobytes() for m in masters]  # saving changed nothing


@jax_only
def test_save_weights_refuses_bad_arguments_and_a_stale_copy(mp, tmp_path):
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = _mlp()
    with pytest.raises(ValueError, match="argument `dtype` must be None, 'float32'"):
        mp.save_weights(model, str(tmp_path / "m.weights.h5"), dtype="int8")
    with pytest.raises(ValueError, match="argument `filepath` must end in '.weights.h5'"):
        mp.save_weights(model, str(tmp_path / "m.h5"))
    kernel = model.layers[0].kernel
    keras.Variable.assign(kernel, np.ones(kernel.shape, np.float16))  # the copy alone
    with pytest.raises(ValueError, match="changed without its fp32 master"):
        mp.save_weights(model, str(tmp_path / "m.weights.h5"))


@pytest.mark.slow  # fit for four epochs (over 1 s on 2 cores)
@jax_only
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("pseudo_fp16", "bfloat16"),
                                                 ("reverse", "float16")])
def test_early_stopping_restores_best_masters_exactly(mp, mode, compute_dtype):
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("f4")
    y = (x @ np.array([[0.5], [-1.0], [2.0]], "f4")).astype("f4")
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = _mlp()
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    scores = [3.0, 1.0, 2.0, 4.0, 5.0, 6.0]  # best at epoch 1, patience 2 stops at epoch 3
    recorded = {}

    class Score(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["score"] = scores[epoch]
            recorded[epoch] = _masters(mp, self.model)

    stop = mp.EarlyStopping(monitor="score", mode="min", patience=2, restore_best_weights=True)
    model.fit(x, y, epochs=6, batch_size=16, verbose=0, callbacks=[Score(), stop],
              shuffle=False)
    assert stop.best_epoch == 1 and stop.stopped_epoch == 3
    assert [w.dtype for w in stop.best_weights] == [np.float32] * 8
    assert recorded[3] != recorded[1]  # so restoring changes something
    assert _masters(mp, model) == recorded[1]
    _assert_copies_synced(model)
    # training goes on after the restore, the copies still cast(master)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    assert _masters(mp, model) != recorded[1]
    _assert_copies_synced(model)


@pytest.mark.slow  # two fits of four epochs (over 1 s on 2 cores)
@jax_only
@pytest.mark.parametrize("compute_dtype", ["float16", "bfloat16"])
def test_keras_early_stopping_rounds_masters_as_the_docs_say(mp, compute_dtype):
    """The documented contrast, in ``fit``: ``keras.callbacks.EarlyStopping`` records
    ``get_weights()`` (the 16-bit copies), so its restore sets each master to the exact
    widening of the best master's 16-bit cast; ``mp.EarlyStopping`` restores the best masters
    bit for bit. The same run (seeded, unshuffled) with each callback."""
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("f4")
    y = (x @ np.array([[0.5], [-1.0], [2.0]], "f4")).astype("f4")
    scores = [3.0, 1.0, 2.0, 4.0, 5.0, 6.0]  # best at epoch 1, patience 2 stops at epoch 3

    def fit_with(callback_class):
        keras.utils.set_random_seed(0)
        with mp.scope("pseudo_fp16", compute_dtype=compute_dtype):
            model = _mlp()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        recorded = {}

        class Score(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                logs["score"] = scores[epoch]
                recorded[epoch] = mp.get_master_weights(self.model)

        stop = callback_class(monitor="score", mode="min", patience=2,
                              restore_best_weights=True)
        model.fit(x, y, epochs=6, batch_size=16, verbose=0, callbacks=[Score(), stop],
                  shuffle=False)
        assert stop.best_epoch == 1 and stop.stopped_epoch == 3
        _assert_copies_synced(model)
        return model, recorded, mp.get_master_weights(model)

    model, recorded, restored = fit_with(keras.callbacks.EarlyStopping)
    best, last = recorded[1], recorded[3]
    dtypes = [NP16[v.dtype] for v in model.weights]
    assert dtypes.count(NP16[compute_dtype]) == 4  # the Dense kernels and biases are paired
    # Keras restores set_weights(best copies); a 16-bit value set that way touches only the
    # elements whose copy it changes (docs): those get the exact widening of the best copy,
    # the others keep the master they had when training stopped.
    want, moved_paired = [], 0
    for b, s, d in zip(best, last, dtypes, strict=True):
        moved = b.astype(d) != s.astype(d)
        want.append(np.where(moved, b.astype(d).astype(np.float32), s))
        if d is not np.float32:
            moved_paired += int(moved.sum())
    assert moved_paired >= 16  # of the 21 paired elements: the restore is mostly rounding
    assert len(restored) == len(want) == 8
    for i, (have, w) in enumerate(zip(restored, want, strict=True)):
        assert have.dtype == np.float32 and have.tobytes() == w.tobytes(), i
    # The low bits are lost (the check above is exact): a paired element equals its best master
    # only where that master is a 16-bit value, or did not move after the best epoch (one of
    # 21 on Keras 3.16); most differ. The fp32 (BatchNormalization) arrays come back as they were.
    lost = 0
    for have, b, d in zip(restored, best, dtypes, strict=True):
        if d is np.float32:
            assert have.tobytes() == b.tobytes()
            continue
        lost += int((have != b).sum())
    assert lost >= 16, lost  # of the 21 paired elements
    # tfinit's EarlyStopping, the same run: the best masters, bit for bit.
    _, recorded_mp, restored_mp = fit_with(mp.EarlyStopping)
    assert [a.tobytes() for a in recorded_mp[1]] == [a.tobytes() for a in best]
    assert [a.tobytes() for a in restored_mp] == [a.tobytes() for a in best]

"""tfinit.mixed_precision on Keras's JAX backend (CI's JAX pass, TensorFlow blocked).

The in-process tests run when the Keras backend is JAX; the Keras-parity matrix
(tests/mixed_precision/test_keras_parity.py) checks training against Keras ``mixed_*`` on
JAX. The files test
runs both backends in subprocesses: a file written on one loads exactly on the other.
"""

import doctest
import inspect
import os
import textwrap

import h5py
import keras
import numpy as np
import pytest
from _arrays import assert_same_bits, to_numpy
from _parity import NP16, SPECS
from _subprocess import run_python
from conftest import use_dtype_policy

import tfinit

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
ON_JAX = keras.backend.backend() == "jax"
jax_only = pytest.mark.skipif(not ON_JAX, reason="runs in CI's JAX pass (KERAS_BACKEND=jax)")
L = keras.layers


def _model():
    return keras.Sequential([keras.Input((6,)), L.Dense(8, activation="tanh"),
                             L.BatchNormalization(), L.Dense(2)])


@jax_only
@pytest.mark.parametrize("mode, dtype", SPECS)
def test_scope_pairs_with_the_exact_fp32_initializer_value(mp, mode, dtype):
    init = tfinit.GaussianFill(std=0.3, seed=5)
    with mp.scope(mode, compute_dtype=dtype):
        dense = L.Dense(3, kernel_initializer=init)
        dense.build((None, 4))
    want = to_numpy(tfinit.GaussianFill(std=0.3, seed=5)((4, 3), "float32"))
    info = mp.parameter_info(dense.kernel)
    assert info.param is dense.kernel and info.name == "kernel"
    (key,) = info.blob_copy
    other = info.blob_copy[key]
    if mode == "pseudo_fp16":
        assert key == "float32" and info.blob_copy[np.float32] is other
        assert dense.kernel.dtype == dtype and other.dtype == "float32"
        master, copy = to_numpy(other), to_numpy(dense.kernel)
    else:
        assert key == dtype and dense.kernel.dtype == "float32" and other.dtype == dtype
        master, copy = to_numpy(dense.kernel), to_numpy(other)
    assert master.tobytes() == want.tobytes()
    assert copy.tobytes() == want.astype(NP16[dtype]).tobytes()
    assert to_numpy(dense(np.ones((2, 4), np.float32))).dtype == NP16[dtype]


@jax_only
@pytest.mark.parametrize("mode, dtype", SPECS)
def test_normalization_state_stays_float32_and_unpaired(mp, mode, dtype):
    """As Keras mixed_*: BatchNormalization's weights and statistics, Normalization.adapt's
    statistics (issue 32 row 2) are float32 on the layers' own variables."""
    data = np.random.default_rng(7).normal(1230.6175, 0.25, size=(64, 2)).astype("float32")
    with mp.scope(mode, compute_dtype=dtype):
        model = _model()
        norm = L.Normalization()
        norm.adapt(data)
    bn = model.layers[1]
    assert [w.dtype for w in bn.weights] == ["float32"] * 4
    with use_dtype_policy(f"mixed_{dtype}"):
        ref = L.Normalization()
        ref.adapt(data)
    assert [w.dtype for w in norm.weights] == [w.dtype for w in ref.weights]
    assert_same_bits(norm.get_weights(), ref.get_weights())
    for weight in [*bn.weights, *norm.weights]:
        with pytest.raises(ValueError, match="no fp32 master/16-bit copy pair"):
            mp.parameter_info(weight)


@jax_only
@pytest.mark.parametrize("mode, dtype", SPECS)
def test_writes_reach_the_master_and_set_weights_is_lossless(mp, mode, dtype):
    with mp.scope(mode, compute_dtype=dtype):
        model = _model()
    masters = mp.get_master_weights(model)
    model.set_weights(model.get_weights())  # a 16-bit value touches only what it changes
    assert_same_bits(mp.get_master_weights(model), masters)
    changed = [w.copy() for w in model.get_weights()]
    changed[0][0, 0] = changed[0][0, 0] + changed[0].dtype.type(1)  # that element: widened
    model.set_weights(changed)
    want = [m.copy() for m in masters]
    want[0][0, 0] = np.float32(changed[0][0, 0])
    assert_same_bits(mp.get_master_weights(model), want)
    mp.set_master_weights(model, masters)
    assert_same_bits(mp.get_master_weights(model), masters)
    kernel = model.layers[0].kernel
    kernel.assign_add(np.full(kernel.shape, 1e-4, np.float32))
    master = mp.get_master_weights(model)[0]
    assert master.tobytes() == (masters[0] + np.float32(1e-4)).tobytes()
    assert mp.sync_copies(model) == 4
    with pytest.raises(ValueError, match="set_master_weights: Argument `arrays` must hold 8"):
        mp.set_master_weights(model, masters[:2])


@jax_only
def test_scale_loss_before_the_first_step_scales_as_the_step_unscales(mp):
    """A custom loop calls ``scale_loss`` before the optimizer is built: ``"auto"`` is fixed
    there (float16 scope entered: dynamic), so the first step divides by the scale the loss was
    multiplied by (it once left the loss unscaled and divided the gradients by 2**15)."""
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
        dense.build((None, 2))
    opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.5))  # "auto", outside the scope
    scaled = opt.scale_loss(keras.ops.convert_to_tensor(1.0, "float32"))
    assert float(keras.ops.convert_to_numpy(scaled)) == 2.0**15 and opt.dynamic
    grad = np.full((2, 1), 0.25 * 2.0**15, np.float16)  # d(scaled loss)/d(kernel)
    opt.apply([grad], [dense.kernel])
    assert mp.get_master_weights(dense)[0].ravel().tolist() == [0.875, 0.875]  # 1 - 0.5 * 0.25


@jax_only
def test_compile_wraps_and_a_step_with_an_overflow_is_skipped(mp):
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = keras.Sequential([keras.Input((2,)), L.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    opt = model.optimizer
    assert isinstance(opt, mp.MasterWeightOptimizer) and opt.loss_scale == "auto"
    opt.build(model.trainable_variables)
    assert opt.dynamic  # "auto": the pairs are float16
    before = mp.get_master_weights(model)
    grads = [np.full((2, 1), np.inf, np.float16), np.ones((1,), np.float16)]
    opt.apply(grads)
    assert_same_bits(mp.get_master_weights(model), before)
    assert float(to_numpy(opt.dynamic_scale)) == 2.0**14 and int(to_numpy(opt.iterations)) == 0
    opt.apply([np.ones((2, 1), np.float16), np.ones((1,), np.float16)])
    assert int(to_numpy(opt.iterations)) == 1
    step = np.float32(0.1) * (np.float32(1.0) / np.float32(2.0**14))
    assert mp.get_master_weights(model)[1].tobytes() == (before[1] - step).tobytes()


@jax_only
def test_refusals_name_the_fix(mp):
    # master="split" and state_dtype="bfloat16": tests/mixed_precision/test_split_master_jax.py
    with pytest.raises(ValueError, match="Argument `loss_scale` must be"):
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), loss_scale=-1)
    with pytest.raises(ValueError, match="already a loss-scale optimizer"):
        mp.MasterWeightOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()))
    half = keras.Variable(np.zeros((2,), np.float16), name="half")
    with pytest.raises(ValueError, match="'half' is float16 and has no fp32 master"):
        mp.MasterWeightOptimizer(keras.optimizers.SGD()).build([half])
    with pytest.raises(ValueError, match="argument `mode` must be one of"):
        with mp.scope("fp8"):
            pass


@jax_only
def test_a_config_written_on_tensorflow_loads_and_other_keywords_are_refused(mp):
    inner = keras.saving.serialize_keras_object(keras.optimizers.SGD(0.25))
    tf_era = {"name": "mwo", "optimizer": inner, "loss_scale": "dynamic", "state_dtype": None}
    opt = mp.MasterWeightOptimizer.from_config(tf_era)
    assert (opt.name, opt.loss_scale, opt.state_dtype, opt.dynamic) == ("mwo", "dynamic",
                                                                         None, True)
    assert float(keras.ops.convert_to_numpy(opt.inner_optimizer.learning_rate)) == 0.25
    assert opt.get_config() == {**tf_era, "shard_over": None, "seed": 0,
                                "optimizer": opt.get_config()["optimizer"]}
    with pytest.raises(ValueError, match=r"unexpected keyword arguments \['clipnorm'\]"):
        mp.MasterWeightOptimizer(keras.optimizers.SGD(), clipnorm=1.0)


@jax_only
def test_pair_initializers_follow_their_own_scope_on_jax(mp):
    """Issue 32 row 3 on JAX: inside its own scope the initializer pairs, elsewhere refuses."""
    init = tfinit.PseudoFP16Initializer("GaussianFill", seed=3, compute_dtype="bfloat16")
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        dense = L.Dense(2, kernel_initializer=init)
        dense.build((None, 3))
    want = to_numpy(tfinit.GaussianFill(seed=3)((3, 2), "float32"))
    master = mp.parameter_info(dense.kernel).blob_copy["float32"]
    assert to_numpy(master).tobytes() == want.tobytes()
    with mp.scope("reverse", compute_dtype="bfloat16"):
        with pytest.raises(ValueError, match="PseudoFP16Initializer.*scope\\('reverse'"):
            L.Dense(2, kernel_initializer=init).build((None, 3))


@pytest.mark.slow
@jax_only
@pytest.mark.parametrize("mode, dtype", SPECS)
def test_files_store_the_masters_and_load_them_exactly(mp, tmp_path, mode, dtype):
    keras.utils.set_random_seed(2)
    with mp.scope(mode, compute_dtype=dtype):
        model = _model()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 6)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(x, y, batch_size=8, verbose=0)
    masters = mp.get_master_weights(model)
    model.save(tmp_path / "m.keras")
    model.save_weights(tmp_path / "m.weights.h5")
    with h5py.File(tmp_path / "m.weights.h5") as h5:
        stored = [np.asarray(h5[f"layers/{name}/vars/{i}"])
                  for name, n in (("dense", 2), ("batch_normalization", 4), ("dense_1", 2))
                  for i in range(n)]
    # (model.weights: dense's 2, BatchNormalization's 4, dense_1's 2: the file's order)
    assert [s.dtype for s in stored] == [np.float32] * 8
    assert_same_bits(stored, masters)
    with mp.scope(mode, compute_dtype=dtype):
        loaded = keras.models.load_model(tmp_path / "m.keras")
        other = _model()
    other.load_weights(tmp_path / "m.weights.h5")
    for got in (loaded, other):
        assert_same_bits(mp.get_master_weights(got), masters)
    assert isinstance(loaded.optimizer, mp.MasterWeightOptimizer)
    plain = _model()  # an fp32 Keras model reads the masters
    plain.load_weights(tmp_path / "m.weights.h5")
    assert_same_bits(plain.get_weights(), masters)


@jax_only
@pytest.mark.parametrize("name", ["scope", "parameter_info", "MasterWeightOptimizer",
                                  "sync_copies", "get_master_weights", "set_master_weights",
                                  "save_weights", "EarlyStopping", "Caffe2MomentumSGD",
                                  "replica_mismatches"])
def test_jax_docstring_examples_run(mp, name):
    obj = getattr(mp, name)
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    assert tests and tests[0].examples and "Example:" in inspect.getdoc(obj)
    failures = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=failures.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(failures)


# ----------------------------------------------------------------- files across backends

_WRITE = textwrap.dedent("""
    import json, sys
    import keras, numpy as np
    from tfinit import mixed_precision as mp
    mode, dtype, folder = sys.argv[1:4]
    keras.utils.set_random_seed(4)
    with mp.scope(mode, compute_dtype=dtype):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 6)).astype("float32"); y = rng.normal(size=(16, 2)).astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, batch_size=8, verbose=0)
    model.save(folder + "/m.keras")
    model.save_weights(folder + "/m.weights.h5")
    np.savez(folder + "/masters.npz", *mp.get_master_weights(model))
    opt = model.optimizer
    np.savez(folder + "/optimizer.npz", *[np.asarray(v.value) for v in (
        opt.iterations, opt.step_counter, opt.dynamic_scale, *opt.inner_optimizer.variables)])
""")
_READ = textwrap.dedent("""
    import sys, warnings
    import keras, numpy as np
    from tfinit import mixed_precision as mp
    mode, dtype, folder = sys.argv[1:4]
    want = list(np.load(folder + "/masters.npz").values())
    with mp.scope(mode, compute_dtype=dtype):
        loaded = keras.models.load_model(folder + "/m.keras", compile=False)
        other = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    other.load_weights(folder + "/m.weights.h5")
    for model in (loaded, other):
        got = mp.get_master_weights(model)
        assert len(got) == len(want) == 8, (len(got), len(want))
        assert all(a.tobytes() == b.tobytes()
                   for a, b in zip(got, want, strict=True)), "masters differ"
        assert model.layers[0].kernel.dtype == (dtype if mode == "pseudo_fp16" else "float32")
    # Compiled: the optimizer's state loads exactly, without Keras's "Skipping variable
    # loading" warning (the file has the pairs' variables as optimizer state, or not).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mp.scope(mode, compute_dtype=dtype):
            compiled = keras.models.load_model(folder + "/m.keras")
    assert not [w for w in caught if "Skipping variable" in str(w.message)], caught
    opt = compiled.optimizer
    have = [opt.iterations, opt.step_counter, opt.dynamic_scale, *opt.inner_optimizer.variables]
    want = list(np.load(folder + "/optimizer.npz").values())
    assert len(have) == len(want) and int(want[0]) >= 1  # a step applied: state to load
    assert all(np.asarray(h.value).astype(w.dtype).tobytes() == w.tobytes()  # int32/int64
               for h, w in zip(have, want, strict=True)), "optimizer state differs"
    got = mp.get_master_weights(compiled)
    want = list(np.load(folder + "/masters.npz").values())
    assert len(got) == len(want) == 8, (len(got), len(want))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True))
    print("ok", keras.backend.backend())
""")


def _tensorflow_installed():
    import importlib.util

    return os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") != "1" and \
        importlib.util.find_spec("tensorflow") is not None


@pytest.mark.slow
@pytest.mark.tensorflow_only
# each direction once, each mode and each dtype once (a subprocess per backend: 20 s a case)
@pytest.mark.parametrize("writer, reader, mode, dtype", [
    ("tensorflow", "jax", "pseudo_fp16", "float16"), ("jax", "tensorflow", "reverse", "bfloat16")])
def test_a_file_written_on_one_backend_loads_exactly_on_the_other(tmp_path, writer, reader,
                                                                  mode, dtype):
    assert _tensorflow_installed()
    run_python("-c", _WRITE, mode, dtype, tmp_path, backend=writer)
    assert "ok " + reader in run_python("-c", _READ, mode, dtype, tmp_path, backend=reader)

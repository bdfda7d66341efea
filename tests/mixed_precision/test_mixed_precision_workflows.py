"""Mixed precision in the workflows Keras users run: nothing lost, silently or otherwise.

Each test is one reproduction from the "nothing lost" issue, run as a user would. The module
runs on every backend (CI's JAX pass too); the tests that need TensorFlow (``tf.Variable``,
SavedModel, ``tf.function``, its pair records) are marked ``tensorflow_only``. On JAX only:
``keras.distribution.DataParallel`` over two host devices (in a fresh process,
tests/mixed_precision/_jax_data_parallel.py: ``XLA_FLAGS`` must be set before JAX is
imported): masters bit-identical to Keras ``mixed_*`` under the same distribution, copies
``cast(master)``, both replicated and equal on both devices.
"""

import textwrap

import _parity as P
import keras
import ml_dtypes
import numpy as np
import pytest
from _parity import NP, master_bytes as _masters, mlp as _mlp, perturb as _perturb
from _subprocess import run_python

from tfinit import mixed_precision as mp

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
SPECS = P.SPECS
NP16 = P.NP16
_assert_copies_synced = P.assert_copies_synced


def _tf_pairs():
    """TensorFlow's pair records (imported by the tensorflow_only tests that use them)."""
    from tfinit.mixed_precision._tensorflow import pair_records

    return pair_records


# ----------------------------------------------------------------- 1. loss scaling once


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_compile_fit_update_equals_fp32_update(mode, compute_dtype):
    """One SGD step: w = 1 - 0.5 * d/dw mean((0.1 w)^2) = 0.99, as in fp32."""
    def one_dense():
        return keras.Sequential([keras.Input((1,)), keras.layers.Dense(
            1, use_bias=False, kernel_initializer="ones")])

    x, y = np.full((1, 1), 0.1, "f4"), np.zeros((1, 1), "f4")
    fp32 = one_dense()
    fp32.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    fp32.fit(x, y, verbose=0)
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = one_dense()
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.SGD(0.5)), loss="mse")
    assert model.optimizer.__class__ is mp.MasterWeightOptimizer  # not wrapped again
    model.fit(x, y, verbose=0)
    master = mp.get_master_weights(model)[0]
    want = fp32.get_weights()[0]
    np.testing.assert_allclose(master, want, rtol=0, atol=2e-3 * 0.01)
    assert abs(float(master[0, 0]) - 0.99) < 1e-4


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_reverse_float16_keras_file_reloads_optimizer_with_every_variable(tmp_path):
    with mp.scope("reverse", compute_dtype="float16"):
        model = _mlp()
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3)), loss="mse")
    model.fit(np.ones((8, 3), "f4"), np.ones((8, 1), "f4"), epochs=2, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    with mp.scope("reverse", compute_dtype="float16"):
        loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is mp.MasterWeightOptimizer
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
    for want, have in zip(model.optimizer.variables, loaded.optimizer.variables, strict=True):
        assert np.asarray(want).tobytes() == np.asarray(have).tobytes(), want.path
    assert _masters(loaded) == _masters(model)


# ----------------------------------------------------------------- 2. serving


def _assert_serves(artifact, model, outputs, x, want, compute_dtype):
    """The artifact holds the model's variables bit for bit and serves its outputs.

    Outputs may differ from the eager call by a few 16-bit ulps of the output's scale
    (graph-mode kernels round and fuse differently); a dropped or rounded master would change
    the variables themselves, which are compared bit for bit.
    """
    if hasattr(artifact, "variables"):  # model.export keeps them; tf.saved_model.save hides
        held = {v.name.split(":")[0]: np.asarray(v) for v in artifact.variables}
        for variable in model.weights:
            assert held[variable.path].tobytes() == np.asarray(variable).tobytes(), variable.path
    eps = float(ml_dtypes.finfo(NP16[compute_dtype]).eps)
    np.testing.assert_allclose(np.asarray(outputs, np.float32), want, rtol=8 * eps,
                               atol=8 * eps * float(np.abs(want).max()))


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_export_and_saved_model_serve_the_same_outputs(tf, tmp_path, mode, compute_dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = _mlp()
    _perturb(model)
    x = np.linspace(-1, 1, 6, dtype="f4").reshape(2, 3)
    want = np.asarray(model(x, training=False), np.float32)
    model.export(str(tmp_path / "export"))
    exported = tf.saved_model.load(str(tmp_path / "export"))
    _assert_serves(exported, model, exported.serve(tf.constant(x)), x, want, compute_dtype)
    tf.saved_model.save(model, str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    signature = reloaded.signatures["serving_default"]
    (argument,) = signature.structured_input_signature[1]
    (out,) = signature(**{argument: tf.constant(x)}).values()
    _assert_serves(reloaded, model, out, x, want, compute_dtype)
    # The checkpoint side still holds the masters: a tf.train.Checkpoint restores them.
    assert _masters(model) == [a.tobytes() for a in mp.get_master_weights(model)]


# ----------------------------------------------------------------- 3. one truth per read


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_every_standard_read_gives_the_variable_itself(tf, mode, compute_dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        layer = keras.layers.Dense(3)
        layer.build((None, 2))
    _perturb(layer)
    kernel = layer.kernel
    own = compute_dtype if mode == "pseudo_fp16" else "float32"
    reference = kernel.numpy()
    assert str(reference.dtype) == own == kernel.dtype
    reads = {
        "np.asarray": np.asarray(kernel),
        "convert_to_numpy": keras.ops.convert_to_numpy(kernel),
        "tf.convert_to_tensor": tf.convert_to_tensor(kernel).numpy(),
        "value": np.asarray(kernel.value),
        "get_weights": layer.get_weights()[0],
    }
    for how, array in reads.items():
        assert str(array.dtype) == own, how
        assert array.tobytes() == reference.tobytes(), how
    master = mp.get_master_weights(layer)[0]
    assert master.dtype == np.float32
    assert master.astype(NP16[compute_dtype]).tobytes() == _tf_pairs().pair_of(
        kernel).copy.numpy().tobytes()


# ----------------------------------------------------------------- 4. set_weights, EarlyStopping


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_set_weights_of_get_weights_leaves_masters_bit_identical(mode, compute_dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = _mlp()
    _perturb(model)
    before = _masters(model)
    model.set_weights(model.get_weights())
    assert _masters(model) == before
    _assert_copies_synced(model)


def test_fp32_arrays_given_to_set_weights_set_masters_exactly():
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = _mlp()
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=w.shape).astype("f4") for w in model.weights]
    model.set_weights(arrays)
    assert _masters(model) == [a.tobytes() for a in arrays]
    _assert_copies_synced(model)


def test_16bit_value_changes_only_the_elements_it_changes():
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        layer = keras.layers.Dense(2, use_bias=False)
        layer.build((None, 2))
    exact = np.array([[1 + 2**-20, 2 + 2**-19], [3 + 2**-18, 4 + 2**-17]], "f4")
    mp.set_master_weights(layer, [exact])
    value = layer.kernel.numpy()
    value[0, 0] = np.float16(7.0)
    layer.kernel.assign(value)
    master = mp.get_master_weights(layer)[0]
    assert master[0, 0] == 7.0  # the exact widening of the new value
    assert master.ravel()[1:].tobytes() == exact.ravel()[1:].tobytes()  # untouched


@pytest.mark.slow  # fit for four epochs (over 1 s on 2 cores)
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("pseudo_fp16", "bfloat16"),
                                                 ("reverse", "float16")])
def test_early_stopping_restores_best_masters_exactly(mode, compute_dtype):
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
            recorded[epoch] = _masters(self.model)

    stop = mp.EarlyStopping(monitor="score", mode="min", patience=2, restore_best_weights=True)
    model.fit(x, y, epochs=6, batch_size=16, verbose=0, callbacks=[Score(), stop],
              shuffle=False)
    assert stop.best_epoch == 1 and stop.stopped_epoch == 3
    assert [w.dtype for w in stop.best_weights] == [np.float32] * 8
    assert recorded[3] != recorded[1]  # so restoring changes something
    assert _masters(model) == recorded[1]
    _assert_copies_synced(model)
    # training goes on after the restore, the copies still cast(master)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    assert _masters(model) != recorded[1]
    _assert_copies_synced(model)


@pytest.mark.slow  # two fits of four epochs (over 1 s on 2 cores)
@pytest.mark.parametrize("compute_dtype", ["float16", "bfloat16"])
def test_keras_early_stopping_rounds_masters_as_the_docs_say(compute_dtype):
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
    dtypes = [NP[v.dtype] for v in model.weights]
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


# ----------------------------------------------------------------- 5. models built lazily


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="tanh")
        self.norm = keras.layers.LayerNormalization()
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.norm(self.hidden(x)))


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_subclassed_model_built_by_fit_after_the_scope_gets_masters(mode, compute_dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = Subclassed()
    assert not model.built
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x = np.random.default_rng(2).normal(size=(32, 3)).astype("f4")
    history = model.fit(x, x[:, :1], epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    _pairs = _tf_pairs()
    paired = {v.path for v in model.trainable_variables if _pairs.pair_of(v) is not None}
    assert {model.hidden.kernel.path, model.out.kernel.path} <= paired
    # normalization stays fp32 in pseudo_fp16 (unpaired), paired in reverse (it is fp32)
    assert model.norm.gamma.dtype == "float32"
    _assert_copies_synced(model)


@pytest.mark.tensorflow_only
def test_model_built_by_its_first_call_after_the_scope_gets_fp32_filled_masters():
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = Subclassed()
    model(np.ones((2, 3), "f4"))
    pair = _tf_pairs().pair_of(model.hidden.kernel)
    assert pair is not None and model.hidden.kernel.dtype == "float16"
    master = pair.master.numpy()
    # The initializer ran in fp32: the master has bits a 16-bit fill would not have.
    assert not np.array_equal(master, master.astype(np.float16).astype(np.float32))


# ----------------------------------------------------------------- 6. other backends


@pytest.mark.slow  # a subprocess
@pytest.mark.tensorflow_only  # from a process with TensorFlow (the JAX pass runs this module)
def test_scope_on_jax_backend_pairs_without_tensorflow():
    """On JAX, TensorFlow blocked, the scope pairs
    (tests/mixed_precision/test_mixed_precision_jax.py has the
    rest)."""
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, "tests")
        import _no_tensorflow
        _no_tensorflow.install()
        import keras
        from tfinit import mixed_precision as mp
        with mp.scope("reverse", compute_dtype="float16"):
            dense = keras.layers.Dense(2)
            dense.build((None, 3))
        info = mp.parameter_info(dense.kernel)
        print("PAIRED:", dense.kernel.dtype, info.blob_copy["float16"].dtype)
    """)
    assert "PAIRED: float32 float16" in run_python("-c", code, backend="jax")


@pytest.mark.slow  # a subprocess, four trainings and their oracles (~15 s on 2 cores)
@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="keras.distribution on JAX host devices: runs in CI's JAX pass")
def test_data_parallel_masters_match_keras_mixed_bit_for_bit():
    run_python(P.HERE / "_jax_data_parallel.py", backend="jax", devices=2,
               needs_tensorflow=False, ends_with="OK")


# ----------------------------------------------------------------- 7. across dtypes


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("compile_", [False, True])
def test_float16_file_loaded_in_bfloat16_scope_sets_every_master_exactly(tmp_path, compile_):
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = _mlp()
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    model.fit(np.ones((4, 3), "f4"), np.ones((4, 1), "f4"), verbose=0)
    _perturb(model)
    path = str(tmp_path / "f16.keras")
    model.save(path)
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        loaded = keras.models.load_model(path, compile=compile_)
    assert loaded.layers[0].kernel.dtype == "bfloat16"
    assert _masters(loaded) == _masters(model)
    _assert_copies_synced(loaded, count=4)  # both Dense kernels and biases


# ----------------------------------------------------------------- 8 and 9. small defects


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0, -2.0, True, "static"])
def test_loss_scale_must_be_dynamic_none_or_finite_positive(bad):
    with pytest.raises(ValueError, match=r"Argument `loss_scale` must be 'auto', 'dynamic', "
                                         r"None or a finite positive number"):
        mp.MasterWeightOptimizer(keras.optimizers.SGD(), loss_scale=bad)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("dtype", [lambda tf: np.float16, lambda tf: tf.float16,
                                   lambda tf: "float16", lambda tf: np.dtype("float16")],
                         ids=["numpy", "tensorflow", "name", "numpy_dtype"])
def test_scope_accepts_every_spelling_of_a_dtype(tf, dtype):
    with mp.scope(compute_dtype=dtype(tf)):
        v = tf.Variable(1.0)
    assert v.dtype == tf.float16


@pytest.mark.tensorflow_only
def test_blob_copy_accepts_dtype_names_and_assign_add_returns_the_variable_value(tf):
    with mp.scope():
        layer = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
        layer.build((None, 1))
    info = mp.parameter_info(layer.kernel)
    assert info.blob_copy["float32"] is info.blob_copy[tf.float32]
    out = layer.kernel.assign_add(np.full((1, 1), 2**-12, "f4"))
    assert out.dtype == tf.float16  # the variable's own value, not the master
    assert mp.get_master_weights(layer)[0][0, 0] == np.float32(1 + 2**-12)


@pytest.mark.tensorflow_only
def test_clone_model_outside_the_scope_says_what_to_do():
    with mp.scope():
        model = _mlp()
    with pytest.raises(ValueError) as err:
        keras.models.clone_model(model)
    message = str(err.value)
    assert "file" not in message
    assert "rebuilding it outside a scope would create 16-bit weights" in message
    with mp.scope():
        clone = keras.models.clone_model(model)
    assert _tf_pairs().pair_of(clone.layers[0].kernel) is not None


# ----------------------------------------------------------------- the master-weight API


def test_set_master_weights_refuses_wrong_count_and_shape_naming_the_variable():
    with mp.scope():
        model = _mlp()
    arrays = mp.get_master_weights(model)
    with pytest.raises(ValueError, match=r"`arrays` must hold 8 arrays.*Received: 7"):
        mp.set_master_weights(model, arrays[:-1])
    arrays[0] = np.zeros((4, 3), "f4")
    with pytest.raises(ValueError, match=r"dense.*kernel.*shape \(3, 4\).*\(4, 3\)"):
        mp.set_master_weights(model, arrays)
    with pytest.raises(TypeError, match="must be a Keras model or layer"):
        mp.get_master_weights([1, 2])


@pytest.mark.slow  # over 1 s on 2 cores
@pytest.mark.parametrize("mode, compute_dtype", [("pseudo_fp16", "float16"),
                                                 ("reverse", "bfloat16")])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_save_weights_writes_a_plain_file_a_plain_model_loads(tmp_path, dtype_policy, mode,
                                                              compute_dtype, dtype):
    with mp.scope(mode, compute_dtype=compute_dtype):
        model = _mlp()
    masters = _perturb(model)
    path = str(tmp_path / f"{dtype}.weights.h5")
    hooks = [layer.__dict__.get("save_own_variables") for layer in model.layers]
    mp.save_weights(model, path, dtype=dtype)
    assert [layer.__dict__.get("save_own_variables") for layer in model.layers] == hooks
    with dtype_policy(dtype):
        plain = _mlp()
    plain.load_weights(path)
    for want, have in zip(masters, plain.get_weights(), strict=True):
        assert have.dtype == NP[dtype]
        assert have.tobytes() == want.astype(NP[dtype]).tobytes()  # rounded to nearest
    with mp.scope(mode, compute_dtype=compute_dtype):
        fresh = _mlp()
    fresh.load_weights(path)  # a 16-bit file loads as its exact widening
    for want, have in zip(masters, mp.get_master_weights(fresh), strict=True):
        assert have.tobytes() == want.astype(NP[dtype]).astype(np.float32).tobytes()
    _assert_copies_synced(fresh)
    assert _masters(model) == [m.tobytes() for m in masters]  # saving changed nothing


def test_save_weights_refuses_bad_arguments_and_a_stale_copy(tmp_path):
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


def test_16bit_file_loads_into_pseudo_model_as_exact_widening(tmp_path):
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = _mlp()
    masters = _perturb(model)
    path = str(tmp_path / "f16.weights.h5")
    mp.save_weights(model, path, dtype="float16")
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        fresh = _mlp()
    fresh.load_weights(path)
    for want, have in zip(masters, mp.get_master_weights(fresh), strict=True):
        assert have.tobytes() == want.astype(np.float16).astype(np.float32).tobytes()


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_compile_wraps_a_plain_optimizer_in_master_weight_optimizer(mode, compute_dtype):
    """As Keras's compile wraps LossScaleOptimizer under mixed_float16: no master-less update."""
    x, y = np.ones((8, 3), "f4"), np.full((8, 1), 3.0, "f4")
    with mp.scope(mode, compute_dtype=compute_dtype):
        plain, wrapped = _mlp(), _mlp()
    mp.set_master_weights(wrapped, mp.get_master_weights(plain))
    plain.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    wrapped.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.SGD(0.5)), loss="mse")
    assert type(plain.optimizer) is mp.MasterWeightOptimizer
    assert type(plain.optimizer.inner_optimizer) is keras.optimizers.SGD
    before = _masters(plain)
    plain.fit(x, y, epochs=2, verbose=0)
    wrapped.fit(x, y, epochs=2, verbose=0)
    assert _masters(plain) != before
    assert _masters(plain) == _masters(wrapped)
    _assert_copies_synced(plain)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode, compute_dtype", SPECS)
def test_a_plain_optimizer_is_refused_at_its_first_step(tf, mode, compute_dtype):
    """A custom loop, or a model assembled outside the scope, with a plain Keras optimizer."""
    with mp.scope(mode, compute_dtype=compute_dtype):
        layer = keras.layers.Dense(2)
        layer.build((None, 3))
    model = keras.Sequential([keras.Input((3,)), layer])  # constructed outside the scope
    before = _masters(model)
    for optimizer in (keras.optimizers.SGD(0.5), keras.optimizers.Adam(),
                      keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5))):
        grads = [tf.ones(v.shape, v.dtype) for v in layer.trainable_variables]
        with pytest.raises(ValueError, match=r"dense.*kernel.*has an fp32 master.*"
                                             r"MasterWeightOptimizer"):
            optimizer.apply_gradients(zip(grads, layer.trainable_variables, strict=True))
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    with pytest.raises(ValueError, match="MasterWeightOptimizer"):
        model.fit(np.ones((4, 3), "f4"), np.ones((4, 2), "f4"), verbose=0)
    assert _masters(model) == before
    _assert_copies_synced(model)


@pytest.mark.tensorflow_only
def test_saving_refuses_a_copy_changed_behind_its_master(tf, tmp_path):
    """The 16-bit variable changed by hand, not through Keras: saving must not drop that."""
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        model = _mlp()
    copy = _tf_pairs().pair_of(model.layers[0].kernel).copy
    copy.assign(copy + tf.constant(0.5, tf.float16))
    with pytest.raises(ValueError, match="changed without its fp32 master.*MasterWeightOptimizer"):
        model.save_weights(str(tmp_path / "w.weights.h5"))
    with pytest.raises(ValueError, match="changed without its fp32 master"):
        tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))


@pytest.mark.tensorflow_only
def test_shared_weight_gradient_is_summed_in_fp32_like_keras(tf):
    """A Dense read 16 times: each read's gradient comes back in fp32 (as Keras's cast) and
    the tape sums the 16 in fp32, so the gradient is Keras ``mixed_float16``'s bit for bit
    (the same reads, the same float16 arithmetic per read, the same fp32 sum: docs,
    mixed-precision.md, "the read's gradient is summed in float32")."""
    x = np.random.default_rng(3).normal(size=(64, 32)).astype("f4")
    with mp.scope("pseudo_fp16", compute_dtype="float16"):
        shared = keras.layers.Dense(32, activation="tanh")
        shared.build((None, 32))

    def gradient_of(layer, cast):
        with tf.GradientTape() as tape:
            h = cast(x)
            for _ in range(16):
                h = layer(h)
            loss = tf.reduce_sum(tf.cast(h, tf.float32))
        return tape.gradient(loss, layer.kernel)

    def layer_like_shared(dtype, weights):
        layer = keras.layers.Dense(32, activation="tanh", dtype=dtype)
        layer.build((None, 32))
        layer.set_weights(weights)
        return layer

    grad = gradient_of(shared, lambda a: tf.constant(a, tf.float16))
    assert grad.dtype == tf.float32
    # Keras's mixed_float16 with the same (16-bit) weights: each read casts the fp32 kernel
    # to float16, and the tape sums the casts' fp32 gradients in fp32.
    keras_grad = gradient_of(
        layer_like_shared("mixed_float16", [w.astype("f4") for w in shared.get_weights()]),
        lambda a: tf.constant(a)).numpy()
    assert grad.numpy().tobytes() == keras_grad.tobytes()
    # The data tell the two sums apart: a plain float16 layer with the same weights does the
    # same reads and the same per-read float16 arithmetic, but its tape sums the 16 float16
    # gradients in float16 (what a 16-bit pseudo_fp16 kernel would get without its fp32
    # read). That sum differs from the fp32 one in most elements, so a 16-bit sum fails the
    # bit comparison above.
    sum16 = gradient_of(layer_like_shared("float16", shared.get_weights()),
                        lambda a: tf.constant(a, tf.float16)).numpy()
    assert sum16.dtype == np.float16
    differs = sum16.astype("f4") != keras_grad
    assert differs.mean() > 0.5, differs.mean()


# ----------------------------------------------------------------- Keras parity (issue 22)
# The parity matrix (tests/mixed_precision/test_keras_parity.py) holds the recurrent,
# regularizer, Normalization.adapt, file-generation and jit checks once; here only what it
# does not: a converted Caffe2 net trained in a scope.


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("compute_dtype", ["float16", "bfloat16"])
def test_a_caffe2_char_rnn_converted_in_a_scope_trains_in_graph_mode(tf, compute_dtype):
    import caffe2_nets as nets
    from tfinit.caffe2 import to_keras

    folder = nets.realmodels_dir()
    ref = np.load(folder / "char_rnn_forward.npz", allow_pickle=False)
    names = ("input_blob", "hidden_init", "cell_init", "seq_lengths")
    with mp.scope("pseudo_fp16", compute_dtype=compute_dtype):
        model = to_keras(folder / "char_rnn_predict_net.pb", folder / "char_rnn_init_net.pb",
                         {n: ref[f"input/{n}"].shape[1:] for n in names})
    feed = [ref[f"input/{n}"] for n in names]
    optimizer = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(model(feed)[3], tf.float32) ** 2)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    before = _masters(model)
    losses = [float(step()) for _ in range(3)]
    assert losses[-1] < losses[0]
    after = _masters(model)
    assert len(before) == len(after) > 0
    assert all(a != b for a, b in zip(before, after, strict=True))
    _assert_copies_synced(model)

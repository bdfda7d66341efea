"""master="split" and bfloat16 optimizer state on Keras's JAX backend (CI's JAX pass).

Mirrors tests/mixed_precision/test_split_master.py (TensorFlow). The oracle is the same: the
fp32-master scope (``master="fp32"``) from the same weights with the same inner optimizer;
the split masters must equal its masters bit for bit after every step, except where a master
lands on a tie above an even copy (stored 1 ulp toward the copy), counted and checked here.
The layout's oracle is numpy: ``ml_dtypes``' round-to-nearest-even cast and integer bits.
"""

import gc

import h5py
import keras
import ml_dtypes
import numpy as np
import pytest
from _arrays import to_numpy as _np
from _subprocess import run_python
from _split_cases import FP32, SPLIT
from _split_cases import assert_equal_up_to_ties as _assert_equal_up_to_ties
from _split_cases import data as _data
from _split_cases import layout_case as _layout_case
from _split_cases import model as _model

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
ON_JAX = keras.backend.backend() == "jax"
jax_only = pytest.mark.skipif(not ON_JAX, reason="runs in CI's JAX pass (KERAS_BACKEND=jax); "
                              "TensorFlow's split is tests/mixed_precision/test_split_master.py")


# ------------------------------------------------------------------ the bit layout

@jax_only
@pytest.mark.parametrize("context", ["eager", "jit"])
def test_split_and_join_are_exact_except_the_tie_above_an_even_copy(context):
    import jax

    from tfinit._split_master import jax as _jax_split

    bits = _layout_case()
    master = bits.view(np.float32)
    split, join = _jax_split.split, _jax_split.join
    if context == "jit":
        split, join = jax.jit(split), jax.jit(join)
    copy, remainder = split(master)
    back = _np(join(copy, remainder)).view(np.uint32)
    assert copy.dtype == "bfloat16" and remainder.dtype == "int16"
    nan = np.isnan(master)
    with np.errstate(invalid="ignore"):
        rne = master.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = _np(copy).view(np.uint16)
    np.testing.assert_array_equal(got[~nan], rne[~nan])
    assert np.isnan(_np(copy)[nan].astype(np.float32)).all()
    tie = ((bits & 0xFFFF) == 0x8000) & (((bits >> 16) & 1) == 0) & ~nan
    assert tie.sum() >= 4
    np.testing.assert_array_equal(back[~nan & ~tie], bits[~nan & ~tie])
    np.testing.assert_array_equal(back[tie], bits[tie] - 1)  # one ulp toward the copy
    assert np.isnan(back.view(np.float32)[nan]).all()
    assert _jax_split.ties(master) == int(tie.sum())


@jax_only
def test_the_scope_refuses_float16_and_reverse_as_on_tensorflow(mp):
    with pytest.raises(ValueError, match="only bfloat16 is the top half of a float32"):
        with mp.scope("pseudo_fp16", "float16", master="split"):
            pass
    with pytest.raises(ValueError, match="mode='reverse'.*Received: master='split'"):
        with mp.scope("reverse", "bfloat16", master="split"):
            pass


@jax_only
def test_a_split_pair_holds_a_bfloat16_copy_and_an_int16_remainder_only(mp):
    from tfinit import _keras_internals as internals
    from tfinit.mixed_precision._keras_variables import pair_records as _jax_pairs

    split, fp32 = _model("split"), _model("fp32")
    for v in split.weights:
        info = mp.parameter_info(v)
        assert v.dtype == "bfloat16" and list(info.blob_copy) == ["int16"]
        assert info.blob_copy[np.int16].name == info.name + "_rem"
        assert not internals.is_initialized(_jax_pairs.pair_of(v).master)  # no fp32 value
    for a, b in zip(mp.get_master_weights(split), mp.get_master_weights(fp32), strict=True):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
    n = sum(int(np.prod(v.shape)) for v in split.weights)
    stored = sum(_np(v).nbytes for p in _jax_pairs.pairs_of(split.weights) for _, v in p.stored())
    assert stored == 4 * n


# ------------------------------------------------------------------ training: bit identity

def _gradients(model, x, y):
    """The gradients of the model's 16-bit variables (JAX), eagerly."""
    import jax

    trainable = [v.value for v in model.trainable_variables]
    others = [v.value for v in model.non_trainable_variables]

    def loss(values):
        out, _ = model.stateless_call(values, others, x)
        return keras.ops.mean(keras.ops.square(keras.ops.cast(out, "float32") - y))

    return jax.grad(loss)(trainable)


OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(1e-2, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-3),
    "adamw_ema": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.01, use_ema=True),
    "lion_clip": lambda: keras.optimizers.Lion(1e-4, global_clipnorm=1.0),
    "rmsprop_accum": lambda: keras.optimizers.RMSprop(1e-3, gradient_accumulation_steps=2),
}


def train_side_by_side(mp, make_optimizer, context, steps=4):
    """Step an fp32-master and a split model together (``fit``: Keras's compiled step on
    JAX, one ``fit`` call a step; ``fit_once``: one ``fit`` of ``steps`` epochs; ``eager``:
    ``apply`` with gradients from ``jax.grad``); returns (updates, ties).
    After a tie the fp32 run is set to the split run's masters and both carry on."""
    x, y = _data()
    models = _model("fp32"), _model("split")
    optimizers = [mp.MasterWeightOptimizer(make_optimizer()) for _ in models]
    for model, optimizer in zip(models, optimizers, strict=True):
        model.compile(optimizer=optimizer, loss="mse")
    ties = updates = 0
    if context == "fit_once":
        for model in models:
            model.fit(x, y, batch_size=len(x), epochs=steps, verbose=0, shuffle=False)
        steps = 1
    for _ in range(steps):
        for model, optimizer in zip(models, optimizers, strict=True):
            if context == "fit_once":
                pass
            elif context == "fit":
                model.fit(x, y, batch_size=len(x), epochs=1, verbose=0, shuffle=False)
            else:
                optimizer.apply(_gradients(model, x, y), model.trainable_variables)
        want, got = mp.get_master_weights(models[0]), mp.get_master_weights(models[1])
        ties += _assert_equal_up_to_ties(want, got)
        updates += sum(w.size for w in want) * (4 if context == "fit_once" else 1)
        for a, b in zip(models[0].weights, models[1].weights, strict=True):  # the same copies
            assert _np(a).tobytes() == _np(b).tobytes()
        if ties:
            mp.set_master_weights(models[0], got)
    from tfinit import _keras_internals as internals
    from tfinit.mixed_precision._keras_variables import pair_records as _jax_pairs

    assert not any(internals.is_initialized(p.master)  # no fp32 master between steps
                   for p in _jax_pairs.pairs_of(models[1].weights))
    return updates, ties


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
@pytest.mark.parametrize("name, context", [(n, "fit") for n in sorted(OPTIMIZERS)]
                         + [("adam", "eager"), ("adamw_ema", "eager")])  # (CI time)
def test_split_masters_equal_fp32_masters_bit_for_bit(mp, name, context):
    if (name, context) == ("adamw_ema", "fit"):
        # A second fit() with use_ema fails on JAX in Keras 3.15's EMA finalize, plain Keras
        # mixed_bfloat16 included (the averages hold no value then): one fit of 4 epochs,
        # which ends with the masters set to their EMA.
        context = "fit_once"
    updates, ties = train_side_by_side(mp, OPTIMIZERS[name], context)
    assert updates == 4 * (10 * 24 + 24 + 24 * 5 + 5)
    assert ties <= 2, ties  # rare: they need 16 exact low bits


@jax_only
def test_an_eager_step_with_an_overflow_changes_no_master(mp):
    model = _model("split")
    opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1), loss_scale="dynamic")
    opt.build(model.trainable_variables)
    before = mp.get_master_weights(model)
    grads = [np.full(v.shape, np.inf if i == 0 else 1.0, np.float32).astype(ml_dtypes.bfloat16)
             for i, v in enumerate(model.trainable_variables)]
    opt.apply(grads)
    _same_masters(model, before, mp)
    assert float(_np(opt.dynamic_scale)) == 2.0**14
    grads[0] = np.ones(grads[0].shape, ml_dtypes.bfloat16)
    opt.apply(grads)
    step = np.float32(0.1) * (np.float32(1.0) / np.float32(2.0**14))
    assert mp.get_master_weights(model)[1].tobytes() == (before[1] - step).tobytes()


# ------------------------------------------------------------------ calls that do not train

#: the calls that do not train (issue 48): after each, every master is bit-unchanged
NON_TRAINING_CALLS = {
    "evaluate": lambda model, x, y: model.evaluate(x, y, batch_size=16, verbose=0),
    "predict": lambda model, x, y: model.predict(x, batch_size=16, verbose=0),
    "test_on_batch": lambda model, x, y: model.test_on_batch(x[:16], y[:16]),
    "predict_on_batch": lambda model, x, y: model.predict_on_batch(x[:16]),
    "direct call": lambda model, x, y: model(x),
}


def _compiled_pair(mp, freeze=None):
    """(fp32-master model, split model), ``freeze`` applied to each, the same weights, each
    compiled with its own Adam (the fp32-master run is the split run's oracle)."""
    models = _model("fp32"), _model("split")
    for model in models:
        if freeze is not None:
            freeze(model)
        model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2)),
                      loss="mse")
    mp.set_master_weights(models[1], mp.get_master_weights(models[0]))  # LoRA's draws too
    return models


def _low_halves(masters):
    """How many elements of ``masters`` have nonzero low 16 bits (what a rounding loses)."""
    return sum(int(np.count_nonzero(m.view(np.uint32) & 0xFFFF)) for m in masters)


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
def test_calls_that_do_not_train_leave_every_split_master_bit_unchanged(mp):
    """Keras's JAX trainer writes the values of a compiled step back into the model's
    variables after evaluate, predict and the per-batch calls. That write must not re-make a
    split master from its bfloat16 copy (the remainders were wiped: issue 48). After a
    training step, each call leaves every master bit-unchanged, and the split run still
    equals the fp32-master run up to ties."""
    x, y = _data()
    models = _compiled_pair(mp)
    for name, call in NON_TRAINING_CALLS.items():
        for model in models:
            model.train_on_batch(x[:16], y[:16])
            before = mp.get_master_weights(model)
            assert _low_halves(before) > 0.9 * sum(m.size for m in before)
            call(model, x, y)
            changed = [int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
                       for a, b in zip(mp.get_master_weights(model), before, strict=True)]
            assert not any(changed), f"{name} changed {changed} master elements"
        got = mp.get_master_weights(models[1])
        if _assert_equal_up_to_ties(mp.get_master_weights(models[0]), got):
            mp.set_master_weights(models[0], got)


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
def test_fit_with_validation_data_trains_as_fit_without(mp):
    """``fit(..., validation_data=...)`` evaluates after each epoch; the split masters come
    out bit-identical to the same fit without validation, and equal the fp32-master run's
    with validation up to ties."""
    x, y = _data()
    fp32, split = _compiled_pair(mp)
    plain = _compiled_pair(mp)[1]
    for model, validation in ((fp32, (x, y)), (split, (x, y)), (plain, None)):
        model.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False,
                  validation_data=validation)
    _same_masters(split, mp.get_master_weights(plain), mp)
    assert _assert_equal_up_to_ties(mp.get_master_weights(fp32),
                                    mp.get_master_weights(split)) <= 2


def _frozen_first_layer(model):
    model.layers[0].trainable = False


def _lora_first_layer(model):
    model.layers[0].enable_lora(2)


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
@pytest.mark.parametrize("freeze", [_frozen_first_layer, _lora_first_layer],
                         ids=["trainable_false", "enable_lora"])
def test_fit_and_train_on_batch_leave_frozen_split_masters_exact(mp, freeze):
    """A frozen layer's kernel (``trainable = False``, or frozen by ``enable_lora``) is no
    optimizer state: Keras writes its bfloat16 copy back after fit and train_on_batch, which
    must not round its split master (issue 48: every frozen element was). Its master stays
    bit-identical, and the model trains as the fp32-master run does, up to ties."""
    x, y = _data()
    models = _compiled_pair(mp, freeze)
    (kernel,) = [i for i, v in enumerate(models[1].weights)
                 if v.path.endswith(f"/{models[1].layers[0].name}/kernel")]
    initial = mp.get_master_weights(models[1])
    before = initial[kernel]
    assert _low_halves([before]) > 0.9 * before.size  # a rounding would show
    for model in models:
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
        model.train_on_batch(x[:16], y[:16])
        assert mp.get_master_weights(model)[kernel].tobytes() == before.tobytes()
    want, got = (mp.get_master_weights(model) for model in models)
    assert _assert_equal_up_to_ties(want, got) <= 2
    trained = [i for i, (g, b) in enumerate(zip(got, initial, strict=True))
               if g.tobytes() != b.tobytes()]
    assert trained and kernel not in trained


# ------------------------------------------------------------------ reads, writes, files

@jax_only
def test_set_master_weights_is_exact_and_a_tie_moves_one_ulp_toward_its_copy(mp):
    model = _model("split")
    arrays = mp.get_master_weights(model)
    kernel = arrays[0].copy()
    kernel.view(np.uint32)[0, 0] = 0x3F808000  # a tie above the even copy 0x3F80 (1.0)
    kernel.view(np.uint32)[0, 1] = 0x3F818000  # a tie above an odd copy: exact
    arrays[0] = kernel
    mp.set_master_weights(model, arrays)
    got = mp.get_master_weights(model)
    assert got[0].view(np.uint32)[0, 0] == 0x3F807FFF
    assert got[0].view(np.uint32)[0, 1] == 0x3F818000
    assert float(_np(model.weights[0])[0, 0]) == 1.0
    got[0].view(np.uint32)[0, 0] = 0x3F808000
    assert len(got) == len(arrays) > 0
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, arrays, strict=True))
    layer = model.layers[0]
    layer.kernel.assign_add(np.full(layer.kernel.shape, 1e-4, np.float32))
    np.testing.assert_array_equal(mp.get_master_weights(model)[0][1:], arrays[0][1:] + 1e-4)
    assert mp.sync_copies(model) == 4  # nothing to re-cast: the copy is the top half


def _perturbed(mp):
    model = _model("split")
    rng = np.random.default_rng(1)
    mp.set_master_weights(model, [w + np.float32(1e-4) + rng.normal(size=w.shape)
                                  .astype(np.float32) * np.float32(1e-5)
                                  for w in mp.get_master_weights(model)])
    want = mp.get_master_weights(model)
    assert any(not np.array_equal(w, w.astype(ml_dtypes.bfloat16).astype(np.float32))
               for w in want)
    return model, want


def _same_masters(model, want, mp):
    got = mp.get_master_weights(model)
    assert len(got) == len(want) > 0
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))


def _datasets(path):
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: found.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset)
                     else None)
    return found


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_keras_files_round_trip_and_cross_to_the_fp32_master_scope(mp, tmp_path, suffix):
    model, want = _perturbed(mp)
    first = str(tmp_path / f"split{suffix}")
    model.save(first) if suffix == ".keras" else model.save_weights(first)

    def load(path, master):
        if suffix == ".keras":
            with mp.scope(**(SPLIT if master == "split" else FP32)):
                return keras.models.load_model(path)
        other = _model(master, seed=99)
        other.load_weights(path)
        return other

    fp32 = load(first, "fp32")
    _same_masters(fp32, want, mp)
    second = str(tmp_path / f"fp32{suffix}")
    fp32.save(second) if suffix == ".keras" else fp32.save_weights(second)
    _same_masters(load(second, "split"), want, mp)
    _same_masters(load(first, "split"), want, mp)
    if suffix == ".weights.h5":
        # the fp32-master layout (the one TensorFlow's tfinit writes and reads), byte for byte
        split_file, fp32_file = _datasets(first), _datasets(second)
        assert sorted(split_file) == sorted(fp32_file)
        for key, value in split_file.items():
            assert value.dtype == fp32_file[key].dtype
            assert value.tobytes() == fp32_file[key].tobytes(), key
        plain = keras.Sequential([keras.Input((10,)), keras.layers.Dense(24, activation="tanh"),
                                  keras.layers.Dense(5)])
        plain.load_weights(first)  # an fp32 Keras model reads the masters
        _same_masters(plain, want, mp)


# ------------------------------------------------------------------ optimizer state, memory

@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
def test_bfloat16_optimizer_state_for_masters_only_and_its_bad_values(mp):
    with mp.scope(**SPLIT):
        model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(6),
                                  keras.layers.BatchNormalization(), keras.layers.Dense(5)])
    opt = mp.MasterWeightOptimizer(
        keras.optimizers.Adam(1e-3, use_ema=True, gradient_accumulation_steps=2),
        state_dtype="bfloat16")
    opt.build(model.trainable_variables)
    dtypes = {}
    for v in opt.inner_optimizer.variables:
        if v.path.startswith(opt.inner_optimizer.name + "/") and len(v.shape):
            kind = v.name.rsplit("_", 1)[-1]
            unpaired = "gamma" in v.name or "beta" in v.name
            dtypes.setdefault((kind, unpaired), set()).add(v.dtype)
    assert dtypes[("momentum", False)] == dtypes[("velocity", False)] == {"bfloat16"}
    assert dtypes[("momentum", True)] == {"float32"}  # BatchNormalization: no master
    assert dtypes[("average", False)] == dtypes[("accumulator", False)] == {"float32"}
    x, y = _data()
    model.compile(optimizer=opt, loss="mse")
    before = mp.get_master_weights(model)
    model.fit(x, y, batch_size=24, epochs=1, verbose=0, shuffle=False)  # 2 steps: 1 update
    assert any(a.tobytes() != b.tobytes()
               for a, b in zip(mp.get_master_weights(model), before, strict=True))
    restored = mp.MasterWeightOptimizer.from_config(opt.get_config())
    assert restored.state_dtype == "bfloat16"
    with pytest.raises(ValueError, match=r"Argument `state_dtype` must be None, 'float32', "
                                         r"'bfloat16' or 'int8'\. Received: state_dtype='float16'"):
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), state_dtype="float16")


@jax_only
@pytest.mark.slow  # over 1 s on 2 cores
def test_persistent_bytes_per_parameter_with_adam_measured_from_the_live_arrays(mp):
    """After ``fit``, every array JAX holds (``jax.live_arrays``) over the model's parameters:
    fp32 masters 14 (2 + 4 + 8), split 12 (2 + 2 + 8), split + bfloat16 state 8 (2 + 2 + 4)."""
    import jax

    def live_bytes():
        gc.collect()
        return sum(a.nbytes for a in jax.live_arrays())

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 256)).astype("f4"), rng.normal(size=(8, 256)).astype("f4")
    measured = {}
    for master, state in [("fp32", None), ("split", None), ("split", "bfloat16")]:
        before = live_bytes()
        with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master=master):
            model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(256),
                                      keras.layers.Dense(256)])
        model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3),
                                                         state_dtype=state), loss="mse")
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        measured[master, state] = (live_bytes() - before) / model.count_params()
        del model
    # the optimizer's scalars (iterations, learning rate, loss scale) are the only extra bytes
    assert {k: round(v, 2) for k, v in measured.items()} == {
        ("fp32", None): 14.0, ("split", None): 12.0, ("split", "bfloat16"): 8.0}, measured


# ------------------------------------------------------------------ files across backends

_WRITE = """
import sys
import keras, numpy as np
from tfinit import mixed_precision as mp
folder = sys.argv[1]
keras.utils.set_random_seed(4)
with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(2)])
rng = np.random.default_rng(0)
x, y = rng.normal(size=(16, 6)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
model.fit(x, y, batch_size=8, verbose=0, shuffle=False)
model.save(folder + "/m.keras")
model.save_weights(folder + "/m.weights.h5")
np.savez(folder + "/masters.npz", *mp.get_master_weights(model))
"""
_READ = """
import sys
import keras, numpy as np
from tfinit import mixed_precision as mp
folder = sys.argv[1]
want = list(np.load(folder + "/masters.npz").values())
assert any(not np.array_equal(w, w.astype("bfloat16").astype("float32")) for w in want)
with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    loaded = keras.models.load_model(folder + "/m.keras", compile=False)
    other = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(2)])
other.load_weights(folder + "/m.weights.h5")
for model in (loaded, other):
    got = mp.get_master_weights(model)
    assert len(got) == len(want) > 0, (len(got), len(want))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True)), "masters differ"
    assert model.layers[0].kernel.dtype == "bfloat16"
print("ok", keras.backend.backend())
"""


@pytest.mark.slow
@pytest.mark.tensorflow_only  # both backends, in subprocesses: TensorFlow must be installed
@pytest.mark.parametrize("writer, reader", [("tensorflow", "jax"), ("jax", "tensorflow")])
def test_a_split_file_written_on_one_backend_loads_exactly_on_the_other(tmp_path, writer,
                                                                        reader):
    run_python("-c", _WRITE, tmp_path, backend=writer)
    assert "ok " + reader in run_python("-c", _READ, tmp_path, backend=reader)

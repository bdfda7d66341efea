"""master="split": the bfloat16 copy plus an int16 remainder hold the fp32 master exactly.

The oracle is the fp32-master scope (``master="fp32"``) from the same weights: its masters after
N steps must equal the split scope's bit for bit, except where a master lands exactly on the
one value a 16-bit remainder cannot hold (a tie above an even copy, stored 1 ulp toward the
copy). The step-by-step comparisons below count those ties, check each is stored as
documented, and carry on from there.
"""

import json

import _parity as P
import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from _subprocess import run_python
from _split_cases import FP32, SPLIT
from _split_cases import assert_equal_up_to_ties as _assert_equal_up_to_ties
from _split_cases import data as _data
from _split_cases import layout_case as _layout_case
from _split_cases import model as _model

from tfinit._split_master import tensorflow as _split_master
from tfinit import mixed_precision as mp
from tfinit.mixed_precision._tensorflow import pair_records as _pairs


# ------------------------------------------------------------------ the bit layout

@pytest.mark.parametrize("context", ["eager", "function", "jit"])
def test_split_and_join_are_exact_except_the_tie_above_an_even_copy(context):
    bits = _layout_case()
    master = bits.view(np.float32)
    split, join = _split_master.split, _split_master.join
    if context != "eager":
        split = tf.function(split, jit_compile=context == "jit")
        join = tf.function(join, jit_compile=context == "jit")
    copy, remainder = split(tf.constant(master))
    back = join(copy, remainder).numpy().view(np.uint32)
    nan = np.isnan(master)
    with np.errstate(invalid="ignore"):
        rne = master.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert remainder.dtype == tf.int16 and copy.dtype == tf.bfloat16
    # the copy is the round-to-nearest-even cast, bit for bit (NaN: a NaN of the same sign)
    got = copy.numpy().view(np.uint16)
    np.testing.assert_array_equal(got[~nan], rne[~nan])
    assert np.isnan(copy.numpy()[nan].astype(np.float32)).all()
    tie = ((bits & 0xFFFF) == 0x8000) & (((bits >> 16) & 1) == 0) & ~nan
    assert tie.sum() >= 4  # the special cases, at least
    np.testing.assert_array_equal(back[~nan & ~tie], bits[~nan & ~tie])
    # a tie is stored one ulp toward its copy, and its copy is still cast(master)
    np.testing.assert_array_equal(back[tie], bits[tie] - 1)
    np.testing.assert_array_equal(
        back[tie].view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16), rne[tie])
    assert np.isnan(back.view(np.float32)[nan]).all()
    assert int(_split_master.ties(master)) == int(tie.sum())


def test_special_values_survive_exactly():
    values = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38],
                      np.float32)
    copy, remainder = _split_master.split(values)
    back = _split_master.join(copy, remainder).numpy()
    assert back.tobytes() == values.tobytes()


# ------------------------------------------------------------------ the scope

def test_split_is_refused_with_float16_and_in_reverse_mode():
    with pytest.raises(ValueError, match="only bfloat16 is the top half of a float32"):
        with mp.scope("pseudo_fp16", "float16", master="split"):
            pass
    with pytest.raises(ValueError, match="mode='reverse'.*Received: master='split'"):
        with mp.scope("reverse", "bfloat16", master="split"):
            pass
    with pytest.raises(ValueError, match=r"argument `master` must be one of \('fp32', "
                                         r"'split', 'stochastic'\)\. Received: master='fp16'"):
        with mp.scope("pseudo_fp16", "bfloat16", master="fp16"):
            pass


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_a_split_pair_holds_a_bfloat16_copy_and_an_int16_remainder_only():
    split, fp32 = _model("split"), _model("fp32")
    for v in split.weights:
        info = mp.parameter_info(v)
        assert v.dtype == "bfloat16"
        assert list(info.blob_copy) == [tf.int16]
        assert info.blob_copy[tf.int16].name.endswith(info.name + "_rem:0")
    # same initial masters as the fp32-master scope, bit for bit
    for a, b in zip(mp.get_master_weights(split), mp.get_master_weights(fp32), strict=True):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
    # 4 bytes per parameter (fp32-master scope: 6)
    n = sum(int(np.prod(v.shape)) for v in split.weights)
    stored = sum(v.numpy().nbytes for p in _pairs.pairs_of(split.weights) for _, v in p.stored())
    assert stored == 4 * n
    stored = sum(v.numpy().nbytes for p in _pairs.pairs_of(fp32.weights) for _, v in p.stored())
    assert stored == 6 * n


# ------------------------------------------------------------------ training: bit identity

def _stepper(model, optimizer, context):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss
    return step if context == "eager" else tf.function(step, jit_compile=context == "jit")


def train_side_by_side(make_optimizer, context, steps=6, ulps=0):
    """Step an fp32-master and a split model together; returns (elements updated, ties).

    After each step the split masters must equal the fp32-master ones bit for bit, except
    at ties, which must be 1 ulp toward the copy; the fp32 run is then set to the split
    run's masters (the same copies, so the same next step) and both carry on."""
    x, y = _data()
    models = _model("fp32"), _model("split")
    steps_fns = [_stepper(m, mp.MasterWeightOptimizer(make_optimizer()), context)
                 for m in models]
    ties = updates = 0
    for _ in range(steps):
        for fn in steps_fns:
            fn(x, y)
        want = mp.get_master_weights(models[0])
        got = mp.get_master_weights(models[1])
        ties += _assert_equal_up_to_ties(want, got, ulps)
        updates += sum(w.size for w in want)
        for v, c in zip(models[0].weights, models[1].weights, strict=True):  # same copies always
            assert v.numpy().tobytes() == c.numpy().tobytes()
        mp.set_master_weights(models[0], got)
    return updates, ties


OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(1e-2, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(1e-3),
    "adamw_ema": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.01, use_ema=True),
    "adafactor": lambda: keras.optimizers.Adafactor(1e-2),
    "muon": lambda: keras.optimizers.Muon(1e-2),
    "lion_clip": lambda: keras.optimizers.Lion(1e-4, global_clipnorm=1.0),
    "rmsprop_accum": lambda: keras.optimizers.RMSprop(1e-3, gradient_accumulation_steps=2),
}


def _keras_trains_with(make_optimizer):
    """Whether Keras's own optimizer trains a plain Keras model here (Keras 3.10's Muon reads
    ``path`` from the tf.Variable it is given and fails on TensorFlow, with or without tfinit)."""
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    try:
        make_optimizer().apply([tf.ones((3, 2)), tf.ones((2,))], layer.trainable_variables)
    except AttributeError:
        return False
    return True


def _optimizer_case(name):
    if _keras_trains_with(OPTIMIZERS[name]):
        return name
    return pytest.param(name, marks=pytest.mark.xfail(
        strict=True, reason=f"Keras {keras.__version__}'s own {name} fails on TensorFlow"))


#: how the step runs: eagerly, in a tf.function, compiled by XLA (the scratch master)
CONTEXTS = ("eager", "function", "jit")


def _optimizer_contexts():
    """Each optimizer in two of the three contexts, rotating, so that every context runs four
    or five of the seven optimizers (14 cases of the product's 21; CI's time)."""
    cases = []
    for i, name in enumerate(sorted(OPTIMIZERS)):
        for context in (CONTEXTS[(i + 2) % 3], CONTEXTS[i % 3]):
            case = _optimizer_case(name)
            marks = case.marks if hasattr(case, "marks") else ()
            cases.append(pytest.param(name, context, marks=marks, id=f"{name}-{context}"))
    return cases


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("name, context", _optimizer_contexts())
def test_split_masters_equal_fp32_masters_bit_for_bit(name, context):
    ulps = 0
    if (name, context) == ("adafactor", "jit") and tf.__version__.startswith("2.16."):
        # Measured: XLA of TensorFlow 2.16 sometimes (depending on what the process compiled
        # before) rounds Adafactor's update 1 ulp apart between the two ways of storing the
        # master (4 of the 24 first-bias elements); TensorFlow 2.21's XLA gives the same bits.
        ulps = 1
    updates, ties = train_side_by_side(OPTIMIZERS[name], context, ulps=ulps)
    assert updates == 6 * (10 * 24 + 24 + 24 * 5 + 5)
    # Ties are rare (they need 16 exact low bits); none is expected in ~2,300 updates.
    assert ties <= 2, ties


class _History(keras.callbacks.Callback):
    """The masters after every batch."""

    def __init__(self):
        super().__init__()
        self.masters = []

    def on_train_batch_end(self, batch, logs=None):
        self.masters.append(mp.get_master_weights(self.model))


def _fit_side_by_side(jit_compile, epochs=2, make_optimizer=lambda: keras.optimizers.Adam(1e-3),
                      with_last_batch=False):
    """Fit an fp32-master and a split model; compare their masters after every batch up to
    the first batch with a tie (after a tie the runs differ by that ulp)."""
    x, y = _data(64)
    histories, models = [], []
    for master in ("fp32", "split"):
        model = _model(master)
        model.compile(optimizer=make_optimizer(), loss="mse", jit_compile=jit_compile)
        history = _History()
        model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, shuffle=False,
                  callbacks=[history])
        histories.append(history.masters)
        models.append(model)
    assert len(histories[0]) == len(histories[1]) == 4 * epochs
    compared = 0
    for want, got in zip(*histories, strict=True):
        compared += 1
        if _assert_equal_up_to_ties(want, got):
            break
    if with_last_batch:
        return models, compared, histories[1][-1]
    return models, compared


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_fit_trains_split_like_fp32_and_scratches_stay_empty():
    models, compared = _fit_side_by_side(jit_compile=False)
    assert compared == 8  # no tie in these 8 batches: bit-identical throughout
    pairs = _pairs.pairs_of(models[1].weights)
    assert all(int(tf.size(p.master_variable)) == 0 for p in pairs)  # nothing kept in fp32
    assert isinstance(models[1].optimizer, mp.MasterWeightOptimizer)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_fit_ends_with_the_ema_of_the_masters_as_with_fp32_masters():
    # Keras's fit ends with finalize_variable_values: the EMA overwrites the masters.
    models, compared, last_batch = _fit_side_by_side(
        jit_compile=False, with_last_batch=True,
        make_optimizer=lambda: keras.optimizers.AdamW(1e-2, use_ema=True, ema_momentum=0.5))
    assert compared == 8
    final = mp.get_master_weights(models[1])
    assert len(final) == len(last_batch) > 0
    # EMA applied
    assert all(a.tobytes() != b.tobytes() for a, b in zip(final, last_batch, strict=True))
    assert _assert_equal_up_to_ties(mp.get_master_weights(models[0]), final) == 0
    for pair in _pairs.pairs_of(models[1].weights):
        assert int(tf.size(pair.master_variable)) == 0


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_fit_with_jit_compile_keeps_the_scratch_and_stays_exact():
    models, compared = _fit_side_by_side(jit_compile=True)
    assert compared >= 4
    # XLA cannot resize a variable: the scratch keeps the exact master from then on,
    # and set_master_weights keeps it in step.
    for pair in _pairs.pairs_of(models[1].weights):
        assert pair.scratch_kept
        kept = _pairs.components(pair.master_variable)[0].numpy()
        assert kept.tobytes() == pair.master_value().numpy().tobytes()
    new = [w + np.float32(1e-3) for w in mp.get_master_weights(models[1])]
    mp.set_master_weights(models[1], new)
    for pair, want in zip(_pairs.pairs_of(models[1].weights), new, strict=True):
        assert _pairs.components(pair.master_variable)[0].numpy().tobytes() == want.tobytes()
    x, y = _data(64)
    models[1].fit(x, y, batch_size=16, epochs=1, verbose=0)  # the compiled step still runs


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_mirrored_strategy_two_replicas():
    out = run_python(P.HERE / "_split_master_mirrored.py", timeout=600)
    found = json.loads(out.strip().splitlines()[-1])
    assert found["loop_identical"] and found["fit_identical"], found
    assert found["loop_ties"] == 0, found
    assert found["mismatches"] == [], found
    assert found["kinds"] == ["MirroredVariable"], found
    assert found["scratch_elements"] == [0] * 8, found


# ------------------------------------------------------------------ reads, writes, files

def _perturbed(master):
    model = _model(master)
    arrays = [w + np.float32(1e-4) + np.random.default_rng(1).normal(size=w.shape)
              .astype(np.float32) * np.float32(1e-5) for w in mp.get_master_weights(model)]
    mp.set_master_weights(model, arrays)
    want = mp.get_master_weights(model)
    assert any(not np.array_equal(w, w.astype(ml_dtypes.bfloat16).astype(np.float32))
               for w in want)
    return model, want


def _same(model, want):
    got = mp.get_master_weights(model)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    for v in model.weights:
        pair = _pairs.pair_of(v)
        assert pair.copy.numpy().tobytes() == tf.cast(pair.master_value(), tf.bfloat16) \
            .numpy().tobytes()


def test_set_master_weights_is_exact_and_a_tie_moves_one_ulp_toward_its_copy():
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
    assert model.weights[0].numpy()[0, 0] == 1.0
    got[0].view(np.uint32)[0, 0] = 0x3F808000
    for g, w in zip(got, arrays, strict=True):
        assert g.tobytes() == w.tobytes()


def test_layer_writes_and_regularizers_use_the_exact_master():
    keras.utils.set_random_seed(2)
    with mp.scope(**SPLIT):
        layer = keras.layers.Dense(30, kernel_regularizer=keras.regularizers.L2(1e-5))
        layer.build((None, 30))
    master = mp.get_master_weights(layer)[0]
    want = 1e-5 * np.sum(np.square(master.astype(np.float64)))
    penalty = float(layer.losses[0])
    assert abs(penalty - want) <= 1e-6 * want  # fp32 sum of 900 terms
    layer.kernel.assign_add(np.full((30, 30), 1e-4, np.float32))
    np.testing.assert_array_equal(mp.get_master_weights(layer)[0],
                                  master + np.float32(1e-4))
    layer.kernel.assign(layer.kernel.numpy())  # set_weights(get_weights()) is lossless
    np.testing.assert_array_equal(mp.get_master_weights(layer)[0], master + np.float32(1e-4))


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_tf_train_checkpoint_round_trips_and_crosses_to_the_fp32_master_scope(tmp_path):
    model, want = _perturbed("split")
    opt = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3))
    opt.build(model.trainable_variables)
    path = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt"))
    for master in ("split", "fp32"):
        other = _model(master, seed=99)
        tf.train.Checkpoint(model=other).read(path).expect_partial()
        _same_masters(other, want)
    # and back: an fp32-master checkpoint into a split model
    fp32 = _model("fp32", seed=99)
    tf.train.Checkpoint(model=fp32).read(path).expect_partial()
    path2 = tf.train.Checkpoint(model=fp32).write(str(tmp_path / "ckpt2"))
    split = _model("split", seed=5)
    tf.train.Checkpoint(model=split).read(path2).expect_partial()
    _same(split, want)


def _same_masters(model, want):
    for g, w in zip(mp.get_master_weights(model), want, strict=True):
        assert g.tobytes() == w.tobytes()


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_keras_files_round_trip_and_cross_to_the_fp32_master_scope(tmp_path, suffix):
    model, want = _perturbed("split")
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
    _same_masters(fp32, want)
    second = str(tmp_path / f"fp32{suffix}")
    fp32.save(second) if suffix == ".keras" else fp32.save_weights(second)
    _same(load(second, "split"), want)
    _same(load(first, "split"), want)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_export_serves_the_bfloat16_copy_as_the_fp32_master_scope_does(tmp_path):
    model, want = _perturbed("split")
    fp32 = _model("fp32", seed=99)
    mp.set_master_weights(fp32, want)
    x = _data()[0][:4]
    served = []
    for name, m in (("split", model), ("fp32", fp32)):
        m.export(str(tmp_path / name), verbose=False)
        loaded = tf.saved_model.load(str(tmp_path / name))
        served.append(np.asarray(loaded.serve(x)))
    assert served[0].dtype == ml_dtypes.bfloat16
    assert served[0].tobytes() == served[1].tobytes()
    np.testing.assert_array_equal(served[0], np.asarray(tf.function(model)(x)))


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_early_stopping_restores_the_exact_best_masters():
    x, y = _data(64)
    model = _model("split")
    model.compile(optimizer=keras.optimizers.Adam(0.3), loss="mse")  # overshoots
    best = {}

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            best[epoch] = (logs["loss"], mp.get_master_weights(self.model))

    stop = mp.EarlyStopping(monitor="loss", patience=1, restore_best_weights=True)
    model.fit(x, y, epochs=10, batch_size=64, verbose=0, callbacks=[Record(), stop])
    assert stop.stopped_epoch > 0
    epoch = min(best, key=lambda e: best[e][0])
    assert epoch < max(best)  # the restore goes back
    _same(model, best[epoch][1])


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_a_caffe2_model_converted_in_a_split_scope_loads_exactly_and_trains():
    import caffe2_nets as nets
    from tfinit.caffe2 import to_keras

    folder = nets.realmodels_dir()
    ref = np.load(folder / "char_rnn_forward.npz", allow_pickle=False)
    names = ("input_blob", "hidden_init", "cell_init", "seq_lengths")
    shapes = {n: ref[f"input/{n}"].shape[1:] for n in names}
    models = {}
    for master in ("fp32", "split"):
        with mp.scope(**(SPLIT if master == "split" else FP32)):
            models[master] = to_keras(folder / "char_rnn_predict_net.pb",
                                      folder / "char_rnn_init_net.pb", shapes)
    for a, b in zip(mp.get_master_weights(models["fp32"]),
                    mp.get_master_weights(models["split"]), strict=True):
        assert a.tobytes() == b.tobytes()  # Caffe2's fp32 values, exactly, in both
    feed = [ref[f"input/{n}"] for n in names]
    for model in models.values():
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1))

        @tf.function
        def step(model=model, optimizer=optimizer):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.cast(model(feed)[3], tf.float32) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = [float(step()) for _ in range(3)]
        assert losses[-1] < losses[0]
    assert _assert_equal_up_to_ties(mp.get_master_weights(models["fp32"]),
                                    mp.get_master_weights(models["split"])) == 0


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_bfloat16_optimizer_state_for_masters_only_and_its_bad_values():
    model = _model("split")
    opt = mp.MasterWeightOptimizer(
        keras.optimizers.Adam(1e-3, use_ema=True, gradient_accumulation_steps=2),
        state_dtype="bfloat16")
    opt.build(model.trainable_variables)
    dtypes = {}
    for v in opt.inner_optimizer.variables:
        kind = v.name.rsplit("_", 1)[-1]
        dtypes.setdefault(kind, set()).add(v.dtype)
    assert dtypes["momentum"] == dtypes["velocity"] == {"bfloat16"}
    assert dtypes["average"] == dtypes["accumulator"] == {"float32"}
    x, y = _data()
    _stepper(model, opt, "function")(x, y)
    restored = mp.MasterWeightOptimizer.from_config(opt.get_config())
    assert restored.state_dtype == "bfloat16"
    with pytest.raises(ValueError, match=r"Argument `state_dtype` must be None, 'float32', "
                                         r"'bfloat16' or 'int8'\. Received: state_dtype='float16'"):
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), state_dtype="float16")

"""keras-hub causal LMs in a mixed-precision scope, as a keras-hub user writes them.

Tiny GPT2, Gemma and Llama tasks built from config (no download; token ids fed directly,
``preprocessor=None``): the constructor's own ``compile`` trains the masters, ``compile``
with no optimizer or ``"auto"`` gives keras-hub's default (Adam(2e-5)), the masters after a
step are Keras ``mixed_bfloat16``'s (TensorFlow: bit for bit in both modes; JAX: ``reverse``
bit for bit, pseudo_fp16 within the measured bound of its 16-bit embedding gradient), logits
in the dtype Keras mixed gives, LoRA, ``generate``, ``.keras`` / ``.weights.h5`` files and
presets on a local directory.
"""

import contextlib
import importlib.util
import os

import keras
import numpy as np
import pytest

from tfinit import mixed_precision as mp

keras_hub = pytest.importorskip("keras_hub")

pytestmark = pytest.mark.backend_neutral

# keras-hub's fit and predict run their inputs through tf.data or grain: without TensorFlow
# (CI's JAX and torch passes block it) they need grain, which the test extra does not carry.
needs_data_pipeline = pytest.mark.skipif(
    importlib.util.find_spec("grain") is None and (
        os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1"
        or importlib.util.find_spec("tensorflow") is None),
    reason="keras-hub's fit/predict need tf.data or grain; TensorFlow is blocked here")

VOCABULARY = 128
BACKEND = keras.backend.backend()


def gpt2():
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16, dropout=0.0)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def gemma():
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=32, head_dim=8, dropout=0.0)
    return keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)


def llama():
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=32)
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)


def batch(rows=4, length=8, seed=0):
    rng = np.random.default_rng(seed)
    x = {"token_ids": rng.integers(1, VOCABULARY, (rows, length)).astype("int32"),
         "padding_mask": np.ones((rows, length), bool)}
    return x, rng.integers(1, VOCABULARY, (rows, length)).astype("int32")


def bf16_exact(weights):
    """The weights rounded to bfloat16 and widened back: Keras mixed and pseudo_fp16 then
    compute with the same values."""
    return [np.asarray(keras.ops.convert_to_numpy(
        keras.ops.cast(keras.ops.cast(w, "bfloat16"), "float32"))) for w in weights]


def assert_trains_masters(lm, x, y, optimizer_class, learning_rate):
    assert isinstance(lm.optimizer, mp.MasterWeightOptimizer), lm.optimizer
    inner = lm.optimizer.inner_optimizer
    assert type(inner) is optimizer_class, inner
    assert float(keras.ops.convert_to_numpy(inner.learning_rate)) == pytest.approx(
        learning_rate, rel=1e-6)
    before = mp.get_master_weights(lm)
    lm.fit(x, y, batch_size=len(y), epochs=1, verbose=0)
    after = mp.get_master_weights(lm)
    moved = sum(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert moved >= len(after) // 2, (moved, len(after))
    assert mp.replica_mismatches(lm) == []  # every copy is cast(master)


@needs_data_pipeline
@pytest.mark.slow
@pytest.mark.parametrize("build", [gpt2, gemma, llama])
def test_a_task_compiled_by_its_constructor_trains_its_masters(build):
    """keras-hub compiles every task in its constructor (inside the block): ``fit`` right
    after construction trains the masters with keras-hub's default Adam(2e-5)."""
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        lm = build()
    if build is gpt2:
        assert_trains_masters(lm, *batch(), keras.optimizers.Adam, 2e-5)
    else:  # the same wrapping (GPT2 trains it)
        assert isinstance(lm.optimizer, mp.MasterWeightOptimizer)
        assert type(lm.optimizer.inner_optimizer) is keras.optimizers.Adam


def test_compile_gives_the_compile_methods_own_default():
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        lm = gpt2()
    for optimizer in ({}, {"optimizer": "auto"}):  # none: keras-hub's, not Keras's rmsprop
        lm.compile(sampler="greedy", **optimizer)
        assert isinstance(lm.optimizer, mp.MasterWeightOptimizer), optimizer
        assert type(lm.optimizer.inner_optimizer) is keras.optimizers.Adam
        assert float(keras.ops.convert_to_numpy(lm.optimizer.inner_optimizer.learning_rate)
                     ) == pytest.approx(2e-5)
    assert isinstance(lm.sampler, keras_hub.samplers.GreedySampler)
    lm.compile(optimizer="adamw")  # a string
    assert type(lm.optimizer.inner_optimizer) is keras.optimizers.AdamW


@needs_data_pipeline
@pytest.mark.slow
def test_compile_inside_the_block_with_an_optimizer_object():
    with mp.scope("reverse", compute_dtype="bfloat16"):
        lm = gpt2()
        lm.compile(optimizer=keras.optimizers.AdamW(3e-3), sampler="greedy")
    x, y = batch()
    assert_trains_masters(lm, x, y, keras.optimizers.AdamW, 3e-3)


@needs_data_pipeline
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pseudo_fp16", "reverse"])
def test_one_step_matches_keras_mixed(mode):
    """From bfloat16-exact weights, one SGD step: the masters are Keras mixed_bfloat16's
    weights (TensorFlow: bit for bit in both modes, and float32 logits as Keras mixed's;
    JAX: ``reverse`` bit for bit; pseudo_fp16's token embedding, whose copy is a bfloat16
    leaf whose gradient JAX rounds to bfloat16 before its contributions meet, within the
    measured bound), and the logits in Keras mixed's dtype."""
    keras.utils.set_random_seed(1)
    start = bf16_exact(gpt2().get_weights())
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        oracle = gpt2()
    finally:
        keras.config.set_dtype_policy("float32")
    oracle.set_weights(start)
    with mp.scope(mode, compute_dtype="bfloat16"):
        lm = gpt2()
    mp.set_master_weights(lm, start)
    x, y = batch(8, 12)
    want_logits, got_logits = oracle.predict(x, verbose=0), lm.predict(x, verbose=0)
    assert got_logits.dtype == want_logits.dtype, (got_logits.dtype, want_logits.dtype)
    assert want_logits.dtype == ("float32" if BACKEND == "tensorflow" else "bfloat16")
    np.testing.assert_array_equal(got_logits, want_logits)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for model in (oracle, lm):
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    want, got = oracle.get_weights(), mp.get_master_weights(lm)
    for variable, a, b, s in zip(oracle.weights, want, got, start, strict=True):
        if BACKEND == "jax" and mode == "pseudo_fp16" and variable.path == (
                "token_embedding/embeddings"):
            # each element's update is the step's lr * gradient: bounded by two bfloat16
            # roundings (2**-8 each, relative) of the largest gradient element
            largest_update = float(np.max(np.abs(a - s)))
            assert np.max(np.abs(a - b)) <= 2 * 2.0**-8 * largest_update, variable.path
            assert not np.array_equal(a, s)
            continue
        assert a.tobytes() == b.tobytes(), (variable.path, float(np.max(np.abs(a - b))))


@needs_data_pipeline
@pytest.mark.slow
def test_lora_trains_the_adapters_and_keeps_the_frozen_masters():
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        lm = gpt2()
    lm.backbone.enable_lora(rank=2)
    lm.compile(optimizer=keras.optimizers.Adam(1e-2), sampler="greedy")
    x, y = batch()
    lora = [v for v in lm.trainable_weights if "lora" in v.path]
    assert lora and all(v.dtype == "float32" for v in lora)  # as Keras makes them
    frozen_before = mp.get_master_weights(lm)
    lora_before = [keras.ops.convert_to_numpy(v) for v in lora]
    lm.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert any(not np.array_equal(keras.ops.convert_to_numpy(v), b)
               for v, b in zip(lora, lora_before, strict=True))
    index = [w.path for w in lm.weights].index("transformer_layer_0/self_attention/query/kernel")
    assert not lm.weights[index].trainable  # LoRA froze it
    np.testing.assert_array_equal(mp.get_master_weights(lm)[index], frozen_before[index])
    assert mp.replica_mismatches(lm) == []


@pytest.mark.slow
@pytest.mark.parametrize("master", ["fp32", "split"])
def test_per_batch_calls_keep_every_master_and_lora_keeps_the_frozen_base(master):
    """Issue 48, through the per-batch calls (no data pipeline needed): after LoRA steps with
    ``train_on_batch``, ``predict_on_batch`` and ``test_on_batch`` change no master, and the
    base weights LoRA froze keep their masters bit for bit (split on JAX had rounded all of
    them to bfloat16; ``master="split"`` needs TensorFlow's or JAX's bit arithmetic)."""
    if master == "split" and BACKEND == "torch":
        pytest.skip("master='split' is refused on torch (its bit arithmetic is jax.numpy or "
                    "TensorFlow); the fp32 case runs there")
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master=master):
        lm = gpt2()
    lm.backbone.enable_lora(rank=2)
    lm.compile(optimizer=keras.optimizers.Adam(1e-2), sampler="greedy")
    x, y = batch()
    frozen = [i for i, v in enumerate(lm.weights) if not v.trainable]
    start = mp.get_master_weights(lm)
    assert frozen and sum(int(np.count_nonzero(start[i].view(np.uint32) & 0xFFFF))
                          for i in frozen) > 0  # a rounding to bfloat16 would show
    lm.train_on_batch(x, y)
    lm.train_on_batch(x, y)
    trained = mp.get_master_weights(lm)
    assert any(trained[i].tobytes() != start[i].tobytes()
               for i in range(len(start)) if i not in frozen)
    lm.predict_on_batch(x)
    lm.test_on_batch(x, y)
    after = mp.get_master_weights(lm)
    changed = {lm.weights[i].path: int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
               for i, (a, b) in enumerate(zip(after, trained, strict=True))}
    assert not any(changed.values()), changed
    for i in frozen:
        assert after[i].tobytes() == start[i].tobytes(), lm.weights[i].path


def _generating():
    """Where ``generate`` runs: JAX's 32-bit mode on JAX. CI's JAX pass turns 64-bit mode on
    (for the int64 fills), under which keras-hub's sampler fails in Keras itself, with or
    without tfinit ("index arguments to dynamic_slice must be integers of the same type")."""
    if BACKEND == "jax":
        import jax

        return jax.enable_x64(False)
    return contextlib.nullcontext()


@pytest.mark.slow
def test_generate_on_token_ids():
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        lm = gpt2()
    lm.compile(sampler="greedy")
    x, _ = batch(2, 8)
    x["padding_mask"][:, 4:] = False
    with _generating():
        out = lm.generate(x, stop_token_ids=None)
    ids = np.asarray(out["token_ids"])
    assert ids.shape == (2, 8)
    np.testing.assert_array_equal(ids[:, :4], x["token_ids"][:, :4])  # the prompt kept
    assert np.all((ids >= 0) & (ids < VOCABULARY))
    assert np.all(np.asarray(out["padding_mask"]))  # the 4 free places were generated
    with _generating():
        again = lm.generate(x, stop_token_ids=None)  # greedy: deterministic
    np.testing.assert_array_equal(np.asarray(again["token_ids"]), ids)


@needs_data_pipeline
@pytest.mark.slow
def test_files_and_presets_reload_in_a_scope_and_compile_wraps(tmp_path):
    """``.keras`` (``load_model`` inside the scope, ``compile(AdamW(...))`` inside the block),
    a preset (``from_preset`` inside, ``compile`` after the block) and ``.weights.h5``: the
    masters exactly, and ``compile`` wraps wherever it runs."""
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        lm = gpt2()
    x, y = batch()
    lm.fit(x, y, batch_size=4, epochs=1, verbose=0)
    masters = [m.tobytes() for m in mp.get_master_weights(lm)]
    lm.save(str(tmp_path / "lm.keras"))
    lm.save_weights(str(tmp_path / "lm.weights.h5"))
    lm.save_to_preset(str(tmp_path / "preset"))
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
        loaded = keras.saving.load_model(str(tmp_path / "lm.keras"))
        loaded.compile(optimizer=keras.optimizers.AdamW(1e-3))
        from_preset = keras_hub.models.CausalLM.from_preset(str(tmp_path / "preset"))
        again = gpt2()
        again.load_weights(str(tmp_path / "lm.weights.h5"))
    for model in (loaded, from_preset, again):
        assert [m.tobytes() for m in mp.get_master_weights(model)] == masters
    assert isinstance(loaded.optimizer, mp.MasterWeightOptimizer)
    assert type(loaded.optimizer.inner_optimizer) is keras.optimizers.AdamW
    from_preset.compile(optimizer=keras.optimizers.AdamW(1e-3))
    assert_trains_masters(from_preset, x, y, keras.optimizers.AdamW, 1e-3)

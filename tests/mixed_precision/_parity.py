"""Helpers of the Keras parity matrix (tests/mixed_precision/test_keras_parity.py).

The oracle: the same workflow under Keras's own ``mixed_<dtype>`` policy on the same Keras
backend (TensorFlow, JAX or torch), from the same fp32 weights, on the same data. ``twins`` builds
both models; ``assert_bitwise`` compares tfinit's
masters with Keras's fp32 weights bit for bit and reports the largest ulp difference.

Also the one home of the mixed-precision tests' shared pieces, on every backend: the small
model ``mlp``, ``master_bytes``, ``perturb`` and ``assert_copies_synced``.
"""

from pathlib import Path

import keras
import ml_dtypes
import numpy as np

from conftest import use_dtype_policy
from tfinit import mixed_precision as mp

HERE = Path(__file__).resolve().parent  # tests/mixed_precision: the subprocess scripts
MODES = ("pseudo_fp16", "reverse")
DTYPES = ("float16", "bfloat16")
SPECS = [(mode, dtype) for mode in MODES for dtype in DTYPES]
NP16 = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
NP = {"float32": np.float32, **NP16}


def mlp():
    """Dense(4, tanh), BatchNormalization, Dense(1) on 3 inputs: four paired arrays (the
    Dense kernels and biases) beside four fp32 ones in pseudo_fp16."""
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])


def master_bytes(model):
    """The bytes of each of ``model``'s masters (``get_master_weights``), to compare exactly."""
    return [a.tobytes() for a in mp.get_master_weights(model)]


def perturb(model):
    """Give every master bits its 16-bit copy cannot hold, so any rounding shows; returns the
    masters set."""
    rng = np.random.default_rng(0)
    arrays = [a + (rng.normal(size=a.shape) * 1e-4).astype(a.dtype)
              for a in mp.get_master_weights(model)]
    mp.set_master_weights(model, arrays)
    assert any(not np.array_equal(a, a.astype(np.float16).astype(np.float32)) for a in arrays)
    return arrays


def pairwise(*factors):
    """The cases ``(mode, dtype, *values)`` that run every pair of values of any two factors
    (mode, dtype and ``factors``), in far fewer cases than their full product.

    One factor: each value under two specs that differ in mode and in dtype (the values at
    even positions under pseudo_fp16-float16 and reverse-bfloat16, the others under
    pseudo_fp16-bfloat16 and reverse-float16): half the product. Two factors of three or
    more values: each pair of their values once, under ``SPECS[(i + j) % 4]``, so each value
    meets three or four consecutive specs, both modes and both dtypes among them: a quarter
    of the product. The coverage is checked here, so a change of the lists cannot lose a pair.
    """
    if len(factors) == 1:
        cases = [(*SPECS[s], value) for i, value in enumerate(factors[0])
                 for s in ((0, 3), (1, 2))[i % 2]]
    else:
        first, second = factors
        cases = [(*SPECS[(i + j) % len(SPECS)], a, b)
                 for i, a in enumerate(first) for j, b in enumerate(second)]
    axes = [MODES, DTYPES, *factors]
    for x in range(len(axes)):
        for y in range(x + 1, len(axes)):
            seen = {(case[x], case[y]) for case in cases}
            missing = [(a, b) for a in axes[x] for b in axes[y] if (a, b) not in seen]
            assert not missing, f"pairwise cases miss {missing}"
    return cases
BATCH = 8


def eps(dtype):
    return float(ml_dtypes.finfo(NP16[dtype]).eps)


#: Keras's global dtype policy set to a name while open, restored after (tests/conftest.py)
keras_policy = use_dtype_policy


def keras_mixed(factory, dtype):
    """``factory()`` under Keras's ``mixed_<dtype>`` policy."""
    with keras_policy(f"mixed_{dtype}"):
        return factory()


def twins(factory, mode, dtype, seed=0):
    """(Keras mixed model, tfinit model) holding the same fp32 weights.

    The Keras model is built under ``mixed_<dtype>``; its ``get_weights()`` (fp32) become the
    tfinit model's masters (``set_master_weights``), so both start bit-identical.
    """
    keras.utils.set_random_seed(seed)
    ref = keras_mixed(factory, dtype)
    keras.utils.set_random_seed(seed)
    with mp.scope(mode, compute_dtype=dtype):
        model = factory()
    mp.set_master_weights(model, ref.get_weights())
    assert_bitwise(mp.get_master_weights(model), ref.get_weights(), names(ref), "initial")
    return ref, model


def names(model):
    return [v.path for v in model.weights]


def index_of(model, suffix):
    """The index in ``model.weights`` of the one variable whose path ends in ``suffix``."""
    (index,) = [i for i, v in enumerate(model.weights) if v.path.endswith("/" + suffix)]
    return index


def data(x_shape, y_shape, n=3 * BATCH, seed=0, x_int=None):
    """Deterministic inputs (normal, or integers below ``x_int``) and float32 targets."""
    rng = np.random.default_rng(seed)
    if x_int is None:
        x = rng.normal(size=(n,) + tuple(x_shape)).astype("float32")
    else:
        x = rng.integers(0, x_int, size=(n,) + tuple(x_shape)).astype("int32")
    y = rng.normal(size=(n,) + tuple(y_shape)).astype("float32")
    return x, y


def _ordered(a):
    """float32 bits as integers ordered like the floats: |difference| counts ulps."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def max_ulps(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.size == 0:
        return 0
    return int(np.max(np.abs(_ordered(a) - _ordered(b))))


def _describe(i, name, have, want):
    have, want = np.asarray(have), np.asarray(want)
    if have.shape != want.shape or have.dtype != want.dtype:
        return (f"#{i} {name}: {have.dtype}{have.shape} against Keras's "
                f"{want.dtype}{want.shape}")
    if want.dtype.kind != "f" and str(want.dtype) not in ("bfloat16",):
        return f"#{i} {name}: {np.count_nonzero(have != want)} elements differ"
    diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
    return (f"#{i} {name}: {np.count_nonzero(have != want)}/{want.size} elements differ, "
            f"max {max_ulps(have, want)} float32 ulps, max abs {float(np.max(diff)):.3g} "
            f"(max|w| {float(np.max(np.abs(want))):.3g})")


def assert_bitwise(have, want, labels=None, what="masters"):
    """Every array of ``have`` equals the one of ``want`` bit for bit (dtype, shape, bytes)."""
    have, want = list(have), list(want)
    assert len(have) == len(want), f"{what}: {len(have)} arrays against Keras's {len(want)}"
    labels = labels or [str(i) for i in range(len(want))]
    bad = []
    for i, (h, w) in enumerate(zip(have, want, strict=True)):
        h, w = np.asarray(h), np.asarray(w)
        if h.dtype != w.dtype or h.shape != w.shape or h.tobytes() != w.tobytes():
            bad.append(_describe(i, labels[i], h, w))
    assert not bad, f"{what} differ from Keras mixed:\n  " + "\n  ".join(bad)


def close_failures(have, want, before, dtype, labels=None, ulps=8):
    """``{index: message}`` of the arrays whose update ``have - before`` is not within ``ulps``
    compute-dtype ulps of the oracle's update ``want - before``, relative to the largest
    |update| of that array (plus the same number of ulps of max|w| in float32, for the final
    rounding of the weight itself)."""
    have, want, before = list(have), list(want), list(before)
    assert len(have) == len(want) == len(before)
    labels = labels or [str(i) for i in range(len(want))]
    bad = {}
    for i, (h, w, b) in enumerate(zip(have, want, before, strict=True)):
        h, w, b = (np.asarray(a, np.float64) for a in (h, w, b))
        assert h.shape == w.shape, labels[i]
        step_h, step_w = h - b, w - b
        scale = float(np.max(np.abs(step_w))) if step_w.size else 0.0
        tol = ulps * eps(dtype) * scale + ulps * 2.0**-23 * float(np.max(np.abs(w), initial=0))
        err = float(np.max(np.abs(step_h - step_w), initial=0))
        if not np.all(np.isfinite(h)) or err > tol:
            bad[i] = (f"#{i} {labels[i]}: update differs by {err:.3g} > {tol:.3g} "
                      f"(max|update| {scale:.3g})")
    return bad


def assert_close(have, want, before, dtype, labels=None, ulps=8, what="masters",
                 oracle="Keras mixed"):
    """``close_failures`` finds none (see there)."""
    bad = close_failures(have, want, before, dtype, labels, ulps)
    assert not bad, f"{what} differ from {oracle} beyond the tolerance:\n  " + \
        "\n  ".join(bad.values())


def master_and_copy(variable):
    """(fp32 master, 16-bit copy) of a paired variable, through the public ParameterInfo."""
    info = mp.parameter_info(variable)
    (other,) = info.blob_copy.values()
    if np.asarray(keras.ops.convert_to_numpy(other)).dtype == np.float32:
        return other, variable  # pseudo_fp16: the variable is the copy
    return variable, other  # reverse: the variable is the master


def assert_copies_synced(model, count=None):
    """Each paired variable's copy is exactly the cast of its master (what layers compute
    with); at least one variable is paired (given ``count``: that many)."""
    paired = 0
    for variable in model.weights:
        try:
            master, copy = master_and_copy(variable)
        except ValueError:
            continue
        paired += 1
        copy = np.asarray(keras.ops.convert_to_numpy(copy))
        cast = np.asarray(keras.ops.convert_to_numpy(master), np.float32).astype(copy.dtype)
        assert cast.tobytes() == copy.tobytes(), f"{variable.path}: stale 16-bit copy"
    assert paired if count is None else paired == count, f"{paired} paired variables"


def fit(model, optimizer, x, y, epochs=1, loss="mse", jit_compile="auto", callbacks=None,
        fresh_compile=False):
    """``compile`` then ``fit``. ``fresh_compile`` (torch): dynamo's caches are cleared first,
    so ``jit_compile=True`` compiles this model's step (dynamo stops compiling a code object
    after ``recompile_limit`` recompilations, and every Keras layer shares ``Layer.__call__``:
    late in a process a "compiled" fit would run eagerly)."""
    if fresh_compile and keras.backend.backend() == "torch":
        import torch

        torch.compiler.reset()
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=callbacks)


_REFERENCES = {}


def keras_reference(key, ref, train):
    """Keras mixed's weights after ``train(ref)``.

    Keras's side of a test does not depend on tfinit's mode, so its result is computed once per
    ``key`` (which names the workflow; the policy and the initial weights are added here) and
    reused by the other mode: a reuse requires the same policy and bit-identical initial
    weights, and leaves ``ref`` holding the trained weights as if it had trained.
    """
    initial = b"".join(w.tobytes() for w in ref.get_weights())
    key = (key, ref.dtype_policy.name)
    hit = _REFERENCES.get(key)
    if hit is not None and hit[0] == initial:
        ref.set_weights(hit[1])
        return [w.copy() for w in hit[1]]
    train(ref)
    weights = ref.get_weights()
    _REFERENCES[key] = (initial, [w.copy() for w in weights])
    return weights


def fit_twins(ref, model, make_optimizer, x, y, key=None, **kwargs):
    """Fit both from a fresh inner optimizer each: Keras's compile wraps it as it does under
    mixed_float16 (LossScaleOptimizer), tfinit's is wrapped in MasterWeightOptimizer.

    With ``key`` (a name unique to the workflow), Keras's result is shared between modes.
    Returns (tfinit masters, Keras weights)."""
    def train(ref):
        fit(ref, make_optimizer(ref), x, y, **kwargs)

    if key is None:
        train(ref)
        want = ref.get_weights()
    else:
        want = keras_reference((key, x.tobytes(), y.tobytes(), repr(sorted(kwargs.items()))),
                               ref, train)
    fit(model, mp.MasterWeightOptimizer(make_optimizer(model)), x, y, **kwargs)
    return mp.get_master_weights(model), want


def custom_loop(model, optimizer, x, y, jit_compile=False):
    """Keras 3's custom loop: ``scale_loss`` inside the tape, ``apply_gradients`` after (on
    JAX: the stateless loop of Keras's JAX guide, ``stateless_apply`` under ``jax.jit``; on
    torch: the eager step of Keras's torch trainer, ``backward`` then ``apply``)."""
    if keras.backend.backend() == "jax":
        return _jax_custom_loop(model, optimizer, x, y)
    if keras.backend.backend() == "torch":
        return _torch_custom_loop(model, optimizer, x, y)
    import tensorflow as tf

    variables = model.trainable_variables

    @tf.function(jit_compile=jit_compile)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            pred = tf.cast(model(xb, training=True), tf.float32)
            loss = tf.reduce_mean(tf.square(pred - yb))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    losses = []
    for start in range(0, len(x), BATCH):
        losses.append(float(step(tf.constant(x[start:start + BATCH]),
                                 tf.constant(y[start:start + BATCH]))))
    return losses


def _jax_custom_loop(model, optimizer, x, y):
    import jax

    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable, opt_vars, xb, yb):
        pred, non_trainable = model.stateless_call(trainable, non_trainable, xb, training=True)
        loss = keras.ops.mean(keras.ops.square(keras.ops.cast(pred, "float32") - yb))
        mapping = list(zip(optimizer.variables, opt_vars, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            scaled = optimizer.scale_loss(loss)
        return scaled, (loss, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    @jax.jit
    def step(state, xb, yb):
        trainable, non_trainable, opt_vars = state
        (_, (loss, non_trainable)), grads = grad_fn(trainable, non_trainable, opt_vars, xb, yb)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return loss, (trainable, non_trainable, opt_vars)

    state = ([v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables])
    losses = []
    for start in range(0, len(x), BATCH):
        loss, state = step(state, x[start:start + BATCH], y[start:start + BATCH])
        losses.append(float(loss))
    for variables, values in zip((model.trainable_variables, model.non_trainable_variables,
                                  optimizer.variables), state, strict=True):
        for variable, value in zip(variables, values, strict=True):
            variable.assign(value)
    return losses


def _torch_custom_loop(model, optimizer, x, y):
    """The step of Keras's torch trainer (``TorchTrainer.train_step``), eager: the forward,
    the module's gradients cleared, ``backward`` of the scaled loss, each trainable
    variable's ``.value.grad`` applied under ``torch.no_grad``."""
    import torch

    variables = model.trainable_variables
    losses = []
    for start in range(0, len(x), BATCH):
        xb = keras.ops.convert_to_tensor(x[start:start + BATCH])
        yb = keras.ops.convert_to_tensor(y[start:start + BATCH])
        pred = keras.ops.cast(model(xb, training=True), "float32")
        model.zero_grad()
        loss = keras.ops.mean(keras.ops.square(pred - yb))
        optimizer.scale_loss(loss).backward()
        with torch.no_grad():
            optimizer.apply([v.value.grad for v in variables], variables)
        losses.append(float(keras.ops.convert_to_numpy(loss)))
    return losses

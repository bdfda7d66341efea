"""Run by tests/distribute/test_distribute.py in a fresh interpreter: two logical CPUs must be
configured before TensorFlow initialises. Each check records what it measured; the test
file asserts on it. Prints one JSON line: {check name: {"error": traceback | None, ...}}.
The test sets the environment (``TF_CPP_MIN_LOG_LEVEL=3``).
"""

import json
import sys
import traceback

import keras
import numpy as np
import tensorflow as tf

import tfinit
from tfinit import distribute as tfd
from tfinit import mixed_precision as mp
from tfinit.mixed_precision._tensorflow import pair_records as _pairs

# Two logical CPUs, configured before anything runs on the TensorFlow runtime (importing
# Keras and tfinit does not start it).
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

MIRRORED = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
ONE_DEVICE = tf.distribute.get_strategy()  # the default strategy: one device, no replicas
GLOBAL_BATCH, EPOCHS = 16, 3
_rng = np.random.default_rng(0)
X = _rng.normal(size=(64, 4)).astype(np.float32)
Y = (X @ np.array([[1.0], [-2.0], [0.5], [0.3]], np.float32)).astype(np.float32)


def _model():
    return keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(16, activation="relu", kernel_initializer=tfinit.XavierFill(seed=1)),
        keras.layers.Dense(1, kernel_initializer=tfinit.GaussianFill(std=0.1, seed=2),
                           bias_initializer=tfinit.ConstantFill(0.25)),
    ])


def _build(strategy, mode, dtype):
    with strategy.scope(), mp.scope(mode, dtype):
        model = _model()
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    return model, optimizer


def _masters(model):
    """{"index:name": first replica's master}; keys match between two builds of a model."""
    out = {}
    for i, v in enumerate(model.trainable_variables):
        master = _pairs.master_of(mp.parameter_info(v))
        out[f"{i}:{v.name}"] = np.asarray(_pairs.components(master)[0].numpy())
    return out


def _kinds(model):
    kinds = set()
    for v in model.trainable_variables:
        info = mp.parameter_info(v)
        kinds.add(type(_pairs.master_of(info)).__name__)
        kinds.add(type(_pairs.copy_of(info)).__name__)
    return sorted(kinds)


def _compare(mirrored, single):
    diffs = {k: float(np.max(np.abs(mirrored[k] - single[k]))) for k in single}
    scale = {k: float(np.max(np.abs(single[k]))) for k in single}
    moved = {k: bool(mirrored[k].tobytes() != v.tobytes()) for k, v in _INITIAL.items()
             if k in mirrored}
    return {"max_abs_diff": diffs, "max_abs": scale, "moved_from_init": moved}


def _fit(strategy, mode, dtype):
    model, optimizer = _build(strategy, mode, dtype)
    with strategy.scope():
        model.compile(optimizer, "mse")
    history = model.fit(X, Y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, optimizer, history.history["loss"]


def _step_fn(strategy, model, optimizer):
    return tfinit.distribute.train_step(
        strategy, model, optimizer, tfinit.distribute.mean_squared_error, GLOBAL_BATCH)


def _ctl(strategy, mode, dtype):
    model, optimizer = _build(strategy, mode, dtype)
    step = _step_fn(strategy, model, optimizer)
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL_BATCH, drop_remainder=True)
    losses = []
    for _ in range(EPOCHS):
        for x, y in strategy.experimental_distribute_dataset(dataset):
            losses.append(float(step(x, y)))
    return model, optimizer, losses, step


def _initial():
    with mp.scope("pseudo_fp16", "float16"):
        return _masters(_model())


_INITIAL = _initial()


def _training(train, mode, dtype):
    """Train on two replicas and on one device; report consistency and the distance."""
    result = train(MIRRORED, mode, dtype)
    model, optimizer, losses = result[:3]
    single, _, single_losses = train(ONE_DEVICE, mode, dtype)[:3]
    first = mp.parameter_info(model.trainable_variables[0])
    return {"kinds": _kinds(model), "mismatches": tfd.replica_mismatches(model),
            "slot_mismatches": tfd.replica_mismatches(optimizer.variables),
            "optimizer_kinds": sorted({type(_pairs.backend_variable(v)).__name__
                                       for v in optimizer.variables}),
            "copy_dtype": _pairs.copy_of(first).dtype.name,
            "losses": losses, "single_losses": single_losses,
            **_compare(_masters(model), _masters(single))}


def check_fit_float16():
    return _training(_fit, "pseudo_fp16", "float16")


def check_ctl_float16():
    # The optimizer is built lazily, inside strategy.run, by its first apply_gradients.
    return _training(_ctl, "pseudo_fp16", "float16")


def check_fit_bfloat16():
    return _training(_fit, "pseudo_fp16", "bfloat16")


def check_ctl_reverse_bfloat16():
    return _training(_ctl, "reverse", "bfloat16")


def check_seeded_fills():
    """Mirrored variables are initialised once: seeded fills give the one-device values."""
    def layers():
        return keras.Sequential([
            keras.Input((6,)),
            keras.layers.Dense(5, kernel_initializer=tfinit.XavierFill(seed=11),
                               bias_initializer=tfinit.UniformFill(-1.0, 1.0, seed=12)),
            keras.layers.Dense(3, kernel_initializer=tfinit.MSRAFill(seed=13),
                               bias_initializer=tfinit.GaussianFill(std=1.0)),  # unseeded
        ])

    with MIRRORED.scope(), mp.scope("pseudo_fp16", "float16"):
        mirrored = layers()
    with mp.scope("pseudo_fp16", "float16"):
        single = layers()
    expected = {  # the seeded fills evaluated directly in float32: the masters must hold them
        "0:kernel": tfinit.XavierFill(seed=11)((6, 5), "float32"),
        "1:bias": tfinit.UniformFill(-1.0, 1.0, seed=12)((5,), "float32"),
        "2:kernel": tfinit.MSRAFill(seed=13)((5, 3), "float32"),
    }
    got, one = _masters(mirrored), _masters(single)
    consistent = tfd.replica_mismatches(mirrored)
    # Negative control for replica_mismatches: nudge replica 1's master of one kernel.
    master = _pairs.master_of(mp.parameter_info(mirrored.layers[0].kernel))
    component = _pairs.components(master)[1]
    component.assign(component + 1e-3)
    return {
        "perturbed_mismatches": tfd.replica_mismatches(mirrored),
        "kinds": _kinds(mirrored),
        "mismatches": consistent,
        "seeded_equal_fill": {k: got[k].tobytes() == np.asarray(v).tobytes()
                              for k, v in expected.items()},
        "seeded_equal_one_device": {k: got[k].tobytes() == one[k].tobytes() for k in expected},
        "replica_devices": [c.device for c in _pairs.components(
            _pairs.master_of(mp.parameter_info(mirrored.layers[0].kernel)))],
    }


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type and message are what we report
        return {"type": type(e).__name__, "message": str(e)[-1500:]}
    return None


def check_bad_input():
    other = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    xs, ys = X[:GLOBAL_BATCH], Y[:GLOBAL_BATCH]

    def tfinit_scope_outside_strategy_scope():
        with mp.scope("pseudo_fp16", "float16"):
            with MIRRORED.scope():
                _model()

    def mixing_strategies():
        with MIRRORED.scope(), mp.scope("pseudo_fp16", "float16"):
            with other.scope():
                _model()

    def model_of_one_strategy_compiled_under_another():
        model, _ = _build(MIRRORED, "pseudo_fp16", "float16")
        with other.scope():
            model.compile(mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1)), "mse")
        model.fit(xs, ys, batch_size=GLOBAL_BATCH, verbose=0)

    def model_without_strategy_fit_under_strategy():
        with mp.scope("pseudo_fp16", "float16"):
            model = _model()
        with MIRRORED.scope():
            model.compile(mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1)), "mse")
        model.fit(xs, ys, batch_size=GLOBAL_BATCH, verbose=0)

    def model_without_strategy_in_strategy_run():
        with mp.scope("pseudo_fp16", "float16"):
            model = _model()
            optimizer = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.1))
        step = _step_fn(MIRRORED, model, optimizer)
        batch = next(iter(MIRRORED.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((xs, ys)).batch(GLOBAL_BATCH))))
        step(*batch)

    cases = [tfinit_scope_outside_strategy_scope, mixing_strategies,
             model_of_one_strategy_compiled_under_another,
             model_without_strategy_fit_under_strategy, model_without_strategy_in_strategy_run]
    return {case.__name__: _error(case) for case in cases}


def check_tpu_readiness():
    result = {}
    spec = (tf.TensorSpec((GLOBAL_BATCH // 2, 4), tf.float32),
            tf.TensorSpec((GLOBAL_BATCH // 2, 1), tf.float32))
    for mode, dtype in [("pseudo_fp16", "float16"), ("pseudo_fp16", "bfloat16"),
                        ("reverse", "bfloat16")]:
        model, optimizer = _build(MIRRORED, mode, dtype)
        with MIRRORED.scope():
            optimizer.build(model.trainable_variables)
        step = _step_fn(MIRRORED, model, optimizer)
        batch = next(iter(MIRRORED.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL_BATCH))))
        result[f"ctl {mode} {dtype}"] = tfd.forbidden_ops(step, *batch)

    # What fit runs per replica: Keras's train_step inside strategy.run.
    model, optimizer = _build(MIRRORED, "pseudo_fp16", "bfloat16")
    with MIRRORED.scope():
        model.compile(optimizer, "mse")
        optimizer.build(model.trainable_variables)

    @tf.function
    def fit_step(x, y):
        return MIRRORED.run(model.train_step, args=((x, y),))

    result["fit train_step pseudo_fp16 bfloat16"] = tfd.forbidden_ops(fit_step, *spec)

    # Negative control: the same step with a host callback must be flagged.
    model, optimizer = _build(MIRRORED, "pseudo_fp16", "bfloat16")
    with MIRRORED.scope():
        optimizer.build(model.trainable_variables)

    @tf.function
    def host_step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                y = tf.numpy_function(lambda a: a, [y], tf.float32, stateful=False)
                loss = tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        MIRRORED.run(replica, args=(x, y))

    result["negative control"] = tfd.forbidden_ops(host_step, *spec)

    # XLA (what TPUs compile with) must accept the whole one-device master-weight step.
    model, optimizer = _build(ONE_DEVICE, "pseudo_fp16", "bfloat16")
    optimizer.build(model.trainable_variables)
    step = _step_fn(ONE_DEVICE, model, optimizer)
    xla = tf.function(step.python_function, jit_compile=True)
    hlo = xla.experimental_get_compiler_ir(X[:GLOBAL_BATCH], Y[:GLOBAL_BATCH])(stage="hlo")
    result["xla_hlo_chars"] = len(hlo)
    result["xla_losses"] = [float(xla(X[:GLOBAL_BATCH], Y[:GLOBAL_BATCH])) for _ in range(3)]
    result["xla_mismatches"] = tfd.replica_mismatches(model)
    return result


CHECKS = [check_fit_float16, check_ctl_float16, check_fit_bfloat16, check_ctl_reverse_bfloat16,
          check_seeded_fills, check_bad_input, check_tpu_readiness]

if __name__ == "__main__":
    wanted = set(sys.argv[1:])
    report = {}
    for check in CHECKS:
        name = check.__name__[len("check_"):]
        if wanted and name not in wanted:
            continue
        try:
            report[name] = {"error": None, **check()}
        except Exception:  # noqa: BLE001 - reported to the test, which fails on it
            report[name] = {"error": traceback.format_exc()[-4000:]}
    print("REPORT " + json.dumps(report))

"""Run by test_mixed_precision_jax_sharded.py in a fresh process with four host devices
(``XLA_FLAGS`` set by the test before JAX is imported). Arguments: the parts to run.

``layouts``: under ``ModelParallel`` on a 2x2 ("batch", "model") mesh and a 1x4 one (Dense
kernels sharded over "model"), for every mode, compute dtype and master, a model built in
``mp.scope`` trains with ``fit`` (Adam) to masters bit-identical to Keras ``mixed_*`` under
the same distribution; every array tfinit adds (master, reverse copy, split remainder, split
scratch) has its variable's sharding, and the inner optimizer's state its target's.

``zero1``: ``MasterWeightOptimizer(shard_over="batch")`` under ``DataParallel`` over the four
devices and under ``ModelParallel`` 2x2, masters fp32 / split / split + bfloat16 state:
masters equal to the same run without ``shard_over`` (within 8 float32 ulps: jaxlib 0.12
rounds some element-wise updates on a shard one ulp apart; bit-identical on jaxlib 0.10); the
masters, remainders and Adam's state sharded over "batch" (a dimension the axis divides; a bias
of 3 stays whole), the copies in Keras's layout; bytes per device (``jax.live_arrays``)
exactly the sum the rule gives; ``replica_mismatches``, ``get/set_master_weights``,
``EarlyStopping`` and the stateless step; errors for an unknown axis and a reverse pair.

``files``: a ``.weights.h5`` and a ``.keras`` file written under ModelParallel, DataParallel
with ``shard_over`` and one device load exactly under each of the others.
"""

import gc
import os
import sys
import tempfile
import traceback

if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _no_tensorflow

    _no_tensorflow.install()

import jax
import keras
import numpy as np

from tfinit import _keras_internals as internals
from tfinit import mixed_precision as mp
from tfinit.mixed_precision._keras_variables import pair_records as _jax_pairs

devices = jax.devices()
assert len(devices) == 4, devices
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 8)).astype("float32")
y = rng.normal(size=(32, 3)).astype("float32")


def make():
    return keras.Sequential([keras.Input((8,)),
                             keras.layers.Dense(16, activation="tanh", name="hidden"),
                             keras.layers.Dense(3, name="head")])


keras.utils.set_random_seed(3)
START = make().get_weights()


def model_parallel(shape):
    mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*hidden/kernel"] = keras.distribution.TensorLayout([None, "model"])
    layout_map[".*head/kernel"] = keras.distribution.TensorLayout(["model", None])
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def data_parallel():
    return keras.distribution.DataParallel(devices=devices)


def fit(model, optimizer, steps=4):
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    return model


def paired(mode="pseudo_fp16", dtype="bfloat16", master="fp32"):
    with mp.scope(mode, compute_dtype=dtype, master=master):
        model = make()
    mp.set_master_weights(model, START)
    return model


def same_sharding(a, b, label):
    assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (label, a.sharding, b.sharding)


def spec(array):
    return tuple(array.sharding.spec) + (None,) * (array.ndim - len(array.sharding.spec))


def inner_state(optimizer, target):
    """The inner optimizer's variables made for ``target`` (by their names)."""
    stem = target.path.replace("/", "_") + "_"
    return [v for v in optimizer.inner_optimizer.variables if v.name.startswith(stem)]


def check_layouts():
    specs = [("pseudo_fp16", "float16", "fp32"), ("pseudo_fp16", "bfloat16", "fp32"),
             ("pseudo_fp16", "bfloat16", "split"), ("reverse", "float16", "fp32"),
             ("reverse", "bfloat16", "fp32")]
    for shape in ((2, 2), (1, 4)):
        keras.distribution.set_distribution(model_parallel(shape))
        for mode, dtype, master in specs if shape == (2, 2) else specs[1:4]:
            label = f"{shape} {mode}/{dtype}/{master}"
            keras.config.set_dtype_policy(f"mixed_{dtype}")
            try:
                oracle = make()
            finally:
                keras.config.set_dtype_policy("float32")
            oracle.set_weights(START)
            want = fit(oracle, keras.optimizers.Adam(1e-2)).get_weights()
            model = fit(paired(mode, dtype, master), keras.optimizers.Adam(1e-2))
            got = mp.get_master_weights(model)
            assert sum(not np.array_equal(a, b)
                       for a, b in zip(got, START, strict=True)) == 4, label
            assert [a.tobytes() for a in got] == [b.tobytes() for b in want], label
            for pair in _jax_pairs.pairs_of(model.weights):
                where = f"{label} {pair.param.path}"
                param = pair.param.value
                if "hidden/kernel" in pair.param.path:
                    assert spec(param) == (None, "model"), where
                same_sharding(pair.other.value, param, where)
                if master == "split":  # its scratch master: the layout the step gives it
                    layout = internals.variable_layout(pair.master)
                    assert layout.axes == internals.variable_layout(
                        pair.param).axes, where
                for state in inner_state(model.optimizer, pair.master):
                    same_sharding(state.value, param, where + " " + state.name)
            assert mp.replica_mismatches(model) == [], label
            print(label, "masters bit-identical to Keras mixed; every added array on the "
                  "variable's layout")
    keras.distribution.set_distribution(None)


def live_bytes():
    """The bytes of every live JAX array, per device id."""
    gc.collect()
    per_device = dict.fromkeys((d.id for d in devices), 0)
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            per_device[shard.device.id] += shard.data.nbytes
    return per_device


def expected_bytes(model, sizes, master, state_bytes):
    """Per device, what the rule gives: each copy in its layout (2 bytes an element), each
    master or remainder and its two Adam moments sharded over "batch" on a dimension the
    axis size divides, else whole (as its variable)."""
    total = 0
    stored = (4 if master == "fp32" else 2) + 2 * state_bytes
    for variable in model.trainable_variables:
        layout = internals.variable_layout(variable)
        split_by = [sizes[a] for a in (layout.axes if layout else ()) if a is not None]
        whole = int(np.prod(variable.shape))
        on_device = whole // int(np.prod(split_by or [1]))
        total += 2 * on_device
        dims = [dim for dim, axis in zip(variable.shape, layout.axes, strict=True) if axis is None]
        batch = sizes["batch"]
        sharded_over_batch = any(dim % batch == 0 for dim in dims) or any(
            dim % (batch * sizes.get(axis, 1)) == 0
            for dim, axis in zip(variable.shape, layout.axes, strict=True) if axis is not None)
        total += stored * (on_device // batch if sharded_over_batch else on_device)
    return total


def assert_same_training(sharded, unsharded, label):
    """The masters trained with ``shard_over`` equal the unsharded run's, up to the rounding
    of the optimizer's element-wise arithmetic: jaxlib 0.12's CPU code for Adam's moment
    updates on a device's shard (12 of 48 elements) rounds an element here and there one ulp
    apart from the code for the whole array (measured: after 2 steps of DataParallel x4, 3
    elements of each moment and 1 master element differ by 1 float32 ulp; gradients equal),
    which the next steps carry. Bit-identical on jaxlib 0.10. A dropped or doubled shard of
    a gradient or a step would be off by the learning rate's order (1e-2), far beyond 8
    float32 ulps of the array's largest value."""
    for i, (a, b) in enumerate(zip(sharded, unsharded, strict=True)):
        tol = 8 * np.finfo(np.float32).eps * float(np.max(np.abs(b)))
        err = float(np.max(np.abs(a.astype(np.float64) - b)))
        assert a.shape == b.shape and err <= tol, (label, i, err, tol)
    exact = all(a.tobytes() == b.tobytes() for a, b in zip(sharded, unsharded, strict=True))
    if tuple(int(part) for part in jax.__version__.split(".")[:2]) < (0, 12):
        assert exact, (label, "bit-identical to the unsharded run before jaxlib 0.12")
    print(label, "masters", "bit-identical to" if exact else "within 8 ulps of",
          "the unsharded run")


def check_zero1():
    for name, distribution, sizes in (
            ("DataParallel x4", data_parallel(), {"batch": 4}),
            ("ModelParallel 2x2", model_parallel((2, 2)), {"batch": 2, "model": 2})):
        keras.distribution.set_distribution(distribution)
        for master, state_dtype in (("fp32", None), ("split", None), ("split", "bfloat16")):
            label = f"{name} {master}/{state_dtype}"
            runs = {}
            for shard_over in (None, "batch"):
                before = live_bytes()
                model = paired(master=master)
                optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2),
                                                     state_dtype=state_dtype,
                                                     shard_over=shard_over)
                fit(model, optimizer)
                after = live_bytes()
                runs[shard_over] = mp.get_master_weights(model)
                assert mp.replica_mismatches(model) == [], label
                if shard_over is None:
                    del model, optimizer
                    continue
                for pair in _jax_pairs.pairs_of(model.weights):
                    where = f"{label} {pair.param.path}"
                    stored = pair.other.value
                    shape = tuple(pair.param.shape)
                    if shape == (3,):  # no dimension 2 or 4 divides: whole, as its variable
                        same_sharding(stored, pair.param.value, where)
                    else:
                        assert "batch" in str(stored.sharding.spec), (where, stored.sharding)
                        assert "batch" not in str(pair.param.value.sharding.spec), where
                    for state in inner_state(optimizer, pair.master):
                        same_sharding(state.value, stored, where + " " + state.name)
                state_bytes = 2 if state_dtype == "bfloat16" else 4
                want = expected_bytes(model, sizes, master, state_bytes)
                # and the scalars: both optimizers' iterations, learning rates, the scale and
                # its counter, the loss tracker's total and count
                scalars = {id(v): np.asarray(v.value).nbytes for v in
                           [*optimizer.variables, *optimizer.inner_optimizer.variables,
                            *model.metrics_variables] if v.shape == ()}
                scalars = sum(scalars.values())
                for device in devices:
                    grew = after[device.id] - before[device.id]
                    assert grew == want + scalars, (label, device, grew, want, scalars)
                print(f"{label}: {after[devices[0].id] - before[devices[0].id]} bytes on "
                      f"device 0 for {model.count_params()} parameters (rule: {want})")
                # set/get round trip keeps the layouts; the masters are exact
                mp.set_master_weights(model, runs["batch"])
                assert "batch" in str(_jax_pairs.pairs_of(model.weights)[0].other.value
                                      .sharding.spec), label
                assert [a.tobytes() for a in mp.get_master_weights(model)] == \
                    [a.tobytes() for a in runs["batch"]], label
                del model, optimizer
            assert_same_training(runs["batch"], runs[None], label)
    # EarlyStopping restores the best masters exactly, still sharded
    keras.distribution.set_distribution(data_parallel())
    model = paired(master="split")
    model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(0.5),
                                                     shard_over="batch"), loss="mse")
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append((logs["loss"],
                                                      mp.get_master_weights(model))))
    model.fit(x, y, batch_size=8, epochs=6, shuffle=False, verbose=0,
              callbacks=[record, mp.EarlyStopping(monitor="loss", patience=6,
                                                  restore_best_weights=True)])
    best = min(seen, key=lambda item: item[0])[1]
    assert [a.tobytes() for a in mp.get_master_weights(model)] == [a.tobytes() for a in best]
    assert "batch" in str(_jax_pairs.pairs_of(model.weights)[0].other.value.sharding.spec)
    print("EarlyStopping restores the sharded masters exactly")
    # the stateless step, jitted by hand, gives fit's masters
    results = {}
    for shard_over in (None, "batch"):
        model = paired()
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2),
                                             shard_over=shard_over)
        optimizer.build(model.trainable_variables)
        grads = [keras.ops.cast(np.full(v.shape, 0.25, "float32"), "bfloat16")
                 for v in model.trainable_variables]
        trainable, state = jax.jit(optimizer.stateless_apply)(
            [v.value for v in optimizer.variables], grads,
            [v.value for v in model.trainable_variables])
        masters = [s for v, s in zip(optimizer.variables, state, strict=True)
                   if any(v is p.other for p in _jax_pairs.pairs_of(model.weights))]
        if shard_over:
            assert all("batch" in str(m.sharding.spec) for m in masters[:3]), \
                [m.sharding for m in masters]
        results[shard_over] = [np.asarray(m).tobytes() for m in masters]
    assert results[None] == results["batch"] and len(results[None]) == 4
    print("the stateless step: sharded masters equal the unsharded ones")
    # refusals
    try:
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), shard_over="data")
    except ValueError as error:
        assert "['batch']" in str(error) and "shard_over='data'" in str(error), error
    else:
        raise AssertionError("an axis the mesh lacks was accepted")
    with mp.scope("reverse", compute_dtype="bfloat16"):
        model = make()
    optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(), shard_over="batch")
    try:
        optimizer.build(model.trainable_variables)
    except ValueError as error:
        assert "reverse pair" in str(error), error
    else:
        raise AssertionError("a reverse pair was sharded")
    keras.distribution.set_distribution(None)
    try:
        mp.MasterWeightOptimizer(keras.optimizers.Adam(), shard_over="batch").build(
            paired().trainable_variables)
    except ValueError as error:
        assert "no keras.distribution is active" in str(error), error
    else:
        raise AssertionError("shard_over without a distribution was accepted")
    print("refusals: an unknown axis, a reverse pair, no distribution")


def check_files():
    folder = tempfile.mkdtemp()
    layouts = {"model_parallel": lambda: model_parallel((2, 2)),
               "zero1": data_parallel, "one_device": lambda: None}
    trained = {}
    for name, distribution in layouts.items():
        keras.distribution.set_distribution(distribution())
        model = paired(master="split")
        shard_over = "batch" if name == "zero1" else None
        fit(model, mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2), shard_over=shard_over),
            steps=2 + len(trained))  # a different training on each layout
        trained[name] = [a.tobytes() for a in mp.get_master_weights(model)]
        model.save_weights(os.path.join(folder, name + ".weights.h5"))
        model.save(os.path.join(folder, name + ".keras"))
    assert len(set(map(tuple, trained.values()))) == 3
    for name, distribution in layouts.items():
        keras.distribution.set_distribution(distribution())
        for written in layouts:
            label = f"written under {written}, loaded under {name}"
            model = paired(master="split")
            model.load_weights(os.path.join(folder, written + ".weights.h5"))
            assert [a.tobytes() for a in mp.get_master_weights(model)] == trained[written], \
                label
            with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
                loaded = keras.saving.load_model(os.path.join(folder, written + ".keras"))
            assert [a.tobytes() for a in mp.get_master_weights(loaded)] == trained[written], \
                label
            if name == "model_parallel":
                assert spec(loaded.layers[0].kernel.value) == (None, "model"), label
        print(f"files written under every layout load exactly under {name}")
    keras.distribution.set_distribution(None)


# One process runs the parts named (its JAX start shared); each ends with "<part> OK", or
# with its traceback and "<part> FAILED" and the next part runs.
for part in sys.argv[1:]:
    try:
        {"layouts": check_layouts, "zero1": check_zero1, "files": check_files}[part]()
    except Exception:
        traceback.print_exc(file=sys.stdout)
        print(part, "FAILED", flush=True)
    else:
        print(part, "OK", flush=True)
    keras.distribution.set_distribution(None)
    keras.backend.clear_session()

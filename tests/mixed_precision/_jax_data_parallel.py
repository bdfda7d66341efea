"""Run by test_mixed_precision_workflows.py in a fresh process: two host devices must be
configured (``XLA_FLAGS``, set by the test) before JAX is imported.

For each mode and compute dtype: a model constructed in ``mp.scope`` under
``keras.distribution.DataParallel`` over both devices trains with ``fit`` (Adam; dynamic loss
scaling for float16) from the same fp32 weights, on the same data, for the same steps as the
oracle, the same model under Keras ``mixed_<dtype>`` with the same distribution. The masters
must be bit-identical to the oracle's weights, the copies ``cast(master)``, and every master
and copy replicated over both devices with the two replicas equal; ``save_weights`` writes
the masters, which a plain fp32 model under the same distribution loads exactly;
``replica_mismatches`` is ``[]``. Then ``master="split"`` (bfloat16) must give the fp32-master
run's masters bit for bit, and a master changed on one device only must be reported.
"""

import os
import sys
import tempfile

if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _no_tensorflow

    _no_tensorflow.install()

import jax
import keras
import numpy as np

from tfinit import mixed_precision as mp
from tfinit.mixed_precision._keras_variables import pair_records as _jax_pairs

SPECS = [("pseudo_fp16", "float16"), ("pseudo_fp16", "bfloat16"),
         ("reverse", "float16"), ("reverse", "bfloat16")]

devices = jax.devices()
assert len(devices) == 2, devices
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 6)).astype("float32")
y = rng.normal(size=(32, 2)).astype("float32")


def make():
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(2)])


def train(model, set_weights):
    set_weights(model, start)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)  # 8 steps, 4 rows/device
    return model


def replicas(value):
    assert value.sharding.is_fully_replicated and len(value.sharding.device_set) == 2, \
        value.sharding
    return [np.asarray(shard.data) for shard in value.addressable_shards]


keras.utils.set_random_seed(3)
start = make().get_weights()
for mode, dtype in SPECS:
    keras.config.set_dtype_policy(f"mixed_{dtype}")
    try:
        oracle = train(make(), keras.Model.set_weights).get_weights()
    finally:
        keras.config.set_dtype_policy("float32")
    with mp.scope(mode, compute_dtype=dtype):
        model = make()
    masters = mp.get_master_weights(train(model, mp.set_master_weights))
    label = f"{mode}/{dtype}"
    moved = [not np.array_equal(a, b) for a, b in zip(masters, start, strict=True)]
    assert sum(moved) >= 6, (label, moved)  # the training changed the weights
    for got, want in zip(masters, oracle, strict=True):
        assert got.dtype == want.dtype == np.float32, label
        assert got.tobytes() == want.tobytes(), (label, float(np.max(np.abs(got - want))))
    pairs = _jax_pairs.pairs_of(model.weights)
    assert len(pairs) == 4, label
    for pair in pairs:
        master, copy = replicas(pair.master.value), replicas(pair.copy.value)
        assert master[0].tobytes() == master[1].tobytes(), (label, pair.param.path)
        assert copy[0].tobytes() == copy[1].tobytes(), (label, pair.param.path)
        assert copy[0].dtype == dtype and master[0].dtype == np.float32, label
        assert master[0].astype(copy[0].dtype).tobytes() == copy[0].tobytes(), \
            (label, pair.param.path)
    assert mp.replica_mismatches(model) == [], label
    path = os.path.join(tempfile.mkdtemp(), "m.weights.h5")
    mp.save_weights(model, path)
    plain = make()
    plain.load_weights(path)
    assert [w.tobytes() for w in plain.get_weights()] == [m.tobytes() for m in masters], label
    print(label, "masters bit-identical to Keras mixed under DataParallel")
# master="split" (bfloat16 copy + int16 remainder, the fp32 master only inside the step) under
# the same distribution: its masters are the fp32-master run's, bit for bit
runs = {}
for master in ("fp32", "split"):
    with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master=master):
        model = make()
    runs[master] = mp.get_master_weights(train(model, mp.set_master_weights))
    assert mp.replica_mismatches(model) == [], master
assert [m.tobytes() for m in runs["split"]] == [m.tobytes() for m in runs["fp32"]]
print("split masters bit-identical to fp32 masters under DataParallel")

# replica_mismatches finds a replica that differs on one device, and a copy not cast(master)
with mp.scope("pseudo_fp16", compute_dtype="float16"):
    model = make()
kernel = _jax_pairs.pair_of(model.layers[0].kernel)
good = kernel.master.value
bad = np.asarray(good).copy()
bad[0, 0] += 0.5
sharding = good.sharding
split = jax.make_array_from_single_device_arrays(
    good.shape, sharding, [jax.device_put(good_or_bad, device) for good_or_bad, device in
                           zip([np.asarray(good), bad], sorted(devices, key=lambda d: d.id),
                               strict=True)])
keras.Variable.assign(kernel.master, split)
path = kernel.param.path
assert mp.replica_mismatches(model) == [f"{path}: master differs between replicas",
                                        f"{path}: copy != cast(master) on replica 1"], \
    mp.replica_mismatches(model)
print("replica_mismatches: a replica changed on one device is found")
# compile inside the scope (a string, the mission's pattern), fit after it: the optimizer
# compile chose is wrapped and the masters are Keras mixed_bfloat16's under DataParallel
keras.config.set_dtype_policy("mixed_bfloat16")
try:
    oracle = make()
    oracle.set_weights(start)
    oracle.compile(optimizer="adam", loss="mse")
finally:
    keras.config.set_dtype_policy("float32")
oracle.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
with mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    model = make()
    mp.set_master_weights(model, start)
    model.compile(optimizer="adam", loss="mse")
assert isinstance(model.optimizer, mp.MasterWeightOptimizer), model.optimizer
assert type(model.optimizer.inner_optimizer) is keras.optimizers.Adam
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
masters = mp.get_master_weights(model)
assert not np.array_equal(masters[0], start[0])
assert [m.tobytes() for m in masters] == [w.tobytes() for w in oracle.get_weights()]
print("compile inside the scope: wrapped, masters bit-identical to Keras mixed")
print("OK")

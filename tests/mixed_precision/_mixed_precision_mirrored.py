"""Run by test_mixed_precision_distribute.py in a fresh process (needs 2 logical CPUs); the
test sets the environment (``TF_CPP_MIN_LOG_LEVEL=3``)."""
import os
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from tfinit import mixed_precision as mp
from tfinit.mixed_precision._tensorflow import pair_records as _pairs

# Two logical CPUs, configured before anything runs on the TensorFlow runtime (importing
# Keras and tfinit does not start it).
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
# 1. outside strategy scope -> clear error
try:
    with mp.scope():
        with strategy.scope():
            tf.Variable(1.0)
    print("NO ERROR")
    sys.exit(1)
except ValueError as e:
    assert "inside the strategy's scope" in str(e), e
keras.utils.set_random_seed(0)
with strategy.scope(), mp.scope("pseudo_fp16", "float16"):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    opt = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    opt.build(model.trainable_variables)
info = mp.parameter_info(model.layers[0].kernel)
kinds = type(_pairs.master_of(info)).__name__, type(_pairs.copy_of(info)).__name__
assert all("Mirrored" in k for k in kinds), kinds
x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
ds = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat())
it = iter(ds)
@tf.function
def step(batch, poison):
    def fn(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.cast(model(xb), tf.float32) - yb) ** 2) / 8.0
            scaled = opt.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        bad = tf.logical_and(poison, tf.equal(rid, 1))   # overflow on replica 1 only
        grads = [tf.where(bad, tf.constant(np.inf, g.dtype), g) for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss
    return strategy.reduce("SUM", strategy.run(fn, args=batch), axis=None)
def full_data_loss():
    return float(np.mean((model(x).numpy().astype(np.float32) - y) ** 2))
# Judged on all 32 samples, not one batch: a single batch's loss under momentum swings too
# much to compare the first step with the last.
start = full_data_loss()
for _ in range(20):
    step(next(it), tf.constant(False))
end = full_data_loss()
assert end < 0.1 * start, (start, end)
def state():
    out = []
    for v in model.trainable_variables:
        i = mp.parameter_info(v)
        for var in (_pairs.master_of(i), _pairs.copy_of(i)):
            out += [c.numpy().tobytes() for c in var.values]
    return out + [s.numpy().tobytes() for s in opt.inner_optimizer.variables]
before, scale = state(), float(opt.dynamic_scale.numpy())
step(next(it), tf.constant(True))
assert state() == before, "non-finite step on one replica changed state"
assert float(opt.dynamic_scale.numpy()) == scale / 2
for v in model.trainable_variables:
    i = mp.parameter_info(v)
    for m, c in zip(_pairs.master_of(i).values, _pairs.copy_of(i).values, strict=True):
        np.testing.assert_array_equal(c.numpy(), tf.cast(m, c.dtype).numpy())
# model.fit under the strategy, reverse mode, bfloat16.
keras.utils.set_random_seed(0)
with strategy.scope(), mp.scope("reverse", "bfloat16"):
    fmodel = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
                               keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    fmodel.compile(mp.MasterWeightOptimizer(keras.optimizers.Adam(3e-2)), "mse")
first = fmodel.evaluate(x, y, verbose=0)
fmodel.fit(x, y, epochs=14, batch_size=8, verbose=0)
last = fmodel.evaluate(x, y, verbose=0)
print("fit", first, last)
assert last < 0.5 * first
path = tf.train.Checkpoint(model=fmodel).write(os.path.join(tempfile.mkdtemp(), "ck"))
# BatchNormalization keeps Keras's own uncast float32 weights (autocast=False): no pair.
paired = [v for v in fmodel.trainable_variables if _pairs.pair_of(v) is not None]
assert len(paired) == 4 and len(fmodel.trainable_variables) == 6
saved = [_pairs.master_of(_pairs.pair_of(v)).numpy().tobytes() for v in paired]
for v in paired:  # clobber masters, then restore them
    with strategy.scope():
        _pairs.master_of(_pairs.pair_of(v)).assign(tf.zeros(v.shape))
mp.sync_copies(fmodel)  # outside the strategy scope
assert _pairs.copy_of(_pairs.pair_of(fmodel.trainable_variables[0])).numpy().max() == 0
tf.train.Checkpoint(model=fmodel).read(path).assert_consumed()
assert saved == [_pairs.master_of(_pairs.pair_of(v)).numpy().tobytes() for v in paired]
for v in paired:
    i = _pairs.pair_of(v)
    for m, c in zip(_pairs.master_of(i).values, _pairs.copy_of(i).values, strict=True):
        np.testing.assert_array_equal(c.numpy(), tf.cast(m, c.dtype).numpy())
# The mission's pattern: compile inside both scopes with a string; fit after them. The
# optimizer compile chose is wrapped (when the block exits) and the masters train as Keras
# mixed_bfloat16's weights do under the same strategy.
def build():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


keras.utils.set_random_seed(5)
start = build().get_weights()
xs, ys = np.random.default_rng(5).normal(size=(2, 16, 3)).astype("float32")
ys = ys[:, :1]
keras.config.set_dtype_policy("mixed_bfloat16")
try:
    with strategy.scope():
        oracle = build()
        oracle.set_weights(start)
        oracle.compile(optimizer="adam", loss="mse")
finally:
    keras.config.set_dtype_policy("float32")
oracle.fit(xs, ys, batch_size=8, epochs=2, shuffle=False, verbose=0)
with strategy.scope(), mp.scope("pseudo_fp16", compute_dtype="bfloat16"):
    model = build()
    mp.set_master_weights(model, start)
    model.compile(optimizer="adam", loss="mse")
assert isinstance(model.optimizer, mp.MasterWeightOptimizer), model.optimizer
assert type(model.optimizer.inner_optimizer) is keras.optimizers.Adam
model.fit(xs, ys, batch_size=8, epochs=2, shuffle=False, verbose=0)
masters = mp.get_master_weights(model)
assert not np.array_equal(masters[0], start[0])
assert [m.tobytes() for m in masters] == [w.tobytes() for w in oracle.get_weights()], \
    [float(np.max(np.abs(m - w))) for m, w in zip(masters, oracle.get_weights(), strict=True)]
print("OK")

"""Run by test_split_master.py in a fresh process (needs 2 logical CPUs): under
MirroredStrategy, master="split" trains to the fp32-master scope's masters bit for bit
(custom loop and fit), every replica holds the same copy and remainder, and the scratch
variables are empty between steps. Prints one JSON line. The test sets the environment
(``TF_CPP_MIN_LOG_LEVEL=3``)."""
import json
import sys

import keras
import numpy as np
import tensorflow as tf

from tfinit import distribute
from tfinit._split_master import tensorflow as _split_master
from tfinit import mixed_precision as mp
from tfinit.mixed_precision._tensorflow import pair_records as _pairs

# Two logical CPUs, configured before anything runs on the TensorFlow runtime (importing
# Keras and tfinit does not start it).
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 12)).astype(np.float32)
y = rng.normal(size=(64, 3)).astype(np.float32)


def build(master):
    keras.utils.set_random_seed(3)
    with strategy.scope(), mp.scope("pseudo_fp16", "bfloat16", master=master):
        model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dense(3)])
        opt = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3))
        opt.build(model.trainable_variables)
    return model, opt


def custom_loop(master):
    model, opt = build(master)
    step = distribute.train_step(strategy, model, opt, distribute.mean_squared_error, 32)
    ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat())
    it = iter(ds)
    ties = 0
    for _ in range(STEPS):
        step(*next(it))
        ties += sum(int(_split_master.ties(w)) for w in mp.get_master_weights(model))
    return model, ties


def fit(master):
    model, _ = build(master)
    with strategy.scope():
        model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-3)),
                      loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=32, epochs=STEPS // 2, verbose=0, shuffle=False)
    return model


def same(a, b):
    return all(p.tobytes() == q.tobytes() for p, q in zip(mp.get_master_weights(a),
                                                          mp.get_master_weights(b), strict=True))


fp32_loop, ties = custom_loop("fp32")
split_loop, _ = custom_loop("split")
pairs = _pairs.pairs_of(split_loop.trainable_variables)
scratch_sizes = [int(tf.size(c)) for p in pairs
                 for c in _pairs.components(p.master_variable)]
result = {
    "loop_identical": same(fp32_loop, split_loop),
    "loop_ties": ties,
    "fit_identical": same(fit("fp32"), fit("split")),
    "mismatches": distribute.replica_mismatches(split_loop),
    "kinds": sorted({type(v).__name__ for p in pairs for _, v in p.stored()}),
    "scratch_elements": scratch_sizes,
}
print(json.dumps(result))

"""Run by test_mixed_precision_jax_two_hosts.py: two processes with two host devices each,
joined by ``jax.distributed`` on 127.0.0.1 (gloo CPU collectives), against one process
with four host devices.

``worker PROCESS_ID PORT FOLDER``: one of the two processes. ``DataParallel`` over the four
devices (``auto_shard_dataset=False``: each process feeds its half of every global batch),
a split-master model trained with ``MasterWeightOptimizer(shard_over="batch")``; it writes
its masters to ``FOLDER/masters_<id>.npz`` and, process 0 only, ``mp.save_weights`` to
``FOLDER/two_hosts.weights.h5`` (every process takes part in gathering the masters).

``reference FOLDER``: the same training in one process with four devices, whose masters must
equal both processes' bit for bit; then the weights file loads exactly into a model on one
device (no distribution).
"""

import os
import sys

if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _no_tensorflow

    _no_tensorflow.install()

import jax

role = sys.argv[1]
if role == "worker":
    process_id, port, folder = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=60)
    assert jax.process_count() == 2 and jax.local_device_count() == 2, jax.devices()
else:
    folder = sys.argv[2]

import keras  # noqa: E402  (after jax.distributed.initialize)
import numpy as np  # noqa: E402

from tfinit import mixed_precision as mp  # noqa: E402

assert len(jax.devices()) == 4, jax.devices()
GLOBAL_BATCH, STEPS = 8, 6
rng = np.random.default_rng(0)
x = rng.normal(size=(GLOBAL_BATCH * STEPS, 8)).astype("float32")
y = rng.normal(size=(GLOBAL_BATCH * STEPS, 4)).astype("float32")


def make():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(4)])


keras.distribution.set_distribution(
    keras.distribution.DataParallel(devices=jax.devices(), auto_shard_dataset=False))
keras.utils.set_random_seed(5)  # the same start in every process
with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    model = make()
model.compile(optimizer=mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-2),
                                                 shard_over="batch"), loss="mse")
if role == "worker":
    # this process's half of each global batch (its devices' rows of it)
    half = GLOBAL_BATCH // 2
    rows = np.concatenate([np.arange(step * GLOBAL_BATCH + process_id * half,
                                     step * GLOBAL_BATCH + (process_id + 1) * half)
                           for step in range(STEPS)])
    model.fit(x[rows], y[rows], batch_size=half, shuffle=False, verbose=0)
else:
    model.fit(x, y, batch_size=GLOBAL_BATCH, shuffle=False, verbose=0)
remainder = mp.parameter_info(model.layers[0].kernel).blob_copy["int16"]
assert "batch" in str(remainder.value.sharding.spec), remainder.value.sharding
masters = mp.get_master_weights(model)
assert mp.replica_mismatches(model) == []

if role == "worker":
    np.savez(os.path.join(folder, f"masters_{process_id}.npz"), *masters)
    path = os.path.join(folder, "two_hosts.weights.h5" if process_id == 0 else "other.weights.h5")
    mp.save_weights(model, path)
    jax.distributed.shutdown()
    print("OK")
    sys.exit(0)

for process_id in (0, 1):
    with np.load(os.path.join(folder, f"masters_{process_id}.npz")) as saved:
        got = [saved[f"arr_{i}"] for i in range(len(masters))]
    assert [a.tobytes() for a in got] == [m.tobytes() for m in masters], process_id
print("both processes hold the masters of one process with four devices, bit for bit")
keras.distribution.set_distribution(None)
with mp.scope("pseudo_fp16", compute_dtype="bfloat16", master="split"):
    one_host = make()
one_host.load_weights(os.path.join(folder, "two_hosts.weights.h5"))
assert [a.tobytes() for a in mp.get_master_weights(one_host)] == [m.tobytes() for m in masters]
print("process 0's weights file loads exactly on one device")
print("OK")

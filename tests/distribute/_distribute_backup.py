"""Run by tests/distribute/test_distribute.py: Keras fit under MirroredStrategy (two logical
CPUs) with ``keras.callbacks.BackupAndRestore``; optionally SIGKILLs itself mid-epoch.

Usage: _distribute_backup.py BACKUP_DIR OUT.npz [KILL_EPOCH KILL_BATCH]
Writes the first replica's masters, the optimizer's variables and the epochs this process
ran to OUT.npz. The launching test sets the environment (``TF_CPP_MIN_LOG_LEVEL=3``).
"""

import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

import tfinit
from tfinit import distribute as tfd
from tfinit import mixed_precision as mp

# Two logical CPUs, configured before anything runs on the TensorFlow runtime (importing
# Keras and tfinit does not start it).
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

EPOCHS = 4


class KillAt(keras.callbacks.Callback):
    """SIGKILL this process after the given batch of the given epoch (no cleanup runs)."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.kill_epoch, self.kill_batch, self.epoch = epoch, batch, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == (self.kill_epoch, self.kill_batch):
            os.kill(os.getpid(), signal.SIGKILL)


def main(backup_dir, out, kill=None):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope(), mp.scope("pseudo_fp16", "float16"):
        model = keras.Sequential([
            keras.Input((4,)),
            keras.layers.Dense(16, activation="relu", kernel_initializer=tfinit.XavierFill(seed=1)),
            keras.layers.Dense(1, kernel_initializer=tfinit.GaussianFill(std=0.1, seed=2)),
        ])
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.Adam(0.01))
        model.compile(optimizer, "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(4, 1)).astype(np.float32))
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir)]
    if kill is not None:
        callbacks.append(KillAt(*kill))
    history = model.fit(x, y, batch_size=16, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=callbacks)
    problems = tfd.replica_mismatches(model) + tfd.replica_mismatches(optimizer.variables)
    if problems:
        raise SystemExit(f"replicas disagree: {problems}")
    arrays = {"epochs_run": np.asarray(history.epoch, np.int64)}
    for i, v in enumerate(model.trainable_variables):
        master = mp.parameter_info(v).blob_copy[tf.float32]
        arrays[f"master{i}"] = master.values[0].numpy()
    for i, v in enumerate(optimizer.variables):
        arrays[f"optimizer{i}"] = np.asarray(v.value.values[0].numpy())
    np.savez(out, **arrays)


if __name__ == "__main__":
    argv = sys.argv[1:]
    main(argv[0], argv[1], tuple(int(a) for a in argv[2:4]) if len(argv) > 2 else None)

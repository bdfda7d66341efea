"""MirroredStrategy on two logical CPUs: tfinit (fp32 masters + MasterWeightOptimizer) against
Keras ``mixed_float16`` (+ LossScaleOptimizer), same strategy, model, data and inner optimizer.

Logical devices must be set before TensorFlow initialises, so ``run`` measures in a fresh
interpreter (``python -m benchmarks.distribute [--quick]`` prints the rows as JSON).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


ROWS = ("loop_pseudo", "loop_reverse", "fit_pseudo")


_MEASURED = {}  # (mode, row key) -> row: a row is measured once per run of the suite


def run(mode, rows=ROWS):
    """The ``rows`` (keys of ROWS) measured in a fresh interpreter with 2 logical CPUs.

    Rows already measured in this process (the comparisons table measures two of them) are
    reused, not measured again.
    """
    missing = [key for key in rows if (mode, key) not in _MEASURED]
    if missing:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        argv = [sys.executable, "-m", "benchmarks.distribute", f"--{mode}", *missing]
        result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO,
                                timeout=1800)
        if result.returncode != 0:
            raise RuntimeError(f"benchmarks.distribute failed:\n{result.stderr[-3000:]}")
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        _MEASURED.update({(mode, key): row for key, row in zip(missing, measured, strict=True)})
    return [dict(_MEASURED[(mode, key)]) for key in rows]


SIZES = {  # width, global batch, steps per call of the custom loop and of fit, repeats of each
    # fit's row counts the steps of an epoch after its first (timed by a callback), so the
    # epoch's setup does not swamp them (FINDINGS.md).
    "smoke": (32, 16, 2, 2, 2, 2),
    "quick": (256, 64, 5, 40, 31, 15),
    "full": (1024, 256, 10, 80, 31, 15),
}


def _measure(mode, keys=ROWS):
    import numpy as np
    import tensorflow as tf

    from benchmarks._timing import disable_cpu_remapping

    disable_cpu_remapping()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from benchmarks._timing import compare
    import tfinit
    from tfinit import mixed_precision as mp

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    width, batch, steps, fit_steps, loop_repeats, fit_repeats = SIZES[mode]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * max(steps, fit_steps), width)).astype(np.float32)
    y = rng.normal(size=(batch * max(steps, fit_steps), 1)).astype(np.float32)

    def model():
        return keras.Sequential([keras.Input((width,))] + [
            keras.layers.Dense(width, activation="relu") for _ in range(3)
        ] + [keras.layers.Dense(1)])

    def tfinit_setup(mode):
        with strategy.scope(), mp.scope(mode, "float16"):
            m = model()
            opt = mp.MasterWeightOptimizer(keras.optimizers.Adam(1e-4))
            opt.build(m.trainable_variables)
        return m, opt

    def keras_setup():
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy("mixed_float16")
        try:
            with strategy.scope():
                m = model()
                opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-4))
                opt.build(m.trainable_variables)  # must precede the tf.function (DESIGN)
        finally:
            keras.config.set_dtype_policy(previous)
        return m, opt

    dataset = tf.data.Dataset.from_tensor_slices(
        (x[:batch * steps], y[:batch * steps])).batch(batch, drop_remainder=True)
    batches = list(strategy.experimental_distribute_dataset(dataset))

    def loop(m, opt):
        step = tfinit.distribute.train_step(
            strategy, m, opt, tfinit.distribute.mean_squared_error, batch)

        def call():
            for xb, yb in batches:
                loss = step(xb, yb)
            return float(loss)

        return call

    class StepClock(keras.callbacks.Callback):
        """The seconds from the end of the epoch's first step to the end of its last."""

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            if batch == 0:
                self.start = now
            self.end = now

        def seconds(self):
            return self.end - self.start

    def fit(m, opt):
        with strategy.scope():
            m.compile(opt, "mse")
        xf, yf = x[:batch * fit_steps], y[:batch * fit_steps]
        clock = StepClock()

        def call():
            m.fit(xf, yf, batch_size=batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=[clock])
            return clock.seconds()

        return call

    extra = {"shape": f"4 Dense, width {width}, global batch {batch}",
             "replicas": strategy.num_replicas_in_sync}
    contenders = {
        "loop_pseudo": ("custom loop, pseudo_fp16", lambda: tfinit_setup("pseudo_fp16"), loop),
        "loop_reverse": ("custom loop, reverse", lambda: tfinit_setup("reverse"), loop),
        "fit_pseudo": ("fit, pseudo_fp16", lambda: tfinit_setup("pseudo_fp16"), fit),
    }
    rows = []
    for key in keys:  # in the order asked for
        label, ours_setup, make = contenders[key]
        ours, baseline = make(*ours_setup()), make(*keras_setup())
        repeats = fit_repeats if make is fit else loop_repeats
        # fit: the steps after the first, timed inside the epoch by a callback; the epoch's
        # setup (data adapter, distributed iterator: about 0.9 s here) is the same code on
        # both sides and its noise swamped the steps (FINDINGS.md).
        rows.append(compare(f"MirroredStrategy x2 {label} + MasterWeightOptimizer(Adam) vs "
                            "mixed_float16 + LossScaleOptimizer(Adam)",
                            ours, baseline, repeats, self_timed=make is fit,
                            steps_per_call=fit_steps - 1 if make is fit else steps, **extra))
    return rows


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    modes = [m for m in SIZES if f"--{m}" in sys.argv[1:]]
    keys = [a for a in sys.argv[1:] if a in ROWS] or ROWS
    print(json.dumps(_measure(modes[0] if modes else "full", keys)))

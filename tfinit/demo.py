"""``tfinit demo``: why fp32 master weights matter, on a small fine-tuning task.

A "pretrained" Keras MLP (tfinit's XavierFill/ConstantFill weights) is fine-tuned at a small
learning rate towards a teacher whose weights differ from it by a few percent, with plain SGD
and the same batches, five ways (three in float16):

- ``fp32``: float32 weights, the reference;
- ``<dtype>``: 16-bit weights updated in place by a Keras optimizer;
- ``pseudo_fp16``: tfinit's 16-bit copies with fp32 masters
  (``tfinit.mixed_precision.scope`` + ``MasterWeightOptimizer``, arXiv 1710.03740);
- ``split`` (bfloat16 only): the same with ``master="split"``: the bfloat16 copy plus an int16
  remainder hold the exact master, 4 bytes per parameter instead of 6;
- ``stochastic`` (bfloat16 only): ``master="stochastic"``: no master, the bfloat16 weight
  updated with stochastic rounding of the fp32 update, 2 bytes per parameter.

Fine-tuning is where 16-bit weights fall behind: its updates are small against the weights,
so most of them round away. For each run the demo reports the final loss, the weight updates
lost (an element with a non-zero gradient whose stored value - the master, where there is
one - did not move), persistent bytes per parameter and the median step time, and it plots
the loss curves. It needs the TensorFlow backend and matplotlib (``pip install "tfinit[demo]"``).
"""

import os
import sys
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfinit import _backend

FEATURES, HIDDEN, BATCH = 32, 64, 64


@dataclass
class RunResult:
    name: str
    losses: list = field(default_factory=list)
    lost_updates: int = 0
    attempted_updates: int = 0
    lost_percent_per_epoch: list = field(default_factory=list)
    bytes_per_param: float = 0.0
    step_ms: float = 0.0


def make_task(samples=4096, seed=0, shift=0.05):
    """Inputs, a teacher's targets and the "pretrained" start weights.

    The start weights are ``build_model()``'s (seeded XavierFill); the teacher is the same
    network with every weight moved by ``shift`` times its layer's spread (biases by
    ``shift * 0.1``): fine-tuning has to learn that small difference.
    """
    import keras

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES)).astype(np.float32)
    keras.utils.set_random_seed(seed)
    teacher = build_model()
    start = teacher.get_weights()
    moved = [w + (shift * np.std(w) if w.ndim > 1 else shift * 0.1)
             * rng.standard_normal(w.shape).astype(np.float32) for w in start]
    teacher.set_weights(moved)
    y = np.asarray(teacher(x), np.float32)
    return x, y, start


def build_model(dtype=None):
    import keras

    import tfinit

    def dense(units, seed, activation=None):
        return keras.layers.Dense(
            units,
            activation=activation,
            kernel_initializer=tfinit.XavierFill(seed=seed),
            bias_initializer="ConstantFill",
            dtype=dtype,
        )

    layers = [dense(HIDDEN, 1, "relu"), dense(HIDDEN, 2, "relu"), dense(1, 3)]
    model = keras.Sequential([keras.Input((FEATURES,))] + layers)
    return model


def _setups(compute_dtype, learning_rate, start):
    import keras

    from tfinit import mixed_precision
    from tfinit._split_master import tensorflow as tf_split

    def value_of(variable):
        return lambda: keras.ops.convert_to_tensor(variable)

    def fp32():
        model = build_model()
        model.set_weights(start)
        variables = list(model.trainable_variables)
        return model, keras.optimizers.SGD(learning_rate), [value_of(v) for v in variables], []

    def plain16():
        model = build_model(dtype=compute_dtype)
        model.set_weights(start)
        variables = list(model.trainable_variables)
        return model, keras.optimizers.SGD(learning_rate), [value_of(v) for v in variables], []

    def paired(master):
        def setup():
            with mixed_precision.scope("pseudo_fp16", compute_dtype=compute_dtype,
                                       master=master):
                model = build_model()
            mixed_precision.set_master_weights(model, start)
            optimizer = mixed_precision.MasterWeightOptimizer(
                keras.optimizers.SGD(learning_rate))
            infos = [mixed_precision.parameter_info(v) for v in model.trainable_variables]
            others = [next(iter(info.blob_copy.values())) for info in infos]
            if master == "fp32":
                return model, optimizer, [value_of(m) for m in others], others
            if master == "stochastic":  # no master: the stored value is the bfloat16 weight
                return model, optimizer, [value_of(info.param) for info in infos], others
            masters = [lambda c=info.param, r=rem: tf_split.join(c, r)
                       for info, rem in zip(infos, others, strict=True)]
            return model, optimizer, masters, others
        return setup

    setups = [("fp32", fp32), (compute_dtype, plain16), ("pseudo_fp16", paired("fp32"))]
    if compute_dtype == "bfloat16":
        setups.append(("split", paired("split")))
        setups.append(("stochastic", paired("stochastic")))
    return setups


def _persistent_bytes(model, optimizer, stored):
    """Bytes of every variable that lives across steps, per trainable parameter."""
    import tensorflow as tf

    seen, total = set(), 0
    for v in list(model.weights) + list(stored) + list(optimizer.variables):
        key = (getattr(v, "path", None) or v.name, tuple(v.shape), str(v.dtype))
        if key in seen:
            continue
        seen.add(key)
        total += int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return total / params


def train(name, setup, data, epochs, progbar):
    import tensorflow as tf

    x, y = data
    model, optimizer, truth, stored = setup()
    variables = list(model.trainable_variables)
    optimizer.build(variables)

    @tf.function
    def step(xb, yb):
        before = [tf.identity(t()) for t in truth]
        with tf.GradientTape() as tape:
            pred = tf.cast(model(xb, training=True), tf.float32)
            loss = tf.reduce_mean(tf.square(pred - yb))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        finite = tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(tf.cast(g, tf.float32))) for g in grads]
        )
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        lost, attempted = tf.constant(0, tf.int64), tf.constant(0, tf.int64)
        for g, t, b in zip(grads, truth, before, strict=True):
            nonzero = tf.not_equal(tf.cast(g, tf.float32), 0.0)
            unchanged = tf.equal(t(), b)
            lost += tf.math.count_nonzero(nonzero & unchanged)
            attempted += tf.math.count_nonzero(nonzero)
        zero = tf.constant(0, tf.int64)
        return loss, tf.where(finite, lost, zero), tf.where(finite, attempted, zero)

    result = RunResult(name)
    steps_per_epoch = len(x) // BATCH
    times = []
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(len(x))
        epoch_losses, epoch_lost, epoch_attempted = [], 0, 0
        for i in range(steps_per_epoch):
            idx = order[i * BATCH : (i + 1) * BATCH]
            start = time.perf_counter()
            loss, lost, attempted = step(x[idx], y[idx])
            loss = float(loss)
            times.append(time.perf_counter() - start)
            epoch_losses.append(loss)
            epoch_lost += int(lost)
            epoch_attempted += int(attempted)
            progbar.add(1, values=[(f"{name} loss", loss)])
        result.losses.append(float(np.mean(epoch_losses)))
        result.lost_percent_per_epoch.append(100 * epoch_lost / max(epoch_attempted, 1))
        result.lost_updates += epoch_lost
        result.attempted_updates += epoch_attempted
    result.step_ms = statistics.median(times[1:] or times) * 1e3
    result.bytes_per_param = _persistent_bytes(model, optimizer, stored)
    return result


def _percent(result):
    return 100 * result.lost_updates / max(result.attempted_updates, 1)


def format_table(results):
    header = ("run", "final loss", "lost updates", "bytes/param", "step (ms)")
    rows = [
        (
            r.name,
            f"{r.losses[-1]:.5f}",
            f"{r.lost_updates} of {r.attempted_updates} ({_percent(r):.1f}%)",
            f"{r.bytes_per_param:.2f}",
            f"{r.step_ms:.2f}",
        )
        for r in results
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def emulation_note(compute_dtype):
    """One line saying why 16-bit steps are slow here, when no GPU is visible; else None."""
    tf = _backend.tensorflow("tfinit demo")
    if tf.config.list_physical_devices("GPU"):
        return None
    return (
        f"note: no GPU here, so the {compute_dtype} step times come from TensorFlow's CPU "
        f"kernels, which emulate 16-bit arithmetic (in float32, converting each way): they "
        f"say nothing about {compute_dtype} speed on a GPU or TPU."
    )


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, lost_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        epochs = range(1, len(r.losses) + 1)
        loss_ax.plot(epochs, r.losses, marker="o", markersize=3, label=r.name)
        lost_ax.plot(epochs, r.lost_percent_per_epoch, marker="o", markersize=3, label=r.name)
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("training loss (MSE)")
    loss_ax.set_title("Training loss")
    loss_ax.legend()
    lost_ax.set_xlabel("epoch")
    lost_ax.set_ylabel("% of non-zero updates lost")
    lost_ax.set_title("Weight updates lost to underflow")
    lost_ax.set_ylim(bottom=0)
    lost_ax.legend()
    fig.suptitle("Fine-tuning the same model on the same data: fp32 vs 16-bit weights vs "
                 "fp32 masters")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(
    epochs=20, compute_dtype="bfloat16", out_dir="tfinit-demo", learning_rate=0.01, samples=4096
):
    """Train the runs, print the table, write the plot; return the results."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _backend.tensorflow("tfinit demo")
    import keras

    out_dir = Path(out_dir)
    x, y, start = make_task(samples)
    setups = _setups(compute_dtype, learning_rate, start)
    total = epochs * (samples // BATCH) * len(setups)
    steps = samples // BATCH
    print(f"Fine-tuning the same pretrained MLP {len(setups)} ways ({epochs} epochs of {steps} "
          f"steps, SGD lr={learning_rate}):")
    # A progress bar on a terminal; redirected, one line at the end (no escape codes).
    progbar = keras.utils.Progbar(
        total, width=30, stateful_metrics=[f"{n} loss" for n, _ in setups],
        verbose=1 if sys.stdout.isatty() else 2,
    )
    results = [train(name, setup, (x, y), epochs, progbar) for name, setup in setups]
    print()
    print(format_table(results))
    note = emulation_note(compute_dtype)
    if note:
        print(note)
    if compute_dtype != "bfloat16":
        print("(master='split' needs bfloat16, the top half of a float32: run "
              "`tfinit demo --dtype bfloat16` for the split run.)")
    png = out_dir / "loss_curves.png"
    plot(results, png)
    print(
        "\nlost updates: weight elements with a non-zero gradient whose stored value (the fp32 "
        "master, where there is one) did not move."
    )
    print(f"Plot of the loss curves and lost updates per epoch: {png.resolve()}")
    return results

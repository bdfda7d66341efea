"""``tfinit demo``: why fp32 master weights matter, on a small synthetic task.

The same Keras MLP (tfinit's XavierFill/ConstantFill initial weights, the same
batches) is trained three ways with plain SGD:

- ``fp32``: float32 weights, the reference;
- ``<dtype>``: 16-bit weights updated in place by a Keras optimizer;
- ``pseudo_fp16``: tfinit's 16-bit copies with fp32 masters
  (``tfinit.mixed_precision.scope`` + ``MasterWeightOptimizer``, arXiv 1710.03740).

For each it reports the final loss, the weight updates lost to underflow (an
element with a non-zero gradient whose stored value - the master, where there is
one - did not move), persistent bytes per parameter and the median step time, and
it plots the three loss curves. It needs the TensorFlow backend and matplotlib
(``pip install "tfinit[demo]"``).
"""

import os
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


def make_task(samples=4096, seed=0):
    """A teacher network's outputs plus a little noise: learnable to a small loss."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES)).astype(np.float32)
    w1 = rng.standard_normal((FEATURES, 16)).astype(np.float32) / np.sqrt(FEATURES)
    w2 = rng.standard_normal((16, 1)).astype(np.float32)
    y = np.tanh(x @ w1) @ w2 + 0.01 * rng.standard_normal((samples, 1)).astype(np.float32)
    return x, y.astype(np.float32)


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


def _setups(compute_dtype, learning_rate):
    import keras
    import tensorflow as tf

    from tfinit import mixed_precision

    def fp32():
        model = build_model()
        return model, keras.optimizers.SGD(learning_rate), list(model.trainable_variables)

    def plain16():
        model = build_model(dtype=compute_dtype)
        return model, keras.optimizers.SGD(learning_rate), list(model.trainable_variables)

    def pseudo():
        with mixed_precision.scope("pseudo_fp16", compute_dtype=compute_dtype):
            model = build_model()
        optimizer = mixed_precision.MasterWeightOptimizer(keras.optimizers.SGD(learning_rate))
        masters = [
            mixed_precision.parameter_info(v).blob_copy[tf.float32]
            for v in model.trainable_variables
        ]
        return model, optimizer, masters

    return [("fp32", fp32), (compute_dtype, plain16), ("pseudo_fp16", pseudo)]


def _persistent_bytes(model, optimizer, truth):
    """Bytes of every variable that lives across steps, per trainable parameter."""
    import tensorflow as tf

    seen, total = set(), 0
    for v in list(model.weights) + list(truth) + list(optimizer.variables):
        key = (getattr(v, "path", None) or v.name, tuple(v.shape), str(v.dtype))
        if key in seen:
            continue
        seen.add(key)
        total += int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return total / params


def train(name, setup, data, epochs, progbar):
    import keras
    import tensorflow as tf

    x, y = data
    model, optimizer, truth = setup()
    variables = list(model.trainable_variables)
    optimizer.build(variables)

    @tf.function
    def step(xb, yb):
        before = [tf.identity(keras.ops.convert_to_tensor(t)) for t in truth]
        with tf.GradientTape() as tape:
            pred = tf.cast(model(xb, training=True), tf.float32)
            loss = tf.reduce_mean(tf.square(pred - yb))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        finite = tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(tf.cast(g, tf.float32))) for g in grads]
        )
        optimizer.apply_gradients(zip(grads, variables))
        lost, attempted = tf.constant(0, tf.int64), tf.constant(0, tf.int64)
        for g, t, b in zip(grads, truth, before):
            nonzero = tf.not_equal(tf.cast(g, tf.float32), 0.0)
            unchanged = tf.equal(keras.ops.convert_to_tensor(t), b)
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
    result.bytes_per_param = _persistent_bytes(model, optimizer, truth)
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
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
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
    fig.suptitle("Same model, same data: fp32 vs 16-bit weights vs fp32 masters")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(
    epochs=20, compute_dtype="float16", out_dir="tfinit-demo", learning_rate=0.01, samples=4096
):
    """Train the three runs, print the table, write the plot; return the results."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _backend.tensorflow("tfinit demo")
    import keras

    out_dir = Path(out_dir)
    data = make_task(samples)
    setups = _setups(compute_dtype, learning_rate)
    total = epochs * (samples // BATCH) * len(setups)
    steps = samples // BATCH
    print(f"Training the same MLP three ways ({epochs} epochs of {steps} steps, "
          f"SGD lr={learning_rate}):")
    progbar = keras.utils.Progbar(
        total, width=30, stateful_metrics=[f"{n} loss" for n, _ in setups]
    )
    results = [train(name, setup, data, epochs, progbar) for name, setup in setups]
    print()
    print(format_table(results))
    note = emulation_note(compute_dtype)
    if note:
        print(note)
    png = out_dir / "loss_curves.png"
    plot(results, png)
    print(
        "\nlost updates: weight elements with a non-zero gradient whose stored value (the fp32 "
        "master, where there is one) did not move."
    )
    print(f"Plot of the loss curves and lost updates per epoch: {png.resolve()}")
    return results

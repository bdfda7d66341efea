"""Compiled training steps: pseudo_fp16 + MasterWeightOptimizer against Keras mixed precision.

Contenders, each an Adam step in a ``tf.function`` (``jit_compile=False``), written the way
Keras's own ``fit`` writes it (``scale_loss`` inside the tape, ``apply`` after):

- ``ours``: the model built in ``tfinit.mixed_precision.scope("pseudo_fp16", dtype)``
  (16-bit variables, fp32 masters) and ``MasterWeightOptimizer(Adam)``; the same in
  ``"reverse"`` mode (fp32 variables, cached 16-bit copies) in rows of their own;
- ``baseline``: Keras's ``mixed_<dtype>`` policy (fp32 variables cast on every read) and,
  for float16, ``LossScaleOptimizer(Adam)`` as ``compile`` wraps it; bfloat16 needs no loss
  scaling in Keras, nor in ours (``MasterWeightOptimizer``'s default for bfloat16);
- ``fp32``: everything in float32, plain Adam.

Models: ``mlp`` (``depth`` Dense layers) and ``reuse`` (one Dense applied ``REUSE`` times per
step, as an unrolled RNN reads its weights): Keras casts the shared kernel on each of the
reads, a cached 16-bit copy is cast once per step, after the update.
"""

import keras
import numpy as np
import tensorflow as tf

from benchmarks._timing import compare
from tfinit import mixed_precision as mp

MODELS = ("mlp", "reuse")
KINDS = (*MODELS, "classifier")
REUSE = 16
MODES = ("fp32", "keras_mixed", "keras_16bit", "pseudo_fp16", "reverse")


def build_model(kind, width, depth=4):
    """A functional model: ``mlp`` (depth Dense layers), ``reuse`` (one Dense, REUSE times)
    or ``classifier`` (width -> 2*width -> 2*width -> 10, the issue's 256-512-512-10)."""
    inputs = keras.Input((width,))
    h = inputs
    if kind == "mlp":
        for i in range(depth):
            h = keras.layers.Dense(width, activation="relu" if i < depth - 1 else None)(h)
    elif kind == "reuse":
        shared = keras.layers.Dense(width, activation="tanh")
        for _ in range(REUSE):
            h = shared(h)
    elif kind == "classifier":
        for _ in range(2):
            h = keras.layers.Dense(2 * width, activation="relu")(h)
        h = keras.layers.Dense(10)(h)
    else:
        raise ValueError(f"model kind must be one of {KINDS}, got {kind!r}")
    return keras.Model(inputs, h)


def inner_optimizer(name):
    """The optimizer every contender wraps (or uses plainly): ``adam`` or ``sgd``."""
    if name == "adam":
        return keras.optimizers.Adam(1e-3)
    if name == "sgd":
        return keras.optimizers.SGD(1e-2)
    raise ValueError(f"optimizer must be 'adam' or 'sgd', got {name!r}")


def build_in_mode(mode, compute_dtype, builder, master="fp32"):
    """``builder()`` run under ``mode``'s precision: a tfinit scope (``master``: how it stores
    its masters) or a Keras policy (``keras_16bit``: Keras's plain 16-bit policy, no master)."""
    if mode in ("pseudo_fp16", "reverse"):
        with mp.scope(mode, compute_dtype, master=master):
            return builder()
    policy = {"fp32": "float32", "keras_16bit": compute_dtype}.get(mode, f"mixed_{compute_dtype}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        return builder()
    finally:
        keras.config.set_dtype_policy(previous)


def wrap_optimizer(mode, compute_dtype, inner, state_dtype=None):
    """What trains ``mode``: MasterWeightOptimizer for tfinit, LossScaleOptimizer for Keras's
    mixed_float16 (as ``compile`` wraps it), the plain optimizer otherwise."""
    if mode in ("pseudo_fp16", "reverse"):
        # "auto": dynamic for float16, off for bfloat16
        return mp.MasterWeightOptimizer(inner, state_dtype=state_dtype)
    if mode == "keras_mixed" and compute_dtype == "float16":
        return keras.optimizers.LossScaleOptimizer(inner)
    return inner


class Contender:
    """A model, its optimizer and a compiled train step for one precision mode."""

    def __init__(self, mode, kind, width, compute_dtype="float16", batch=64, seed=0,
                 optimizer="adam", builder=None, jit_compile=False, master="fp32",
                 state_dtype=None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        keras.utils.set_random_seed(seed)
        builder = builder or (lambda: build_model(kind, width))
        self.model = build_in_mode(mode, compute_dtype, builder, master)
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            optimizer = inner_optimizer(optimizer)
        self.optimizer = wrap_optimizer(mode, compute_dtype, optimizer, state_dtype)
        variables = self.model.trainable_variables
        self.optimizer.build(variables)
        rng = np.random.default_rng(seed)
        x_shape = (batch, *self.model.input_shape[1:])
        y_shape = (batch, *self.model.output_shape[1:])
        self.x = tf.constant(rng.standard_normal(x_shape, dtype=np.float32))
        self.y = tf.constant(0.1 * rng.standard_normal(y_shape, dtype=np.float32))
        model, optimizer = self.model, self.optimizer

        @tf.function(jit_compile=jit_compile)
        def step(x, y):
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, variables)
            optimizer.apply(grads, variables)
            return loss

        self.step = step

    def run(self, steps=1):
        """Run ``steps`` train steps; the loss of the last one (on the host)."""
        for _ in range(steps):
            loss = self.step(self.x, self.y)
        return float(loss)

    def op_count(self, op_type="Cast"):
        """Ops of ``op_type`` in the traced step, cond/while branch functions included."""
        graph_def = self.step.get_concrete_function(self.x, self.y).graph.as_graph_def()
        nodes = list(graph_def.node)
        for function in graph_def.library.function:
            nodes.extend(function.node_def)
        return sum(node.op == op_type for node in nodes)


def compare_step(kind, width, compute_dtype, repeats, steps, batch, with_fp32=True,
                 ours_mode="pseudo_fp16", optimizer="adam", name=None):
    """One row: tfinit (``ours_mode`` + MWO) vs Keras mixed (and fp32), medians per step."""
    def contender(mode):
        return Contender(mode, kind, width, compute_dtype, batch, optimizer=optimizer)

    ours, base = contender(ours_mode), contender("keras_mixed")
    others = {"fp32": contender("fp32")} if with_fp32 else {}
    contenders = {"ours": ours, "baseline": base, **others}
    for c in contenders.values():
        loss = c.run()  # traces; a non-finite loss would make the timing meaningless
        if not np.isfinite(loss):
            raise RuntimeError(f"{kind} {compute_dtype}: non-finite loss {loss}")
    casts = {f"casts_{label}": c.op_count("Cast") for label, c in contenders.items()}
    params = sum(int(np.prod(v.shape)) for v in ours.model.trainable_variables)
    row = compare(
        name or f"{kind} width {width} {compute_dtype}: {ours_mode}+MWO vs "
                f"mixed_{compute_dtype}",
        lambda: ours.run(steps),
        lambda: base.run(steps),
        repeats,
        others={label: (lambda c=c: c.run(steps)) for label, c in others.items()},
        params=params,
        steps_per_sample=steps,
        **casts,
    )
    for key in list(row):
        if key.endswith("_ms"):
            row[key] = round(row[key] / steps, 3)
    return row


def sizes(mode):
    """Widths, batch, repeats and steps per sample for ``mode`` (smoke / quick / full)."""
    return {
        "smoke": dict(mlp=16, reuse=16, batch=8, repeats=2, steps=1),
        "quick": dict(mlp=512, reuse=256, batch=64, repeats=21, steps=1),
        "full": dict(mlp=1024, reuse=512, batch=128, repeats=101, steps=1),
    }[mode]


def run(mode):
    s = sizes(mode)
    rows = []
    for ours_mode in ("pseudo_fp16", "reverse"):
        for compute_dtype in ("float16", "bfloat16"):
            for kind in MODELS:
                rows.append(compare_step(kind, s[kind], compute_dtype, s["repeats"], s["steps"],
                                         s["batch"], with_fp32=ours_mode == "pseudo_fp16",
                                         ours_mode=ours_mode))
    return rows

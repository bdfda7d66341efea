"""Persistent bytes per parameter (Adam) and Cast ops per traced train step.

Compares tfinit.mixed_precision (pseudo_fp16 / reverse, float16 / bfloat16) with Keras's
``mixed_float16`` + LossScaleOptimizer and a plain float16 Keras model (no masters).
Run: ``PYTHONPATH=. python benchmarks/mixed_precision_costs.py [--shared]``; ``--shared``
applies one Dense layer 4 times (a variable read several times per step, as in RNNs).
Cast counts are static (both branches of the skip/apply cond are in the graph); only
non-scalar casts (weights, gradients, activations) are listed.
"""

import collections
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfinit import mixed_precision as mp  # noqa: E402
from tfinit.mixed_precision import _pairs  # noqa: E402


def make(shared):
    inp = keras.Input((32,))
    if shared:
        dense, h = keras.layers.Dense(32, activation="tanh"), inp
        for _ in range(4):
            h = dense(h)
    else:
        h = keras.layers.Dense(64, activation="relu")(inp)
        h = keras.layers.Dense(64, activation="relu")(h)
    return keras.Model(inp, keras.layers.Dense(1)(h))


def setup(kind, shared):
    if kind.startswith("keras"):
        keras.config.set_dtype_policy("mixed_float16" if "mixed" in kind else "float16")
        try:
            model = make(shared)
        finally:
            keras.config.set_dtype_policy("float32")
        opt = keras.optimizers.Adam()
        if "mixed" in kind:
            opt = keras.optimizers.LossScaleOptimizer(opt)
    else:
        mode, dtype = kind.split()
        with mp.scope(mode, dtype):
            model = make(shared)
        opt = mp.MasterWeightOptimizer(keras.optimizers.Adam())
    opt.build(model.trainable_variables)
    return model, opt


def persistent_bytes(model, opt):
    seen, total = set(), 0
    variables = []
    for v in model.weights:
        variables.append(v)
        info = _pairs.lookup(v)
        variables += list(info.blob_copy.values()) if info else []
    variables += [v for v in opt.variables if len(v.shape) > 0]  # not scalar bookkeeping
    for v in variables:
        v = _pairs.backend_variable(v)
        if id(v) not in seen:
            seen.add(id(v))
            total += v.shape.num_elements() * v.dtype.size
    return total


def casts(model, opt):
    x, y = tf.random.normal((16, 32)), tf.random.normal((16, 1))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.cast(model(x, training=True), tf.float32) - y) ** 2)
            loss = opt.scale_loss(loss)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    graph = step.get_concrete_function(x, y).graph.as_graph_def(add_shapes=True)
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    counts = collections.Counter()
    for n in nodes:
        if n.op != "Cast":
            continue
        shapes = n.attr["_output_shapes"].list.shape
        if shapes and len(shapes[0].dim) == 0:
            continue
        src, dst = (tf.as_dtype(n.attr[k].type).name for k in ("SrcT", "DstT"))
        counts[f"{src}->{dst}"] += 1
    return sum(counts.values()), dict(counts)


def main():
    shared = "--shared" in sys.argv
    kinds = ["keras mixed_float16", "keras float16", "pseudo_fp16 float16",
             "pseudo_fp16 bfloat16", "reverse float16", "reverse bfloat16"]
    for kind in kinds:
        model, opt = setup(kind, shared)
        n = sum(v.shape.num_elements() for v in model.trainable_variables)
        total, detail = casts(model, opt)
        print(f"{kind:22s} bytes/param={persistent_bytes(model, opt) / n:6.3f} "
              f"casts/step={total:3d} {detail}")


if __name__ == "__main__":
    main()

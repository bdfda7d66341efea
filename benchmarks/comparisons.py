"""Issue 18's table in one run: each ratio (tfinit / Keras, median of interleaved runs) next
to its target.

Rows (SGD, global batch 256 unless said otherwise):
- MLP 256-512-512-10, pseudo_fp16 + MasterWeightOptimizer vs ``mixed_float16`` + LSO;
- one Dense read 16 times per step (widths 256, 512, 1024), same contenders; these rows also
  give the error of the shared weight's gradient against an fp32 model with the same
  (16-bit-rounded) weights, for tfinit and for Keras;
- MLP 256-512-512-10, pseudo_fp16 and reverse in bfloat16 vs ``mixed_bfloat16`` (no loss
  scaling and no finiteness check either side: ``MasterWeightOptimizer``'s bfloat16 default);
- the same MLP, reverse float16 vs ``mixed_float16``;
- MirroredStrategy x2 (2 logical CPUs), custom loop and ``fit``, pseudo_fp16 vs
  ``mixed_float16`` + LossScaleOptimizer (Adam, the project's ``distribute`` rows).

``python -m benchmarks --only comparisons`` (with ``--quick`` for the ~1-2 minute version).
"""

import numpy as np
import tensorflow as tf

from benchmarks import distribute
from benchmarks.training import Contender, compare_step

TARGETS = {"mlp_float16": 1.02, "reuse": 1.02, "mlp_bfloat16": 1.02, "mirrored": 1.03}
SIZES = {  # MLP input width, reuse widths and their repeats, batch, MLP repeats and steps
    # per timed sample. A ratio's 95 % interval narrows as 1/sqrt(repeats): at the quick
    # sizes it is about +-0.02-0.06 on this 2-core machine (the `ratio_ci95` column).
    "smoke": dict(mlp=16, reuse={16: 2}, batch=8, repeats=2, steps=1, distribute="smoke"),
    "quick": dict(mlp=256, reuse={256: 41, 512: 21, 1024: 9}, batch=256, repeats=81, steps=2,
                  distribute="quick"),
    "full": dict(mlp=256, reuse={256: 101, 512: 51, 1024: 25}, batch=256, repeats=201,
                 steps=3, distribute="full"),
}


def unscaled_gradients(contender):
    """The gradients of ``contender``'s loss on its batch, in fp32, loss scale divided out."""
    variables = contender.model.trainable_variables
    optimizer = contender.optimizer
    with tf.GradientTape() as tape:
        pred = contender.model(contender.x, training=True)
        loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - contender.y))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, variables)
    scale = float(np.asarray(getattr(optimizer, "dynamic_scale", 1.0))) if (
        scaled is not loss) else 1.0
    return [np.asarray(tf.cast(g, tf.float32)) / scale for g in grads]


def set_weights(contender, values):
    for variable, value in zip(contender.model.trainable_variables, values, strict=True):
        variable.assign(value)


def gradient_errors(kind, width, compute_dtype, batch):
    """Max abs and max relative (to max |reference|) gradient error of tfinit and Keras
    against fp32, all three computing with the same 16-bit-rounded weights."""
    def contender(mode):
        return Contender(mode, kind, width, compute_dtype, batch, optimizer="sgd")

    ours, keras_mixed, reference = contender("pseudo_fp16"), contender("keras_mixed"), \
        contender("fp32")
    rounded = [np.asarray(v).astype(compute_dtype).astype(np.float32)
               for v in ours.model.trainable_variables]  # np.asarray: the fp32 master
    set_weights(ours, rounded)
    set_weights(keras_mixed, rounded)
    set_weights(reference, rounded)
    ref = unscaled_gradients(reference)
    out = {}
    for label, c in (("ours", ours), ("keras", keras_mixed)):
        errors = [np.abs(g - r) for g, r in zip(unscaled_gradients(c), ref, strict=True)]
        out[f"grad_max_abs_err_{label}"] = float(f"{max(e.max() for e in errors):.3g}")
        out[f"grad_max_rel_err_{label}"] = float(
            f"{max(e.max() / np.abs(r).max() for e, r in zip(errors, ref, strict=True)):.3g}")
    return out


SHOWN = ("name", "target", "ratio", "within_target", "verdict", "ratio_ci95", "ratio_iqr",
         "ours_ms", "baseline_ms", "repeats")


def with_target(row, target):
    """``row``'s main figures (and gradient errors), its target, whether the measured ratio
    is within it, and whether its 95 % interval decides that: ``within`` (the whole interval
    is), ``over`` (none of it is) or ``undecided`` (the interval holds the target)."""
    kept = {k: v for k, v in row.items() if k in SHOWN or k.startswith("grad_")}
    low, high = row["ratio_ci95"]
    verdict = "within" if high <= target else "over" if low > target else "undecided"
    return {**kept, "target": target, "within_target": row["ratio"] <= target,
            "verdict": verdict}


def step_rows(s):
    rows = []

    def step(kind, width, dtype, repeats, steps, label, mode="pseudo_fp16"):
        return compare_step(kind, width, dtype, repeats, steps, s["batch"], with_fp32=False,
                            ours_mode=mode, optimizer="sgd", name=label)

    mlp = f"MLP {s['mlp']}-{2 * s['mlp']}-{2 * s['mlp']}-10"
    rows.append(with_target(step("classifier", s["mlp"], "float16", s["repeats"], s["steps"],
                                 f"{mlp}, pseudo_fp16 vs mixed_float16"),
                            TARGETS["mlp_float16"]))
    for width, repeats in s["reuse"].items():
        row = step("reuse", width, "float16", repeats, 1,
                   f"one Dense {width} read 16 times, pseudo_fp16 vs mixed_float16")
        row.update(gradient_errors("reuse", width, "float16", s["batch"]))
        rows.append(with_target(row, TARGETS["reuse"]))
    rows.append(with_target(step("classifier", s["mlp"], "float16", s["repeats"], s["steps"],
                                 f"{mlp}, reverse vs mixed_float16", mode="reverse"),
                            TARGETS["mlp_float16"]))
    for mode in ("pseudo_fp16", "reverse"):
        rows.append(with_target(step("classifier", s["mlp"], "bfloat16", s["repeats"],
                                     s["steps"], f"{mlp}, {mode} bfloat16 vs mixed_bfloat16",
                                     mode=mode),
                                TARGETS["mlp_bfloat16"]))
    return rows


def run(mode):
    s = SIZES[mode]
    rows = step_rows(s)
    for row in distribute.run(s["distribute"], rows=("loop_pseudo", "fit_pseudo")):
        rows.append(with_target(row, TARGETS["mirrored"]))
    return rows

"""``master="split"`` (bfloat16 copy + int16 remainder) against the other bfloat16 schemes.

Schemes, each an MLP trained with Adam in a compiled step (``benchmarks.training.Contender``):

- ``mixed_bfloat16 (Keras)``: fp32 variables cast on every read, plain Adam;
- ``pseudo_fp16 fp32-master``: tfinit's bfloat16 variable + fp32 master (``master="fp32"``);
- ``split``: tfinit's bfloat16 variable + int16 remainder (``master="split"``);
- ``split + bf16 state``: the same, ``MasterWeightOptimizer(..., state_dtype="bfloat16")``;
- ``bfloat16 (Keras)``: Keras's plain bfloat16 policy, no master (quality table only).

Three tables:

- memory: bytes per parameter of every ``tf.Variable`` the scheme holds after its steps
  (what each holds now: a split pair's scratch variable holds nothing between steps), and, in
  a fresh process each, TensorFlow's allocator figures (CPU: its BFC allocator, turned on for
  that process): bytes in use between steps and the peak during a step, per parameter;
- step time: split against ``master="fp32"`` and against Keras ``mixed_bfloat16``;
- training quality: the loss after the same steps from the same weights, on fine-tuning at a
  small learning rate (a teacher network's weights perturbed by 1 %, Adam at 1e-4), where
  plain 16-bit weights lose the updates. Also: how many element updates of the fp32-master
  run landed on a tie (the master value a split stores 1 ulp toward its copy).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from benchmarks import memory
from benchmarks._timing import compare
from benchmarks.training import Contender, build_model
from tfinit._split_master import tensorflow as _split_master
from tfinit import mixed_precision as mp

SCHEMES = {
    "mixed_bfloat16 (Keras)": dict(mode="keras_mixed"),
    "pseudo_fp16 fp32-master": dict(mode="pseudo_fp16", master="fp32"),
    "split": dict(mode="pseudo_fp16", master="split"),
    "split + bf16 state": dict(mode="pseudo_fp16", master="split", state_dtype="bfloat16"),
}
QUALITY_SCHEMES = {**SCHEMES, "bfloat16 (Keras, no master)": dict(mode="keras_16bit"),
                   "fp32": dict(mode="fp32")}


def contender(scheme, width, batch=64, seed=0, **extra):
    return Contender(kind="mlp", width=width, compute_dtype="bfloat16", batch=batch, seed=seed,
                     **{**QUALITY_SCHEMES[scheme], **extra})


# ------------------------------------------------------------------ memory

def variable_bytes(scheme, width):
    """Bytes per parameter (total, by dtype) of the variables ``scheme`` holds after a step."""
    made, created = memory.created_by(lambda: contender(scheme, width, batch=8))
    params = memory.parameter_count(made.model)
    by_dtype = memory.bytes_by_dtype(created)
    return params, {dtype: round(b / params, 3) for dtype, b in sorted(by_dtype.items())}


def step_peak(scheme, width, steps=3):
    """Run :func:`_peak_child` in a fresh process: bytes per parameter TensorFlow holds after
    a step, and its peak during a step."""
    # TensorFlow's CPU allocator keeps statistics only when it is its BFC allocator.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CPU_ALLOCATOR_USE_BFC="true")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-m", "benchmarks.split_master", scheme, str(width),
                          str(steps)], capture_output=True, text=True, env=env, timeout=900,
                         cwd=root)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_child(scheme, width, steps):
    """In this (fresh) process: build and step once (traces), then read TensorFlow's allocator:
    the bytes in use between steps (variables and what else persists) and the peak during
    ``steps`` more steps, per parameter (GPU: the first GPU's allocator)."""
    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
    made = contender(scheme, width, batch=8)
    made.run()
    held = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    made.run(steps)
    peak = tf.config.experimental.get_memory_info(device)["peak"]
    params = memory.parameter_count(made.model)
    print(json.dumps({"params": params, "device": device,
                      "held_per_param": round(held / params, 2),
                      "step_peak_per_param": round(peak / params, 2)}))


def memory_rows(width, peak_width):
    rows = []
    for scheme in SCHEMES:
        params, by_dtype = variable_bytes(scheme, width)
        row = {"name": f"MLP width {width}, Adam: {scheme}", "params": params,
               "bytes_per_param": round(sum(by_dtype.values()), 3),
               **{f"{dtype}_bytes_per_param": b for dtype, b in by_dtype.items()}}
        if peak_width:
            peak = step_peak(scheme, peak_width)
            row.update({"peak_width": peak_width, "held_per_param": peak["held_per_param"],
                        "step_peak_per_param": peak["step_peak_per_param"]})
        rows.append(row)
    return rows


# ------------------------------------------------------------------ step time

def time_row(width, batch, repeats, steps, jit_compile=False):
    made = {name: contender(name, width, batch, jit_compile=jit_compile) for name in SCHEMES}
    for c in made.values():
        if not np.isfinite(c.run()):
            raise RuntimeError("non-finite loss")
    row = compare(
        f"MLP width {width} bfloat16{' XLA' if jit_compile else ''}: split vs "
        "mixed_bfloat16 (Keras)",
        lambda: made["split"].run(steps),
        lambda: made["mixed_bfloat16 (Keras)"].run(steps),
        repeats,
        others={"fp32_master": lambda: made["pseudo_fp16 fp32-master"].run(steps),
                "bf16_state": lambda: made["split + bf16 state"].run(steps)},
        steps_per_sample=steps,
    )
    for key in list(row):
        if key.endswith("_ms"):
            row[key] = round(row[key] / steps, 3)
    return row


# ------------------------------------------------------------------ training quality

def fine_tuning_task(width, seed=0, batch=256, noise=0.01):
    """A teacher MLP's data and weights perturbed by ``noise`` (relative), for fine-tuning."""
    keras.utils.set_random_seed(seed)
    teacher = build_model("mlp", width)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = np.asarray(teacher(x), np.float32)
    start = [w * (1 + noise * rng.standard_normal(w.shape).astype(np.float32))
             for w in teacher.get_weights()]
    return x, y, start


def quality_rows(width, steps, lr=1e-4):
    x, y, start = fine_tuning_task(width)
    rows = []
    for scheme in QUALITY_SCHEMES:
        made = contender(scheme, width, optimizer=keras.optimizers.Adam(lr))
        if QUALITY_SCHEMES[scheme]["mode"] == "pseudo_fp16":
            mp.set_master_weights(made.model, start)
        else:
            made.model.set_weights(start)
        made.x, made.y = tf.constant(x), tf.constant(y)
        first = made.run()
        ties = 0
        losses = [first]
        for _ in range(steps - 1):
            losses.append(made.run())
            if scheme == "pseudo_fp16 fp32-master":
                ties += sum(int(_split_master.ties(w)) for w in mp.get_master_weights(made.model))
        row = {"name": f"fine-tune MLP width {width}, Adam {lr:g}, {steps} steps: {scheme}",
               "first_loss": float(f"{first:.6g}"), "final_loss": float(f"{losses[-1]:.6g}"),
               "final_over_first": round(losses[-1] / first, 4)}
        if scheme == "pseudo_fp16 fp32-master":
            params = memory.parameter_count(made.model)
            row["tie_updates"] = ties
            row["element_updates"] = params * (steps - 1)
        rows.append(row)
    return rows


def run(mode):
    s = {"smoke": dict(width=16, peak=0, time_width=16, batch=8, repeats=2, steps=1,
                       quality_width=16, quality_steps=5),
         "quick": dict(width=256, peak=1024, time_width=512, batch=64, repeats=21, steps=1,
                       quality_width=128, quality_steps=200),
         "full": dict(width=256, peak=2048, time_width=1024, batch=128, repeats=61, steps=1,
                      quality_width=256, quality_steps=400)}[mode]
    rows = memory_rows(s["width"], s["peak"])
    rows.append(time_row(s["time_width"], s["batch"], s["repeats"], s["steps"]))
    if mode != "smoke":
        rows.append(time_row(s["time_width"], s["batch"], s["repeats"], s["steps"],
                             jit_compile=True))
    rows.extend(quality_rows(s["quality_width"], s["quality_steps"]))
    return rows


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _peak_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))

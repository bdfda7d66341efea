"""``python -m benchmarks --gpu``: tfinit's 16-bit modes against Keras's mixed policies on a GPU.

Models: a small ResNet-style CNN (residual blocks with BatchNormalization, 32x32 images) and
a transformer block (MultiHeadAttention + LayerNormalization + MLP). For each model, 16-bit
dtype (float16, bfloat16) and ``jit_compile`` (off, on), one interleaved comparison of Adam
steps: pseudo_fp16 + MasterWeightOptimizer (``ours``), Keras ``mixed_<dtype>`` (baseline,
+ LossScaleOptimizer for float16), reverse + MasterWeightOptimizer and fp32. Reported per
contender: ms/step (median), the step's peak device memory above what was allocated before it
(``tf.config.experimental.get_memory_info``) and persistent bytes per parameter (every
variable the model and optimizer created, masters and copies included).

Without a GPU it prints one line saying so and exits 0. ``--allow-cpu`` (internal, for the
tests) runs the same code on the CPU at tiny sizes; its figures mean nothing.
"""

import json

import keras
import tensorflow as tf

from benchmarks._markdown import to_markdown
from benchmarks._models import resnet, transformer
from benchmarks._timing import compare
from benchmarks.memory import bytes_by_dtype, created_by, parameter_count
from benchmarks.training import Contender

NO_GPU = "No GPU found (tf.config.list_physical_devices('GPU') is empty): GPU benchmark skipped."
MODES = ("pseudo_fp16", "keras_mixed", "reverse", "fp32")
SIZES = {
    # per model: (dtype, jit_compile) configurations; sizes; interleaved repeats
    "gpu": dict(configs={m: [(d, j) for d in ("float16", "bfloat16") for j in (False, True)]
                         for m in ("resnet", "transformer")},
                batch=128, image=32, channels=64, blocks=2, seq=128, d_model=256, heads=8,
                repeats=31, steps=10),
    # --allow-cpu: each model once, the two of them covering both dtypes and jit on and off
    "cpu": dict(configs={"resnet": [("float16", False)], "transformer": [("bfloat16", True)]},
                batch=4, image=8, channels=8, blocks=1, seq=8, d_model=16, heads=2,
                repeats=2, steps=1),
}


def gpu_devices():
    return tf.config.list_physical_devices("GPU")


MODELS = {"resnet": resnet, "transformer": transformer}


def step_peak_mib(contender, steps, device):
    """Peak device memory during ``steps`` steps above what was allocated before (MiB)."""
    if device is None:
        return None
    before = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    contender.run(steps)
    return round((tf.config.experimental.get_memory_info(device)["peak"] - before) / 2**20, 1)


def compare_model(name, s, dtype, jit, device):
    """One row: the four contenders on ``MODELS[name]``, ``dtype``, ``jit``."""
    contenders, bytes_per_param = {}, {}
    for mode in MODES:
        contender, created = created_by(lambda mode=mode: Contender(
            mode, name, None, dtype, s["batch"], builder=lambda: MODELS[name](s),
            jit_compile=jit))
        contenders[mode] = contender
        bytes_per_param[mode] = round(
            sum(bytes_by_dtype(created).values()) / parameter_count(contender.model), 2)
    peaks = {mode: step_peak_mib(c, s["steps"], device) for mode, c in contenders.items()}
    runs = {mode: (lambda c=c: c.run(s["steps"])) for mode, c in contenders.items()}
    row = compare(f"{name} {dtype}, jit_compile={jit}: pseudo_fp16 vs mixed_{dtype}",
                  runs.pop("pseudo_fp16"), runs.pop("keras_mixed"), s["repeats"],
                  others=runs, params=parameter_count(contenders["fp32"].model))
    for key in [k for k in row if k.endswith("_ms")]:
        row[key] = round(row[key] / s["steps"], 3)
    row["reverse_vs_baseline"] = round(row["reverse_ms"] / row["baseline_ms"], 3)
    for mode in MODES:
        row[f"peak_step_mib_{mode}"] = peaks[mode]
        row[f"bytes_per_param_{mode}"] = bytes_per_param[mode]
    return row


def run(allow_cpu=False):
    """The rows, or None when there is no GPU and ``allow_cpu`` is false."""
    gpus = gpu_devices()
    if not gpus and not allow_cpu:
        return None
    s = SIZES["gpu" if gpus else "cpu"]
    device = "GPU:0" if gpus else None
    return [compare_model(name, s, dtype, jit, device)
            for name in MODELS for dtype, jit in s["configs"][name]]


def device_name():
    gpus = gpu_devices()
    if not gpus:
        return "CPU (--allow-cpu: figures meaningless)"
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def main(out, allow_cpu=False):
    """Run, print and write ``results_gpu.json``/``.md`` to ``out``; 0 (also without a GPU)."""
    rows = run(allow_cpu)
    if rows is None:
        print(NO_GPU)
        return 0
    device = device_name()
    table = to_markdown(rows)
    text = (f"# tfinit GPU benchmark\n\nDevice: {device}; TensorFlow {tf.__version__}, Keras "
            f"{keras.__version__}. ratio = pseudo_fp16 / Keras mixed, median of interleaved "
            f"runs; ms per step.\n\n{table}\n")
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results_gpu.json").write_text(json.dumps({"device": device, "rows": rows},
                                                     indent=1) + "\n")
    (out / "results_gpu.md").write_text(text)
    return 0

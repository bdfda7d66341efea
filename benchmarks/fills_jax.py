"""``KERAS_BACKEND=jax python -m benchmarks.fills_jax``: tfinit's fills vs Keras's initializers
on the JAX backend, on a GPU (or any accelerator jax has), with no TensorFlow needed.

- Speed: each tfinit fill against its Keras equivalent, float32, a square kernel
  (``SIZES["gpu"]``: 8192x8192), interleaved rounds (``benchmarks._timing.compare``: every
  round runs both in turn; ms are medians, ``ratio`` = tfinit / Keras is the median of the
  per-round ratios, with its IQR and 95 % interval). Each call is timed until
  ``jax.block_until_ready`` on the returned array, so the device's work is counted, not just
  the dispatch. ``ours_devices`` is where tfinit's array was placed.
- Values, ``device_vs_cpu``: the same seeded fill made on the default device and under
  ``jax.default_device(cpu)``, per random stream (``rng="keras"``: keras.random;
  ``rng="caffe2"``: tfinit's Caffe2 generator): ``bitwise_equal``, ``max_abs_diff``,
  ``max_ulp_diff`` (float32 bit patterns) and ``n_differ``.

Writes ``results_gpu_jax.json``/``.md`` (in ``benchmarks/`` unless ``--out`` says otherwise).
On another Keras backend it prints one line saying how to run it (``NOT_JAX``) and exits 0;
without an accelerator likewise (``NO_GPU``). ``--allow-cpu`` (internal, for the tests) runs
the same code on the CPU at tiny sizes (``SIZES["cpu"]``); its figures mean nothing (written
only where ``--out`` says, never over the GPU figures in ``benchmarks/``), and its value check
compares the CPU with itself. ``python -m benchmarks --jax-fills`` runs it too.
"""

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import keras
import numpy as np

import tfinit
from benchmarks._markdown import to_markdown, write_results
from benchmarks._timing import compare

try:  # absent where only TensorFlow is installed: NOT_JAX says so
    import jax
except ImportError:
    jax = None

HERE = Path(__file__).resolve().parent
NOT_JAX = ("The Keras backend is {backend!r}, not 'jax': run "
           "KERAS_BACKEND=jax python -m benchmarks.fills_jax")
NO_GPU = ("No accelerator found (jax.default_backend() is 'cpu'): JAX fills benchmark "
          "skipped.")

SIZES = {
    # side of the square float32 kernel timed; interleaved rounds; shape of the value check
    "gpu": dict(side=8192, repeats=31, warmup=2, check_shape=(512, 384)),
    # --allow-cpu: the same code at tiny sizes
    "cpu": dict(side=64, repeats=3, warmup=1, check_shape=(16, 12)),
}

PAIRS = [
    ("XavierFill", lambda: tfinit.XavierFill(seed=1),
     "VarianceScaling(1, fan_in, uniform)",
     lambda: keras.initializers.VarianceScaling(1.0, "fan_in", "uniform", seed=1)),
    ("MSRAFill", lambda: tfinit.MSRAFill(seed=1),
     "VarianceScaling(2, fan_out, untruncated_normal)",
     lambda: keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal", seed=1)),
    ("GaussianFill(std=0.01)", lambda: tfinit.GaussianFill(std=0.01, seed=1),
     "RandomNormal(stddev=0.01)",
     lambda: keras.initializers.RandomNormal(stddev=0.01, seed=1)),
    ("UniformFill(-1, 1)", lambda: tfinit.UniformFill(min=-1.0, max=1.0, seed=1),
     "RandomUniform(-1, 1)",
     lambda: keras.initializers.RandomUniform(-1.0, 1.0, seed=1)),
    ("ConstantFill(0.5)", lambda: tfinit.ConstantFill(value=0.5),
     "Constant(0.5)",
     lambda: keras.initializers.Constant(0.5)),
]

# (label, random stream, fill) for the default-device-vs-CPU value check
VALUE_CASES = [
    ("XavierFill(seed=7)", "keras", lambda: tfinit.XavierFill(seed=7)),
    ("MSRAFill(seed=7)", "keras", lambda: tfinit.MSRAFill(seed=7)),
    ("GaussianFill(std=0.01, seed=7)", "keras", lambda: tfinit.GaussianFill(std=0.01, seed=7)),
    ("UniformFill(-1, 1, seed=7)", "caffe2",
     lambda: tfinit.UniformFill(-1.0, 1.0, seed=7, rng="caffe2")),
]


def accelerated():
    """Whether jax's default device is not the CPU."""
    return jax.default_backend() != "cpu"


def _devices(array):
    return sorted(str(d) for d in array.devices())


def _fill(init, shape):
    out = init(shape, "float32")
    jax.block_until_ready(out)
    return out


def time_pairs(s):
    """One row per pair: interleaved medians, each call until block_until_ready."""
    shape = (s["side"], s["side"])
    rows = []
    for ours_name, ours, base_name, base in PAIRS:
        ours_init, base_init = ours(), base()
        where = _devices(_fill(ours_init, shape))
        start = time.perf_counter()
        row = compare(f"{ours_name} vs {base_name} {shape[0]}x{shape[1]} float32",
                      lambda i=ours_init: _fill(i, shape), lambda i=base_init: _fill(i, shape),
                      s["repeats"], warmup=s["warmup"], ours_devices=where)
        row["wall_s"] = round(time.perf_counter() - start, 2)
        rows.append(row)
    return rows


def device_vs_cpu(shape):
    """Each VALUE_CASES fill made on the default device and on the CPU, compared bitwise."""
    cpu = jax.devices("cpu")[0]
    checks = []
    for label, stream, make in VALUE_CASES:
        on_default = _fill(make(), shape)
        with jax.default_device(cpu):
            on_cpu = _fill(make(), shape)
        a, c = np.asarray(on_default), np.asarray(on_cpu)
        ulp = np.abs(a.view(np.int32).astype(np.int64) - c.view(np.int32).astype(np.int64))
        checks.append({
            "fill": label, "stream": stream, "shape": list(shape),
            "default_devices": _devices(on_default), "cpu_devices": _devices(on_cpu),
            "bitwise_equal": bool((ulp == 0).all()),
            "max_abs_diff": float(np.abs(a.astype(np.float64) - c.astype(np.float64)).max()),
            "max_ulp_diff": int(ulp.max()),
            "n_differ": int((ulp > 0).sum()),
        })
    return checks


def machine():
    device = jax.devices()[0]
    return {
        "device": device.device_kind if accelerated()
        else "CPU (--allow-cpu: figures meaningless)",
        "jax_devices": [str(d) for d in jax.devices()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "date": datetime.date.today().isoformat(),
    }


def run(allow_cpu=False):
    """The results (machine, sizes, rows, device_vs_cpu), or None without an accelerator
    when ``allow_cpu`` is false. The Keras backend must be jax."""
    if not accelerated() and not allow_cpu:
        return None
    s = SIZES["gpu" if accelerated() else "cpu"]
    results = {"machine": machine(), "sizes": dict(s, check_shape=list(s["check_shape"])),
               "rows": time_pairs(s), "device_vs_cpu": device_vs_cpu(s["check_shape"])}
    # True would mean something on this path needs TensorFlow: none of it should
    results["machine"]["tensorflow_imported"] = "tensorflow" in sys.modules
    return results


def render(results):
    """The Markdown of ``results`` (what ``results_gpu_jax.md`` holds)."""
    m, s = results["machine"], results["sizes"]
    head = (f"# tfinit fills vs Keras initializers, JAX backend\n\n"
            f"Device: {m['device']} ({', '.join(m['jax_devices'])}); jax {m['jax']}, Keras "
            f"{m['keras']}, Python {m['python']}, jax_enable_x64={m['jax_enable_x64']}; "
            f"{m['date']}; TensorFlow imported: {m['tensorflow_imported']}. ratio = tfinit / "
            f"Keras, median of {s['repeats']} interleaved rounds, each call timed until "
            "jax.block_until_ready; ms per call.")
    if m.get("note"):
        head += f"\n\n{m['note']}"
    checks = ("## The same seeded fill on the default device and on the CPU\n\n"
              f"{to_markdown(results['device_vs_cpu'])}")
    return f"{head}\n\n{to_markdown(results['rows'])}\n\n{checks}\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="KERAS_BACKEND=jax python -m benchmarks.fills_jax",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path,
                        help="folder for results_gpu_jax.json / .md (default: benchmarks/; "
                             "CPU figures are written only where --out says)")
    args = parser.parse_args(argv)
    if keras.backend.backend() != "jax" or jax is None:
        print(NOT_JAX.format(backend=keras.backend.backend()))
        return 0
    results = run(args.allow_cpu)
    if results is None:
        print(NO_GPU)
        return 0
    text = render(results)
    print(text)
    if args.out is None and not accelerated():
        # the committed results_gpu_jax.* hold real GPU figures: keep them
        print("--allow-cpu without --out: nothing written.")
        return 0
    write_results(args.out or HERE, "results_gpu_jax", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

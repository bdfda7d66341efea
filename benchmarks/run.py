"""``python -m benchmarks [--quick | --smoke]``: every side-by-side comparison, one run.

Prints a Markdown table per section and writes ``results.json`` and ``results.md``
(in ``benchmarks/`` unless ``--out`` says otherwise). ``ratio`` is tfinit / baseline
(below 1: tfinit is faster), the median of the ratios of interleaved runs. ``--gpu`` and
``--jax-fills`` (``benchmarks.fills_jax``, under ``KERAS_BACKEND=jax``) run that one benchmark
instead; ``--gpu`` runs ``benchmarks.gpu`` on the TensorFlow backend and
``benchmarks.mixed_jax`` (no TensorFlow needed) under ``KERAS_BACKEND=jax``.
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
if __name__ == "__main__" and str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))  # `python benchmarks/run.py` from anywhere

from benchmarks._markdown import to_markdown, write_results  # noqa: E402  (needs the path above)

TITLES = {
    "comparisons": "Issue 18's table: tfinit / Keras mixed precision, each ratio next to its "
                   "target (ms per step, SGD, batch 256)",
    "fills": "Fills: tfinit vs the Keras/TensorFlow equivalent (ms per call)",
    "load_memory": "Loading a large external parameter: peak memory (copies of the array)",
    "training": "Training step: tfinit (pseudo_fp16 or reverse) + MasterWeightOptimizer vs "
                "Keras mixed precision (ms per compiled Adam step)",
    "memory": "Persistent bytes per parameter with Adam",
    "scaling": "Scaling: float16 training step as the width doubles (ms per step)",
    "distribute": "MirroredStrategy over 2 logical CPUs: tfinit vs Keras mixed_float16 "
                  "(ms per call of several steps)",
    "caffe2_import": "Caffe2 model-zoo-sized nets (VGG-19, ResNet-50): load_init_net vs a bare "
                     "protobuf parse, its peak memory, to_keras vs the same layers by hand",
    "split_master": "bfloat16 with master='split' (copy + int16 remainder): bytes per "
                    "parameter, step time, fine-tuning quality",
}


def _sections():
    from benchmarks import (caffe2_import, comparisons, distribute, fills, memory, scaling,
                            split_master, training)

    return [
        ("comparisons", comparisons.run),
        ("fills", fills.run),
        ("load_memory", fills.load_memory),
        ("training", training.run),
        ("memory", memory.run),
        ("scaling", scaling.run),
        ("distribute", distribute.run),
        ("caffe2_import", caffe2_import.run),
        ("split_master", split_master.run),
    ]


def _machine():
    import tensorflow as tf
    import keras

    gpus = tf.config.list_physical_devices("GPU")
    return {
        "platform": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                    f"{'GPU: ' + str(len(gpus)) if gpus else 'CPU only'}",
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "load_average": list(os.getloadavg()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer repeats, smaller models")
    size.add_argument("--smoke", action="store_true",
                      help="tiny sizes, 2 repeats: checks the suite runs (figures meaningless)")
    size.add_argument("--gpu", action="store_true",
                      help="the GPU benchmark (benchmarks.gpu on TensorFlow, benchmarks."
                           "mixed_jax under KERAS_BACKEND=jax); exits 0 without a GPU")
    size.add_argument("--jax-fills", action="store_true",
                      help="fills vs Keras initializers on the JAX backend (KERAS_BACKEND=jax, "
                           "no TensorFlow); exits 0 without an accelerator")
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE,
                        help="folder for results.json / results.md")
    parser.add_argument("--only", nargs="+", choices=list(TITLES), help="run only these")
    args = parser.parse_args(argv)
    if args.gpu:
        import keras

        if keras.backend.backend() == "jax":
            from benchmarks import mixed_jax

            out = [] if args.out == HERE else ["--out", str(args.out)]
            return mixed_jax.main(out + ["--allow-cpu"] * args.allow_cpu)
        from benchmarks import gpu

        return gpu.main(args.out, allow_cpu=args.allow_cpu)
    if args.jax_fills:
        from benchmarks import fills_jax

        out = [] if args.out == HERE else ["--out", str(args.out)]
        return fills_jax.main(out + ["--allow-cpu"] * args.allow_cpu)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    from benchmarks._timing import disable_cpu_remapping

    machine = dict(_machine(), grappler_remapping_off=disable_cpu_remapping())
    results = {"mode": mode, "machine": machine, "sections": {}, "seconds": {}}
    for name, run in _sections():
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        rows = run(mode)
        results["seconds"][name] = round(time.perf_counter() - start, 1)
        results["sections"][name] = rows
        print(f"\n## {TITLES[name]}\n\n{to_markdown(rows)}", flush=True)
    write_results(args.out, "results", results, render(results))
    return 0


def render(results):
    m = results["machine"]
    head = (f"# tfinit benchmarks ({results['mode']})\n\n{m['platform']}; TensorFlow "
            f"{m['tensorflow']}, Keras {m['keras']}; load average at start "
            f"{m['load_average'][0]:.1f}. ratio = tfinit / baseline, median of interleaved "
            "runs (below 1: tfinit faster).")
    body = [f"## {TITLES[n]}\n\n{to_markdown(rows)}" for n, rows in results["sections"].items()]
    return "\n\n".join([head, *body]) + "\n"


if __name__ == "__main__":
    sys.exit(main())

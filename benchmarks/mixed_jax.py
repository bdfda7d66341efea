"""``KERAS_BACKEND=jax python -m benchmarks.mixed_jax``: fp32 masters on Keras's JAX backend
against Keras's mixed policies (no TensorFlow needed).

Contenders, each trained with Adam (1e-3, mean squared error) on the same seeded model:

- ``pseudo_fp16`` and ``reverse``: built in ``tfinit.mixed_precision.scope(mode, dtype)``,
  compiled with a plain Adam, which ``compile`` wraps in ``MasterWeightOptimizer`` (dynamic
  loss scaling for float16, none for bfloat16);
- ``split`` (bfloat16 rows only): ``pseudo_fp16`` with ``master="split"``, the bfloat16
  variable + an int16 remainder instead of an fp32 master;
- ``keras_mixed`` (the baseline): Keras's ``mixed_<dtype>`` policy; ``compile`` wraps Adam
  in Keras's ``LossScaleOptimizer`` for float16, as it does for every user;
- ``fp32``: everything float32, plain Adam.

Models (``benchmarks._models``): an MLP, a transformer block (MultiHeadAttention +
LayerNormalization + MLP) and a small ResNet-style CNN, in float16 and bfloat16.

The step timed is the one ``fit`` runs: ``jax.jit(model.train_step, donate_argnums=0)``,
what Keras's ``make_train_function`` builds, compiled ahead of time on the state ``fit``
threads through it (the values of the trainable, non-trainable, optimizer and metric
variables) and a device-resident batch. One sample = ``steps`` chained steps, timed until
``jax.block_until_ready`` on the new state, so the device's work is counted, not the
dispatch. Rounds are interleaved (``benchmarks._timing.compare``: every round runs every
contender once, the order rotating); ``ms_per_step`` is the median sample / ``steps``,
``ratio`` = contender / ``keras_mixed`` is the median of the per-round ratios with its
distribution-free 95 % interval (``ratio_ci95``); ``vs_fp32`` likewise against fp32.

Memory, measured from the arrays after the optimizer is built: ``bytes_per_param`` is the
bytes of every non-scalar array in the step's state (model variables, optimizer variables,
masters and copies included; BatchNormalization's moving statistics too) over the model's
trainable parameter count; the scalars (iteration, learning rate, loss scale, metric totals)
are ``scalar_bytes``. ``step_mib`` is XLA's own account of the compiled step (arguments +
outputs - donated aliases + temporaries, ``Compiled.memory_analysis()``); with ``--gpu`` the
device's ``peak_bytes_in_use`` over the whole run (``memory_stats()``) is in the header (JAX
cannot reset it, so there is no clean per-contender peak in one process).

Modes: default, an accelerator at the ``gpu`` sizes (without one it prints ``NO_GPU`` and
exits 0; no new model/dtype starts after ``budget_s``, so the run ends within 8 minutes,
and what that leaves out is listed under ``skipped``); ``--cpu``, the ``cpu`` sizes on the
CPU (the figures in docs/performance.md);
``--allow-cpu`` (internal, for the tests) the tiny ``smoke`` sizes, figures meaningless.
Writes ``results_mixed_jax_<sizes>.json``/``.md`` (``benchmarks/`` unless ``--out``; smoke
figures only where ``--out`` says). ``KERAS_BACKEND=jax python -m benchmarks --gpu`` runs the
default mode. On another Keras backend it prints ``NOT_JAX`` and exits 0.
"""

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np

from benchmarks._markdown import to_markdown, write_results
from benchmarks._models import MODELS
from benchmarks._timing import compare, median_ci95

try:  # absent where only TensorFlow is installed: NOT_JAX says so
    import jax
except ImportError:
    jax = None

HERE = Path(__file__).resolve().parent
NOT_JAX = ("The Keras backend is {backend!r}, not 'jax': run "
           "KERAS_BACKEND=jax python -m benchmarks.mixed_jax")
NO_GPU = ("No accelerator found (jax.default_backend() is 'cpu'): JAX mixed-precision "
          "benchmark skipped (--cpu runs it on the CPU).")
CONTENDERS = ("pseudo_fp16", "split", "reverse", "keras_mixed", "fp32")
DTYPES = ("float16", "bfloat16")

SIZES = {
    "gpu": dict(configs=[(m, d) for m in MODELS for d in DTYPES],
                mlp=dict(width=4096, depth=4, batch=1024),
                transformer=dict(seq=512, d_model=1024, heads=16, batch=32),
                resnet=dict(image=32, channels=64, blocks=2, batch=256),
                repeats=21, warmup=2, steps=10,
                budget_s=360),  # no new model/dtype starts after 6 minutes
    # not ("transformer", "float16"): on the CPU, jax's dot_general refuses the float16
    # attention of Keras's MultiHeadAttention under mixed_float16 itself ("The precision
    # 'F16_F16_F32' is not supported by dot_general on CPU"), so there is no baseline
    "cpu": dict(configs=[(m, d) for m in MODELS for d in DTYPES
                         if (m, d) != ("transformer", "float16")],
                mlp=dict(width=512, depth=4, batch=128),
                transformer=dict(seq=64, d_model=128, heads=4, batch=16),
                resnet=dict(image=32, channels=16, blocks=1, batch=32),
                repeats=21, warmup=1, steps=4),
    # --allow-cpu (the tests): two models, both dtypes; the ResNet's compile costs ~4x theirs
    "smoke": dict(configs=[("mlp", "float16"), ("transformer", "bfloat16")],
                  mlp=dict(width=16, depth=2, batch=8),
                  transformer=dict(seq=4, d_model=8, heads=2, batch=2),
                  resnet=dict(image=8, channels=4, blocks=1, batch=2),
                  repeats=3, warmup=1, steps=1),
}


def contenders(dtype):
    """The contenders of a ``dtype`` row: ``master="split"`` exists for bfloat16 only."""
    return tuple(c for c in CONTENDERS if c != "split" or dtype == "bfloat16")


def accelerated():
    """Whether jax's default device is not the CPU."""
    return jax.default_backend() != "cpu"


def build(contender, model_name, dtype, s):
    """The model of ``contender`` for ``model_name`` in ``dtype``, compiled (Adam, mse).

    Not seeded: ``keras.utils.set_random_seed`` imports TensorFlow where it is installed;
    the initial values do not change what a step costs."""
    from tfinit import mixed_precision as mp

    make = MODELS[model_name]
    if contender == "split":
        with mp.scope("pseudo_fp16", compute_dtype=dtype, master="split"):
            model = make(s[model_name])
    elif contender in ("pseudo_fp16", "reverse"):
        with mp.scope(contender, compute_dtype=dtype):
            model = make(s[model_name])
    else:
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy("float32" if contender == "fp32" else f"mixed_{dtype}")
        try:
            model = make(s[model_name])
        finally:
            keras.config.set_dtype_policy(previous)
    # compile wraps Adam: MasterWeightOptimizer (tfinit), LossScaleOptimizer (mixed_float16)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def _variables(model):
    """The variables ``fit``'s step carries, as Keras's JAX trainer lists its state."""
    return ([*model.trainable_variables], [*model.non_trainable_variables],
            [*model.optimizer.variables], [*model.metrics_variables])


class Step:
    """One contender: its model, the compiled ``fit`` step and the state it threads."""

    def __init__(self, contender, model_name, dtype, s):
        start = time.perf_counter()
        self.model = model = build(contender, model_name, dtype, s)
        model.optimizer.build(model.trainable_variables)  # pairs, masters, slots, scale
        groups = _variables(model)
        self.params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        self.memory = _persistent_bytes(groups, self.params)
        rng = np.random.default_rng(0)
        batch = s[model_name]["batch"]
        x = rng.standard_normal((batch, *model.input_shape[1:]), dtype=np.float32)
        y = 0.1 * rng.standard_normal((batch, *model.output_shape[1:]), dtype=np.float32)
        self.data = (jax.device_put(x), jax.device_put(y))
        self.state = tuple([v.value for v in group] for group in groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "donated buffers were not usable" (CPU)
            self.compiled = jax.jit(model.train_step, donate_argnums=0).lower(
                self.state, self.data).compile()
        stats = self.compiled.memory_analysis()
        self.step_mib = None if stats is None else round(
            (stats.argument_size_in_bytes + stats.output_size_in_bytes
             - stats.alias_size_in_bytes + stats.temp_size_in_bytes) / 2**20, 3)
        self.build_s = round(time.perf_counter() - start, 2)  # model, optimizer, compile
        self.loss = self.run(1)[1]
        if not math.isfinite(self.loss):
            raise RuntimeError(f"{contender} {model_name} {dtype}: non-finite loss {self.loss}")

    def run(self, steps):
        """``steps`` chained steps until the state is ready: (seconds, last loss)."""
        start = time.perf_counter()
        for _ in range(steps):
            logs, self.state = self.compiled(self.state, self.data)
        jax.block_until_ready(self.state)
        return time.perf_counter() - start, float(logs["loss"])


def _persistent_bytes(groups, params):
    """Bytes per parameter of the non-scalar arrays of ``groups`` (each variable once), and
    the bytes of the scalars."""
    seen, tensor_bytes, scalar_bytes = set(), 0, 0
    for variable in (v for group in groups for v in group):
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        value = variable.value
        if value.ndim:
            tensor_bytes += value.nbytes
        else:
            scalar_bytes += value.nbytes
    return {"bytes_per_param": round(tensor_bytes / params, 3), "scalar_bytes": scalar_bytes}


def _ratio(times, label, base):
    ratios = [a / b for a, b in zip(times[label], times[base], strict=True)]
    low, high = median_ci95(ratios)
    return round(statistics.median(ratios), 3), [round(low, 3), round(high, 3)]


def compare_config(model_name, dtype, s):
    """One row per contender of ``dtype`` for ``model_name``."""
    steps = {c: Step(c, model_name, dtype, s) for c in contenders(dtype)}
    times = {c: [] for c in steps}

    def timed(label):
        def sample():
            seconds = steps[label].run(s["steps"])[0]
            times[label].append(seconds)
            return seconds
        return sample

    runs = {c: timed(c) for c in steps}
    start = time.perf_counter()
    compare(model_name, runs.pop("pseudo_fp16"), runs.pop("keras_mixed"), s["repeats"],
            warmup=s["warmup"], others=runs, self_timed=True)
    wall = round(time.perf_counter() - start, 2)
    for label in times:  # the warm-up samples are not rounds
        del times[label][:s["warmup"]]
    rows = []
    for c in steps:
        ratio, ci95 = _ratio(times, c, "keras_mixed")
        rows.append({
            "model": model_name, "dtype": dtype, "contender": c,
            "params": steps[c].params,
            "ms_per_step": round(statistics.median(times[c]) / s["steps"] * 1e3, 3),
            "ratio": ratio, "ratio_ci95": ci95,
            "vs_fp32": _ratio(times, c, "fp32")[0],
            **steps[c].memory,
            "step_mib": steps[c].step_mib,
            "timing_wall_s": wall,
            "build_s": steps[c].build_s,
        })
    return rows


def _peak_mib():
    stats = jax.devices()[0].memory_stats() if accelerated() else None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return round(stats["peak_bytes_in_use"] / 2**20, 1)


def machine(sizes):
    device = jax.devices()[0]
    return {
        "device": getattr(device, "device_kind", str(device)) if accelerated()
        else f"CPU ({os.cpu_count()} cores)",
        "jax_devices": [str(d) for d in jax.devices()],
        "sizes": sizes,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
    }


def run(sizes):
    """The results (machine, sizes, rows, wall time) at ``SIZES[sizes]``."""
    s = SIZES[sizes]
    start = time.perf_counter()
    results = {"machine": machine(sizes), "sizes": s, "rows": [], "skipped": []}
    for model_name, dtype in s["configs"]:
        if time.perf_counter() - start > s.get("budget_s", math.inf):
            # the GPU run must end within 8 minutes: what the budget leaves out is listed
            results["skipped"].append(f"{model_name} {dtype}: over the {s['budget_s']} s budget")
            continue
        results["rows"].extend(compare_config(model_name, dtype, s))
    results["machine"]["device_peak_mib"] = _peak_mib()
    results["machine"]["wall_s"] = round(time.perf_counter() - start, 1)
    # True would mean something on this path needs TensorFlow: none of it should
    results["machine"]["tensorflow_imported"] = "tensorflow" in sys.modules
    return results


def render(results):
    """The Markdown of ``results``."""
    m, s = results["machine"], results["sizes"]
    shapes = "; ".join(f"{name} {s[name]}" for name in MODELS)
    peak = "" if m["device_peak_mib"] is None else \
        f" Device peak over the run: {m['device_peak_mib']} MiB."
    head = (f"# fp32 masters on Keras's JAX backend ({m['sizes']} sizes)\n\n"
            f"Device: {m['device']}; jax {m['jax']}, Keras {m['keras']}, Python {m['python']}; "
            f"{m['date']}; load average at start {m['load_average'][0]}; TensorFlow imported: "
            f"{m['tensorflow_imported']}; {m['wall_s']} s. Sizes: {shapes}. Adam, fit's "
            f"compiled step, {s['steps']} steps per sample, {s['repeats']} interleaved rounds; "
            "ratio = contender / Keras mixed (median of per-round ratios, 95 % interval), "
            f"vs_fp32 likewise.{peak}")
    skipped = "".join(f"\n\nNot run: {line}." for line in results["skipped"])
    return f"{head}{skipped}\n\n{to_markdown(results['rows'])}\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="KERAS_BACKEND=jax python -m benchmarks.mixed_jax",
                                     description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cpu", action="store_true", help="the CPU sizes, on the CPU")
    where.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="folder for results_mixed_jax_<sizes>.json/.md "
                        "(default: benchmarks/; smoke figures only where --out says)")
    args = parser.parse_args(argv)
    if keras.backend.backend() != "jax" or jax is None:
        print(NOT_JAX.format(backend=keras.backend.backend()))
        return 0
    if args.cpu:
        sizes = "cpu"
    elif accelerated():
        sizes = "gpu"
    elif args.allow_cpu:
        sizes = "smoke"
    else:
        print(NO_GPU)
        return 0
    results = run(sizes)
    text = render(results)
    print(text)
    if args.out is None and sizes == "smoke":
        print("--allow-cpu without --out: nothing written.")
        return 0
    write_results(args.out or HERE, f"results_mixed_jax_{sizes}", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

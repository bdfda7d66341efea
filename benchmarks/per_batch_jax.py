"""``KERAS_BACKEND=jax python -m benchmarks.per_batch_jax``: Keras's per-batch calls and ``fit``
on JAX, with fp32 and split masters, against Keras's ``mixed_bfloat16`` (no TensorFlow needed).

A per-batch call (``train_on_batch``, ``test_on_batch``, ``predict_on_batch``) runs Keras's
compiled step, then writes the step's values back into every model variable (Keras's JAX
state sync): on a small model that write-back, not the step, is most of a call, and it is
where a paired variable could cost more than Keras's plain one. ``fit`` (one epoch) writes
back once per epoch.

Contenders, each compiled with Adam (1e-3, mean squared error), the same model
(``benchmarks._models``' transformer block, small, as the tiny GPT2 of the keras-hub guide):
``keras_mixed`` (the baseline, Keras's ``mixed_bfloat16``), ``fp32`` (``pseudo_fp16``
bfloat16 with fp32 masters) and ``split`` (``master="split"``). One sample = ``calls`` calls
in a row (each returns numpy, so the device's work is counted); rounds are interleaved, every
round running every contender once, the order rotating; ``ms_per_call`` is the median sample
/ ``calls``, ``ratio`` = contender / ``keras_mixed``, the median of the per-round ratios with
its distribution-free 95 % interval.

``--cpu`` (default): the CPU sizes, the figures in docs/performance.md, written to
``benchmarks/results_per_batch_jax_cpu.*``; ``--smoke`` (the tests): tiny sizes and few
rounds, figures meaningless, written only where ``--out`` says. On another Keras backend it
prints ``NOT_JAX`` and exits 0.
"""

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np

from benchmarks import mixed_jax
from benchmarks._markdown import to_markdown, write_results
from benchmarks._timing import median_ci95

HERE = Path(__file__).resolve().parent
CONTENDERS = {"keras_mixed": "keras_mixed", "fp32": "pseudo_fp16", "split": "split"}
CALLS = ("train_on_batch", "test_on_batch", "predict_on_batch", "fit")
SIZES = {
    "cpu": dict(transformer=dict(seq=16, d_model=32, heads=2, batch=4),
                calls=8, repeats=15, warmup=2),
    "smoke": dict(transformer=dict(seq=4, d_model=8, heads=2, batch=2),
                  calls=2, repeats=3, warmup=1),
}


class Contender:
    """One contender's compiled model and its batch."""

    def __init__(self, name, s):
        self.model = mixed_jax.build(CONTENDERS[name], "transformer", "bfloat16", s)
        rng = np.random.default_rng(0)
        batch = s["transformer"]["batch"]
        self.x = rng.standard_normal((batch, *self.model.input_shape[1:]), dtype=np.float32)
        self.y = 0.1 * rng.standard_normal((batch, *self.model.output_shape[1:]),
                                           dtype=np.float32)
        self.calls = s["calls"]
        self.fit_x, self.fit_y = (np.concatenate([a] * self.calls) for a in (self.x, self.y))

    def run(self, call):
        """Seconds of ``calls`` calls of ``call`` (``fit``: one epoch of ``calls`` batches)."""
        model, x, y = self.model, self.x, self.y
        start = time.perf_counter()
        if call == "fit":
            model.fit(self.fit_x, self.fit_y, batch_size=len(x), epochs=1, verbose=0,
                      shuffle=False)
        for _ in range(0 if call == "fit" else self.calls):
            if call == "train_on_batch":
                model.train_on_batch(x, y)
            elif call == "test_on_batch":
                model.test_on_batch(x, y)
            else:
                model.predict_on_batch(x)
        return time.perf_counter() - start


def compare_call(contenders, call, s):
    """One row per contender for ``call``: interleaved rounds, the order rotating."""
    names = list(contenders)
    times = {name: [] for name in names}
    for i in range(s["warmup"] + s["repeats"]):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = contenders[name].run(call)
            if i >= s["warmup"]:
                times[name].append(seconds)
    rows = []
    for name in names:
        ratios = [a / b for a, b in zip(times[name], times["keras_mixed"], strict=True)]
        low, high = median_ci95(ratios)
        rows.append({"call": call, "contender": name,
                     "ms_per_call": round(statistics.median(times[name]) / s["calls"] * 1e3, 3),
                     "ratio": round(statistics.median(ratios), 3),
                     "ratio_ci95": [round(low, 3), round(high, 3)]})
    return rows


def run(sizes):
    """The results (machine, sizes, rows) at ``SIZES[sizes]``."""
    s = SIZES[sizes]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "donated buffers were not usable" (CPU)
        contenders = {name: Contender(name, s) for name in CONTENDERS}
        rows = [row for call in CALLS for row in compare_call(contenders, call, s)]
    m = mixed_jax.machine(sizes)
    m["wall_s"] = round(time.perf_counter() - start, 1)
    m["tensorflow_imported"] = "tensorflow" in sys.modules
    return {"machine": m, "sizes": s, "rows": rows}


def render(results):
    """The Markdown of ``results``."""
    m, s = results["machine"], results["sizes"]
    head = (f"# Per-batch calls on Keras's JAX backend ({m['sizes']} sizes)\n\n"
            f"Device: {m['device']}; jax {m['jax']}, Keras {m['keras']}, Python {m['python']}; "
            f"{m['date']}; load average at start {m['load_average'][0]}; {m['wall_s']} s. "
            f"Transformer block {s['transformer']}, Adam, bfloat16; {s['calls']} calls per "
            f"sample (fit: one epoch of {s['calls']} batches), {s['repeats']} interleaved "
            "rounds; ratio = contender / Keras mixed_bfloat16 (median of per-round ratios, "
            "95 % interval).")
    return f"{head}\n\n{to_markdown(results['rows'])}\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="KERAS_BACKEND=jax python -m benchmarks.per_batch_jax",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="folder for results_per_batch_jax_<sizes>."
                        "json/.md (default: benchmarks/; smoke figures only where --out says)")
    args = parser.parse_args(argv)
    if keras.backend.backend() != "jax" or mixed_jax.jax is None:
        print(mixed_jax.NOT_JAX.format(backend=keras.backend.backend()).replace(
            "mixed_jax", "per_batch_jax"))
        return 0
    sizes = "smoke" if args.smoke else "cpu"
    results = run(sizes)
    text = render(results)
    print(text)
    if args.out is None and sizes == "smoke":
        print("--smoke without --out: nothing written.")
        return 0
    write_results(args.out or HERE, f"results_per_batch_jax_{sizes}", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

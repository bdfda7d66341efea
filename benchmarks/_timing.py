"""Interleaved timing: the contenders run in turn, medians are compared."""

import math
import statistics
import time


def median_ci95(values):
    """A distribution-free 95 % confidence interval of the median of ``values``.

    The order statistics at ranks n/2 -+ 0.98 sqrt(n) (the binomial(n, 1/2) interval,
    normal approximation): no assumption about how the machine's noise is distributed.
    """
    ordered = sorted(values)
    n = len(ordered)
    half_width = 0.98 * math.sqrt(n)
    low = max(0, math.floor(n / 2 - half_width))
    high = min(n - 1, math.ceil(n / 2 + half_width) - 1)
    return ordered[low], ordered[high]


def compare(name, ours, baseline, repeats, warmup=1, others=None, self_timed=False, **extra):
    """Median wall time of ``ours()`` and ``baseline()`` run in turn, and their ratio.

    ``self_timed``: each call returns the seconds to count itself (e.g. the steady-state
    steps inside a ``fit`` call, without the epoch's setup); otherwise the call is timed.

    ``ratio`` is the median over rounds of ours/baseline within the round: each round runs
    every contender once, back to back, so a change of machine load between rounds (the
    machine may be shared) cancels out of the ratio.

    ``others`` (label -> callable) are interleaved too and reported as ``<label>_ms`` and
    ``ratio_vs_<label>``. The running order rotates every round, so no contender always runs
    first (after the others have warmed the caches) or last.
    """
    contenders = [("ours", ours), ("baseline", baseline), *(others or {}).items()]
    for _ in range(warmup):
        for _, fn in contenders:
            fn()
    times = {label: [] for label, _ in contenders}
    for i in range(repeats):
        shift = i % len(contenders)
        order = contenders[shift:] + contenders[:shift]
        if (i // len(contenders)) % 2:
            order = order[::-1]
        for label, fn in order:
            start = time.perf_counter()
            counted = fn()
            times[label].append(counted if self_timed else time.perf_counter() - start)
    median = {label: statistics.median(t) for label, t in times.items()}

    def ratios(label):
        return [o / b for o, b in zip(times["ours"], times[label], strict=True)]

    def paired_ratio(label):
        return round(statistics.median(ratios(label)), 3)

    q1, _, q3 = statistics.quantiles(ratios("baseline"), n=4, method="inclusive")
    ci_low, ci_high = median_ci95(ratios("baseline"))
    row = {
        "name": name,
        "ours_ms": round(median["ours"] * 1e3, 3),
        "baseline_ms": round(median["baseline"] * 1e3, 3),
        "ratio": paired_ratio("baseline"),
        # the middle half of the per-round ratios: how much the machine's noise moves them
        "ratio_iqr": [round(q1, 3), round(q3, 3)],
        # where the median ratio itself lies, 95 % of the time: how far to trust it
        "ratio_ci95": [round(ci_low, 3), round(ci_high, 3)],
    }
    for label in others or {}:
        row[f"{label}_ms"] = round(median[label] * 1e3, 3)
        row[f"ratio_vs_{label}"] = paired_ratio(label)
    row["repeats"] = repeats
    row.update(extra)
    return row


def disable_cpu_remapping():
    """Turn off Grappler's remapper when there is no GPU; returns whether it did.

    On this CPU (TF 2.21, oneDNN) the remapper fuses a float16 MatMul + BiasAdd into one
    ``_FusedMatMul`` that runs ~100x slower than the two ops apart (1.5 vs 100-146 ms for
    64x256 @ 256x256): both tfinit and Keras hit it, and it would swamp every difference
    the float16 comparisons are meant to show. See FINDINGS.md.
    """
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return False
    tf.config.optimizer.set_experimental_options({"remapping": False})
    return True

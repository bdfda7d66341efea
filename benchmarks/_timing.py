"""Interleaved timing: both contenders run alternately, medians are compared."""

import statistics
import time


def compare(name, ours, baseline, repeats, warmup=1, **extra):
    """Median wall time of ``ours()`` and ``baseline()`` run alternately; ratio ours/baseline."""
    for _ in range(warmup):
        ours()
        baseline()
    times = {"ours": [], "baseline": []}
    for i in range(repeats):
        pair = [("ours", ours), ("baseline", baseline)]
        for label, fn in pair if i % 2 == 0 else pair[::-1]:
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    ours_s = statistics.median(times["ours"])
    base_s = statistics.median(times["baseline"])
    return {
        "name": name,
        "ours_ms": round(ours_s * 1e3, 3),
        "baseline_ms": round(base_s * 1e3, 3),
        "ratio": round(ours_s / base_s, 3),
        "repeats": repeats,
        **extra,
    }

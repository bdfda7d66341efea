"""Child process: peak memory of loading one large float32 parameter one way.

``python -m benchmarks._load_peak METHOD COUNT`` prints one JSON line with the array's
bytes, the resident set size just before the load and the peak after it. Run in a fresh
process so that nothing else shares the peak.

The peak is Linux's ``VmHWM``, reset to the current RSS just before the load (``5`` written
to ``/proc/self/clear_refs``), so it is the load's own peak. ``ru_maxrss`` cannot be reset
and keeps the parent's high-water mark across fork and exec, so where the reset is not
available ``ru_maxrss`` is used and the figure is only exact when the load sets a new peak.
"""

import gc
import json
import os
import resource
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfinit  # noqa: E402


def _external(array):
    from tfinit.initializers import ExternalInitializer

    info = ExternalInitializer({"w": array}).create_param(param_name="w", shape=array.shape)
    return info.param


METHODS = {
    "tf.Variable(array)": lambda array: tf.Variable(array),
    "GivenTensorFill": lambda array: keras.Variable(
        tfinit.GivenTensorFill(array), shape=array.shape, dtype="float32"),
    "ExternalInitializer": _external,
}


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def main(method, count):
    load = METHODS[method]
    load(np.zeros(16, np.float32))  # first-use costs (kernels, allocator) outside the window
    array = np.random.default_rng(0).standard_normal(count, dtype=np.float32)
    gc.collect()
    reset = _reset_peak()
    rss, peak = _rss(), _peak()
    kept = load(array)
    after = _peak()
    assert kept is not None
    print(json.dumps({"method": method, "array_bytes": array.nbytes, "rss_before": rss,
                      "peak_before": peak, "peak_after": after, "peak_reset": reset}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

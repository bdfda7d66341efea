"""Speed of rng="caffe2" against the default (Keras) generator.

Fills a 1024x1024 float32 weight with XavierFill and GaussianFill, alternating the
two generators run by run, and prints the median time of each and their ratio.
Run: ``PYTHONPATH=. python benchmarks/caffe2_rng.py [repeats]``.
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

import tfinit  # noqa: E402

SHAPE = (1024, 1024)


def _seconds(init):
    start = time.perf_counter()
    keras.ops.convert_to_numpy(init(SHAPE))  # values on the host, as the replay gives them
    return time.perf_counter() - start


def main(repeats=15):
    print(f"backend {keras.backend.backend()}, shape {SHAPE}, median of {repeats} interleaved runs")
    for name, cls in (("XavierFill", tfinit.XavierFill), ("GaussianFill", tfinit.GaussianFill)):
        inits = {rng: cls(seed=1, rng=rng) for rng in ("keras", "caffe2")}
        for init in inits.values():  # warm-up (tracing, first allocation)
            _seconds(init)
        times = {rng: [] for rng in inits}
        for _ in range(repeats):
            for rng, init in inits.items():
                times[rng].append(_seconds(init))
        keras_ms = statistics.median(times["keras"]) * 1e3
        caffe2_ms = statistics.median(times["caffe2"]) * 1e3
        print(
            f"{name:13s} keras {keras_ms:7.2f} ms   caffe2 {caffe2_ms:7.2f} ms   "
            f"caffe2/keras {caffe2_ms / keras_ms:5.2f}x"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)

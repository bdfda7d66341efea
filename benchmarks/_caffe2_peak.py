"""Child process: peak memory of ``load_init_net(PATH)``.

``python -m benchmarks._caffe2_peak PATH`` prints one JSON line: the resident set size just
before the load, the peak after it (Linux's ``VmHWM``, reset just before the load, as in
``benchmarks._load_peak``) and the load's seconds. The arrays stay alive until the peak is
read, as a caller that keeps them would.
"""

import gc
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchmarks._load_peak import _peak, _reset_peak, _rss  # noqa: E402
from tfinit.caffe2 import load_init_net  # noqa: E402


def main(path):
    load_init_net(_tiny())  # first-use costs (imports, TensorFlow start) outside the window
    gc.collect()
    reset = _reset_peak()
    rss, peak = _rss(), _peak()
    start = time.perf_counter()
    blobs = load_init_net(path)
    seconds = time.perf_counter() - start
    after = _peak()
    values = sum(int(a.size) for a in blobs.values())
    print(json.dumps({"rss_before": rss, "peak_before": peak, "peak_after": after,
                      "peak_reset": reset, "values": values, "seconds": seconds}))


def _tiny():
    from tfinit.caffe2 import NetDef, Operator

    return NetDef(ops=[Operator("GivenTensorFill", (), ("w",),
                                {"shape": [2], "values": [1.0, 2.0]})])


if __name__ == "__main__":
    main(sys.argv[1])

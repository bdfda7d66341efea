"""Worker for tests/test_caffe2_opcases.py: converts and runs Caffe2 single-op cases.

Run as a subprocess (``python tests/_caffe2_opcases_worker.py``): it reads one case id a
line on stdin, converts that case's nets with ``to_keras``, runs the model on the input
Caffe2 was fed, and writes one JSON line on stdout:
``{"id", "status": "computed"|"refused"|"error", "message", "match", "detail"}``.
A converted net that kills the process (SIGFPE, abort) kills only this worker; the test
restarts it and blames the case it was running. Data: tests/data/caffe2_opcases/.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "caffe2_opcases"


def compare(expected, actual):
    """``(ok, detail)``: ``actual`` against Caffe2's ``expected`` output.

    Floats: within ``1e-5 * max(1, max|expected|)`` where Caffe2 is finite, the same NaN
    and inf where it is not; integers exactly; the shapes equal.
    """
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return False, f"shape {list(actual.shape)}, Caffe2 {list(expected.shape)}"
    if expected.dtype.kind in "iub":
        bad = int(np.sum(actual != expected))
        return bad == 0, f"{bad} integers differ"
    expected = expected.astype(np.float64)
    actual = actual.astype(np.float64)
    finite = np.isfinite(expected)
    special = ~finite
    if np.any(np.isnan(expected[special]) != np.isnan(actual[special])) or np.any(
            expected[special & ~np.isnan(expected)] != actual[special & ~np.isnan(expected)]):
        return False, "NaN/inf where Caffe2 has other values"
    if not finite.any():
        return True, "all non-finite, equal"
    scale = max(1.0, float(np.max(np.abs(expected[finite]))))
    with np.errstate(invalid="ignore"):
        err = np.abs(actual[finite] - expected[finite])
    err = np.where(np.isnan(err), np.inf, err)
    worst = float(np.max(err))
    return worst <= 1e-5 * scale, f"max error {worst:.3g} (tolerance {1e-5 * scale:.3g})"


def run_case(case, arrays):
    from tfinit.caffe2 import to_keras

    cid = case["id"]
    inputs = {blob: arrays[f"{cid}/input/{blob}"] for blob in case["data"]}
    shapes = {blob: tuple(x.shape[1:]) for blob, x in inputs.items()}
    try:
        model = to_keras(arrays[f"{cid}/predict_net"].tobytes(),
                         arrays[f"{cid}/init_net"].tobytes(),
                         shapes if len(shapes) != 1 else next(iter(shapes.values())),
                         outputs=[blob for blob in case["outputs"]
                                  if f"{cid}/blob/{blob}" in arrays] or None)
        results = model(inputs if len(inputs) > 1 else next(iter(inputs.values())))
    except ValueError as err:
        return {"status": "refused", "message": str(err)}
    except Exception as err:  # noqa: BLE001 - reported, judged by the test
        return {"status": "error", "message": f"{type(err).__name__}: {err}"}
    if not isinstance(results, (list, tuple)):
        results = [results]
    if case["caffe2"] != "ok":
        return {"status": "computed", "match": False, "detail": "Caffe2 refused this net"}
    details, ok = [], True
    written = [blob for blob in case["outputs"] if f"{cid}/blob/{blob}" in arrays]
    for blob, y in zip(written, results):
        good, detail = compare(arrays[f"{cid}/blob/{blob}"], np.asarray(y))
        ok &= good
        details.append(f"{blob}: {detail}")
    return {"status": "computed", "match": bool(ok), "detail": "; ".join(details)}


def main():
    cases = {c["id"]: c for c in json.loads((DATA / "cases.json").read_text())["cases"]}
    arrays = np.load(DATA / "cases.npz")
    arrays = {k: arrays[k] for k in arrays.files}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cid = line.strip()
        if not cid:
            continue
        result = run_case(cases[cid], arrays)
        result["id"] = cid
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

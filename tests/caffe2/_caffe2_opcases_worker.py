"""Worker for tests/caffe2/test_caffe2_opcases.py: converts and runs Caffe2 single-op cases.

Run as a subprocess (``python tests/caffe2/_caffe2_opcases_worker.py``): it reads one case id a
line on stdin, converts that case's nets with ``to_keras`` (with the case's
``input_format``, if any), runs the model on the input Caffe2 was fed, and writes one JSON
line on stdout:
``{"id", "status": "computed"|"refused"|"error", "message", "match", "detail"}``.
A converted net that kills the process (SIGFPE, abort) kills only this worker; the test
restarts it and blames the case it was running. Data: tests/data/caffe2_opcases/ (single
ops) and tests/data/caffe2_netcases/ (nets of several ops).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
SETS = ("caffe2_opcases", "caffe2_netcases")
# input_format that differs from the net's order: the 4-D arrays' axes as the model takes them
_TO_MODEL = {"channels_last": (0, 2, 3, 1), "channels_first": (0, 3, 1, 2)}
_FROM_MODEL = {"channels_last": (0, 3, 1, 2), "channels_first": (0, 2, 3, 1)}


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


def _layout(x, case, table):
    form = case.get("input_format")
    return np.transpose(x, table[form]) if form and np.ndim(x) == 4 else x


def run_case(case, arrays):
    from tfinit.caffe2 import to_keras

    files = case.get("files", case["id"])  # an input_format case reuses a net's arrays
    inputs = {blob: _layout(arrays[f"{files}/input/{blob}"], case, _TO_MODEL)
              for blob in case["data"]}
    shapes = {blob: tuple(x.shape[1:]) for blob, x in inputs.items()}
    written = [blob for blob in case["outputs"] if f"{files}/blob/{blob}" in arrays]
    try:
        model = to_keras(arrays[f"{files}/predict_net"].tobytes(),
                         arrays[f"{files}/init_net"].tobytes(),
                         shapes if len(shapes) != 1 else next(iter(shapes.values())),
                         outputs=written or None, input_format=case.get("input_format"))
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
    for blob, y in zip(written, results, strict=True):
        good, detail = compare(arrays[f"{files}/blob/{blob}"],
                               _layout(np.asarray(y), case, _FROM_MODEL))
        ok &= good
        details.append(f"{blob}: {detail}")
    return {"status": "computed", "match": bool(ok), "detail": "; ".join(details)}


def main():
    cases, arrays = {}, {}
    for name in SETS:
        cases.update({c["id"]: c for c in json.loads(
            (DATA / name / "cases.json").read_text())["cases"]})
        with np.load(DATA / name / "cases.npz") as stored:
            arrays.update({k: stored[k] for k in stored.files})
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

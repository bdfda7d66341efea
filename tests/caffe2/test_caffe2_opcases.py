"""Differential test: Caffe2 nets the real Caffe2 ran, against to_keras.

tests/data/caffe2_opcases/ holds 481 nets of one op each (random over the arguments
docs/caffe2-ops.md says are converted, plus minimal cases of every rule where tfinit and
Caffe2 were seen to differ); tests/data/caffe2_netcases/ 39 nets of several ops (a Conv in
NHWC feeding an FC, Caffe's conv/BN/Scale block in both orders, branches through Concat,
LRN, ChannelShuffle, Split and Sum, Reshape/Flatten before FCs, random Conv/pool/BN/Scale
chains) and 5 of them again through the other ``input_format``. Each holds the inputs
Caffe2 was fed and what it wrote, or its refusal (and, for a net, the op that refused).
Each case must:

* where Caffe2 ran it: match within ``1e-5 * max(1, max|y_caffe2|)`` per output (the same
  NaN/inf, integers exactly), or be refused with a ValueError naming an op type or argument
  that docs/caffe2-ops.md lists as not converted (``DOCUMENTED_REFUSALS``);
* where Caffe2 refused it: be refused with a ValueError naming the op (for a net of several
  ops: ``op #k Type``, the op Caffe2 refused).

The nets are converted and run in one worker subprocess (tests/caffe2/_caffe2_opcases_worker.py),
so that a net crashing the process fails its own case only: the worker is restarted and
the crash is blamed on the case it was running.
"""

import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading

import pytest

from conftest import REPO

CASES = {c["id"]: c for name in ("caffe2_opcases", "caffe2_netcases") for c in json.loads(
    (REPO / "tests" / "data" / name / "cases.json").read_text())["cases"]}
WORKER = REPO / "tests" / "caffe2" / "_caffe2_opcases_worker.py"
CASE_TIMEOUT_S = 120  # one case (the first includes importing TensorFlow)
# A floor on the cases that match Caffe2 (outcome "match"), so that a match cannot silently
# turn into a documented refusal: the count of a run (tensorflow 2.21, Keras 3.15).
MIN_MATCHING = 418

# Refusals docs/caffe2-ops.md lists: (pattern in the message, phrase the docs must hold).
DOCUMENTED_REFUSALS = [
    (r"unsupported Caffe2 op\(s\).*: (Transpose|Sub|Div|LeakyRelu|PRelu|Clip|"
     r"Scale|Squeeze|AveragedLoss|FCTransposed) \(op #0",
     "| anything else | — | — | refused by type"),
    (r"SpatialBN in training mode \(is_test=0\)", "Training mode (`is_test=0`) is refused"),
    (r"AveragePool with count_include_pad=1", "`count_include_pad=1`"),
    (r"legacy_pad=[12] \((VALID|SAME)\) on (MaxPool|AveragePool)",
     "`legacy_pad` 1 (`VALID`) and 2 (`SAME`) are refused"),
    (r"legacy_pad=\d \(\w+\) on Conv", "as is any `legacy_pad` on Conv"),
    (r"(Max|Average)Pool with dilation", "| `legacy_pad` 1/2, `count_include_pad=1`, dilation |"),
    (r"Concat with add_axis", "`Caffe2RowConcat` | `axis`, `order` | `add_axis` |"),
    (r"Split with add_axis", "sizes along the batch axis, `add_axis` |"),
    (r"Split along the batch axis \(axis=0\) with sizes",
     "sizes along the batch axis, `add_axis` |"),
    (r"Flatten with axis other than 1", "| Flatten | Flatten | `axis=1` | other `axis` |"),
    (r"(FC|Softmax) (with axis=0|over axis 0)", "`axis=0`"),
    (r"LRN.*argument `size` must be a positive odd int", "| `size`, `alpha`, `beta`, `bias`, "
     "`order` | even `size` |"),
    (r"Conv that is not 2-D", "non-2-D kernels"),
    (r"legacy_pad=3 with a last window outside the input",
     "a window lying wholly outside the input (possible only with `p = 0` and `s > k`) is "
     "refused"),
    (r"(Add|Mul) with broadcast=\d+ \(0 and 1 are converted\)",
     "`broadcast` other than 0/1"),
    (r"parameter '\w+' of shape .* does not broadcast to .* without changing it or spanning "
     r"the batch axis", "The parameter must not span the batch axis nor make `A` larger"),
    (r"(Add|Mul) (with broadcast=1 of a second data input placed at axis [1-9]|of data "
     r"inputs of ranks)", "A second data input whose first axis would meet another axis"),
    (r"Sum of init-net blob", "Sum with an input the init net fills is refused"),
    (r"Dropout's mask, not converted", "Dropout's second output (its mask) is not converted"),
    (r"Sum with broadcast=1", "| Sum | Add | — | different shapes, `broadcast`, an init-net "
     "input |"),
]

def _start():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
        TF_CPP_MIN_LOG_LEVEL="3")
    errors = tempfile.TemporaryFile("w+")  # what a dying worker said, for its message
    proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=errors, text=True, env=env,
                            cwd=REPO)
    proc.errors = errors
    lines = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _answer(lines, proc):
    try:
        line = lines.get(timeout=CASE_TIMEOUT_S)
    except queue.Empty:
        proc.kill()
        return {"status": "crash", "message": f"no answer within {CASE_TIMEOUT_S} s"}
    if line is None:
        proc.wait()
        proc.errors.seek(0)
        said = proc.errors.read()[-600:]
        return {"status": "crash", "message": f"the worker died (exit {proc.returncode}): "
                                              f"{said}"}
    return json.loads(line)


def run_cases(ids):
    """``{case id: the worker's result}``; a worker that dies is restarted."""
    results, proc = {}, None
    for cid in ids:
        if proc is None:
            proc, lines = _start()
            ready = _answer(lines, proc)
            if not ready.get("ready"):
                raise RuntimeError(f"the opcase worker did not start: {ready}")
        proc.stdin.write(cid + "\n")
        proc.stdin.flush()
        results[cid] = _answer(lines, proc)
        if results[cid]["status"] == "crash":
            _stop(proc, kill=True)
            proc = None
    if proc is not None:
        _stop(proc)
    return results


def _stop(proc, kill=False):
    if kill:
        proc.kill()
    else:
        proc.stdin.close()
    proc.wait()
    proc.errors.close()


def documented(message):
    """The docs phrase of the documented refusal ``message`` matches, or None."""
    for pattern, phrase in DOCUMENTED_REFUSALS:
        if re.search(pattern, message):
            return phrase
    return None


def classify(case, result):
    """``(outcome, passed, explanation)`` of one case's worker ``result``."""
    status, message = result["status"], result.get("message", "")
    if status == "crash":
        return "crash", False, message
    if status == "error":
        return "other error", False, message
    if case["caffe2"] != "ok":
        if status == "computed":
            return "Caffe2 refuses, tfinit computes", False, (
                f"Caffe2 refused it ({case['caffe2_error'][:200]}); the model computed")
        where = (rf"op #{case['failed_index']} {case['op']}\b"
                 if case.get("failed_index") is not None else rf"\b{re.escape(case['op'])}\b")
        return "both refuse", re.search(where, message) is not None, message
    if status == "computed":
        if result["match"]:
            return "match", True, result["detail"]
        return "silent wrong", False, result["detail"]
    if documented(message):
        return "refused as documented", True, message
    return "docs say converts, refused", False, message


@pytest.fixture(scope="module")
def results(request):
    """The worker's result for every case this session runs."""
    wanted = [item.callspec.params["case_id"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")
              and "case_id" in item.callspec.params]
    return run_cases(wanted)


def test_documented_refusals_are_in_the_docs():
    docs = " ".join((REPO / "docs" / "caffe2-ops.md").read_text().split())
    missing = [phrase for _, phrase in DOCUMENTED_REFUSALS if " ".join(phrase.split()) not in docs]
    assert not missing


@pytest.mark.slow  # one worker subprocess runs them all: about 10 s on 2 cores
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("case_id", list(CASES))
def test_case_does_what_caffe2_does(case_id, results):
    case = CASES[case_id]
    outcome, passed, explanation = classify(case, results[case_id])
    assert passed, f"{case['op']} {case['args']}: {outcome}: {explanation}"


@pytest.mark.slow  # runs every case the session did not (about 10 s on 2 cores alone)
@pytest.mark.tensorflow_only
def test_floor_on_matching_cases(results):
    """A documented refusal passes its case, as a match does: the floor keeps a match from
    turning into one unseen (as test_caffe2_detcases.py's ``MIN_MATCHING``)."""
    every = {**results, **run_cases([cid for cid in CASES if cid not in results])}
    assert set(every) == set(CASES)
    matching = [cid for cid in CASES if classify(CASES[cid], every[cid])[0] == "match"]
    assert len(matching) >= MIN_MATCHING, len(matching)

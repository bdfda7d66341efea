"""MultiWorkerMirroredStrategy: examples/multi_worker.py with two worker processes.

The example is what runs: a launcher starting two workers on 127.0.0.1 with TF_CONFIG and a
custom training loop. Bounded by the launcher's per-attempt timeout and subprocess timeouts.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # multi-worker subprocesses

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "multi_worker.py")
STEPS, EVERY = 12, 4


def _run(out, *extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, EXAMPLE, "--out", str(out), f"--steps={STEPS}",
         f"--checkpoint-every={EVERY}", "--timeout=100", *extra],
        capture_output=True, text=True, env=env, timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    workers = [np.load(out / f"worker{i}.npz", allow_pickle=False) for i in range(2)]
    return summary, workers


def _masters(npz):
    return {k: npz[k] for k in npz.files if k not in ("step", "resumed_from")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("uninterrupted"))


def test_two_workers_end_with_bit_identical_masters(uninterrupted):
    summary, (w0, w1) = uninterrupted
    assert summary == {"attempts": [[0, 0]], "finished": True, "masters_identical": True,
                       "step": STEPS}
    m0, m1 = _masters(w0), _masters(w1)
    assert len(m0) == 4  # two Dense layers: kernel + bias each
    for key in m0:
        assert m0[key].dtype == np.float32
        assert m0[key].tobytes() == m1[key].tobytes(), key
    # the masters were trained: they hold bits a float16 copy cannot
    assert any(not np.array_equal(m, m.astype(np.float16).astype(np.float32))
               for m in m0.values())


def test_killed_worker_restarts_from_checkpoint_and_matches_uninterrupted_run(
        uninterrupted, tmp_path):
    # Worker 1 SIGKILLs itself after step 10; the latest checkpoint is step 8.
    summary, (w0, w1) = _run(tmp_path, "--kill-worker=1", "--kill-at-step=10")
    first, second = summary["attempts"]
    assert first[1] == -9 and first[0] != 0  # killed; the launcher stopped worker 0
    assert second == [0, 0] and summary["masters_identical"]
    assert int(w0["resumed_from"]) == int(w1["resumed_from"]) == 8
    assert int(w0["step"]) == STEPS
    reference = _masters(uninterrupted[1][0])
    for key, value in _masters(w0).items():
        assert value.tobytes() == reference[key].tobytes(), key  # bit-exact, nothing lost


def test_bfloat16_across_workers_is_a_clear_error(tmp_path):
    # TensorFlow's CollectiveBcastSend has no bfloat16 kernel, so MWMS cannot create the
    # bfloat16 copies; the scope says so before anything is built.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, EXAMPLE, "--out", str(tmp_path), "--compute-dtype=bfloat16",
         "--max-restarts=0", "--timeout=100", "--steps=2"],
        capture_output=True, text=True, env=env, timeout=200)
    assert result.returncode == 1
    assert "compute_dtype='bfloat16' is not supported under MultiWorkerMirroredStrategy" \
        in result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["finished"] is False and len(summary["attempts"]) == 1
    codes = summary["attempts"][0]  # the first to fail exits 1; the other may be stopped
    assert 1 in codes and 0 not in codes

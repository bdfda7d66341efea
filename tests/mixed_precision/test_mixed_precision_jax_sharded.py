"""Masters under ``keras.distribution`` on JAX with four host devices (CI's JAX pass).

The three parts of tests/mixed_precision/_jax_sharded.py run in one fresh process (a
module fixture) and each test checks its part's result
(``XLA_FLAGS`` must give four host devices before JAX is imported; its docstring says what
each part asserts): every added array on its variable's layout under ModelParallel, with
masters bit-identical to Keras mixed; ZeRO-1 (``shard_over``): masters equal to the
unsharded run (bit for bit on jaxlib 0.10, within 8 ulps on 0.12), the bytes each device
holds exactly as the sharding rule gives; weights and
``.keras`` files that load exactly under any other layout. And two processes joined by
``jax.distributed`` (tests/mixed_precision/_jax_two_hosts.py) train the masters of one.
"""

import re
import socket
import subprocess
import sys

import keras
import pytest
from _parity import HERE
from _subprocess import environment, run_python
from conftest import REPO

pytestmark = [pytest.mark.backend_neutral,
              pytest.mark.skipif(keras.backend.backend() != "jax",
                                 reason="runs in CI's JAX pass (KERAS_BACKEND=jax)")]
SCRIPT = HERE / "_jax_sharded.py"


PARTS = ("layouts", "zero1", "files")


@pytest.fixture(scope="module")
def parts_output():
    """The three parts run in one process (one JAX start with four devices, not three)."""
    return run_python(SCRIPT, *PARTS, backend="jax", devices=4, needs_tensorflow=False,
                      timeout=900)


def _run(output, part):
    """Assert that ``part`` of the shared run printed ``<part> OK`` (else: its own lines)."""
    pieces = re.split(r"^(\w+ (?:OK|FAILED))$", output, flags=re.M)
    lines = dict(zip(pieces[1::2], pieces[0:-1:2], strict=True))  # status -> its lines
    assert f"{part} OK" in lines, lines.get(f"{part} FAILED", output)[-3000:]


@pytest.mark.slow  # a subprocess, 16 trainings with their Keras mixed oracles
def test_every_added_array_follows_the_layout_and_masters_match_keras_mixed(parts_output):
    _run(parts_output, "layouts")


@pytest.mark.slow  # a subprocess, 14 trainings
def test_shard_over_shards_masters_and_state_and_keeps_the_masters(parts_output):
    _run(parts_output, "zero1")


@pytest.mark.slow  # a subprocess, 3 trainings and 9 loads of each file
def test_files_written_under_one_layout_load_exactly_under_another(parts_output):
    _run(parts_output, "files")


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # three processes (two joined by jax.distributed), ~30 s on 2 cores
def test_two_hosts_train_the_masters_of_one_and_write_a_file_one_host_loads(tmp_path):
    script = str(HERE / "_jax_two_hosts.py")
    env = environment("jax", devices=2, needs_tensorflow=False)
    port = _free_port()
    workers = [subprocess.Popen([sys.executable, script, "worker", str(rank), str(port),
                                 str(tmp_path)], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = []
    try:
        for worker in workers:
            outputs.append(worker.communicate(timeout=180)[0])
    finally:
        for worker in workers:  # a worker waiting on a dead peer must not outlive the test
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0 and output.strip().endswith("OK"), output[-3000:]
    out = run_python(script, "reference", tmp_path, backend="jax", devices=4,
                     needs_tensorflow=False, timeout=180, ends_with="OK")
    assert "both processes hold the masters of one process" in out

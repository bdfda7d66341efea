"""tfinit.mixed_precision workflows on Keras's JAX backend (CI's JAX pass, TensorFlow blocked).

- ``keras.distribution.DataParallel`` over two host devices (in a fresh process,
  tests/mixed_precision/_jax_data_parallel.py: ``XLA_FLAGS`` must be set before JAX is
  imported): masters bit-identical to Keras ``mixed_*`` under the same distribution, copies
  ``cast(master)``, both replicated and equal on both devices.
"""

import os
import subprocess
import sys

import keras
import pytest
from conftest import REPO

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it
ON_JAX = keras.backend.backend() == "jax"
jax_only = pytest.mark.skipif(not ON_JAX, reason="runs in CI's JAX pass (KERAS_BACKEND=jax)")


@pytest.mark.slow  # a subprocess, four trainings and their oracles (~15 s on 2 cores)
@jax_only
def test_data_parallel_masters_match_keras_mixed_bit_for_bit():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jax_data_parallel.py")
    proc = subprocess.run([sys.executable, script], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK"), proc.stdout[-3000:]

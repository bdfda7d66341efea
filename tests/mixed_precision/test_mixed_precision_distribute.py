"""tfinit.mixed_precision under MirroredStrategy on two logical CPUs.

Logical devices must be configured before TensorFlow initialises, so the checks run in a
fresh interpreter (tests/mixed_precision/_mixed_precision_mirrored.py): the scope entered outside
strategy.scope() is refused; inside it masters and copies are MirroredVariables; a custom
loop converges; an overflow on replica 1 only skips the step on every replica, leaving
masters, copies and slots bit-identical; model.fit in reverse/bfloat16 converges; a
tf.train.Checkpoint round trip restores distributed masters bit-exactly; sync_copies works
outside the strategy scope; copies == cast(masters) on every replica.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a subprocess


def test_mirrored_strategy_two_replicas():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(here)),
                                           os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, os.path.join(here, "_mixed_precision_mirrored.py")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")

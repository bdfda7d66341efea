"""tfinit.mixed_precision under MirroredStrategy on two logical CPUs.

Logical devices must be configured before TensorFlow initialises, so the checks run in a
fresh interpreter (tests/mixed_precision/_mixed_precision_mirrored.py): the scope entered outside
strategy.scope() is refused; inside it masters and copies are MirroredVariables; a custom
loop converges; an overflow on replica 1 only skips the step on every replica, leaving
masters, copies and slots bit-identical; model.fit in reverse/bfloat16 converges; a
tf.train.Checkpoint round trip restores distributed masters bit-exactly; sync_copies works
outside the strategy scope; copies == cast(masters) on every replica.
"""

import pytest
from _parity import HERE
from _subprocess import run_python

pytestmark = pytest.mark.slow  # a subprocess


def test_mirrored_strategy_two_replicas():
    run_python(HERE / "_mixed_precision_mirrored.py", ends_with="OK")

"""Shared test setup, done once for every test module (none repeats it).

- Environment: TensorFlow's C++ logs quiet (``TF_CPP_MIN_LOG_LEVEL=3``), set before any test
  module imports Keras or TensorFlow. Subprocess scripts (``tests/_*.py``) get it from the
  test that launches them.
- ``REPO``: the repository root. Test data lives in ``tests/data``, in the repo.
- Fixtures: ``dtype_policy`` (set Keras's global dtype policy for a block, restored after);
  ``tf`` (the ``tensorflow`` module, imported by the test that asks for it: modules whose
  other tests run on JAX without TensorFlow installed take TensorFlow this way).
- ``TFINIT_TEST_WITHOUT_TENSORFLOW=1``: ``import tensorflow`` fails as if it were not
  installed (CI's JAX pass: tfinit's fills, initializers and Caffe2 reader need no TensorFlow).
- ``FAST_CASES``: a test module that defines this set of test ids keeps only those in the
  fast loop; its other tests are marked ``slow`` at collection (the Keras-parity matrix).
- Markers (setup.cfg): ``slow`` (subprocesses, notebooks, the wheel, the demo, multi-worker,
  benchmarks, any test over 1 s on 2 cores: ``pytest -m "not slow"`` is the fast loop) and
  ``tensorflow_only``.
"""

import contextlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]


if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1":
    import _no_tensorflow

    _no_tensorflow.install()


@pytest.fixture(scope="session")
def tf():
    """The ``tensorflow`` module (imported only by the tests that ask for it)."""
    import tensorflow

    return tensorflow


@pytest.fixture
def dtype_policy():
    """A context manager setting Keras's global dtype policy for a block.

    ``with dtype_policy("mixed_float16"): ...`` sets the policy and restores the one before
    it when the block ends; the policy the test started with is restored at teardown too,
    so a failing test cannot leak its policy into the next one.
    """
    import keras

    at_start = keras.config.dtype_policy()

    @contextlib.contextmanager
    def use(policy):
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        try:
            yield keras.config.dtype_policy()
        finally:
            keras.config.set_dtype_policy(previous)

    yield use
    keras.config.set_dtype_policy(at_start)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test of a module with ``FAST_CASES`` that is not listed there."""
    seen = {}
    for item in items:
        fast_cases = getattr(item.module, "FAST_CASES", None)
        if fast_cases is None:
            continue
        seen.setdefault(item.module, set()).add(item.name)
        if item.name not in fast_cases:
            item.add_marker(pytest.mark.slow)
    for module, names in seen.items():
        if module.FAST_CASES - names:
            raise pytest.UsageError(f"{module.__name__}.FAST_CASES names no test: "
                                    f"{sorted(module.FAST_CASES - names)}")

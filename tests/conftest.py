"""Shared test setup, done once for every test module (none repeats it).

- Environment: TensorFlow's C++ logs quiet (``TF_CPP_MIN_LOG_LEVEL=3``), set before any test
  module imports Keras or TensorFlow. Subprocess scripts (``tests/**/_*.py``) get it from the
  test that launches them.
- ``REPO``: the repository root. Test data lives in ``tests/data``, in the repo.
- Fixtures: ``dtype_policy`` (set Keras's global dtype policy for a block, restored after);
  ``tf`` (the ``tensorflow`` module, imported by the test that asks for it: modules whose
  other tests run on JAX without TensorFlow installed take TensorFlow this way); ``mp``
  (``tfinit.mixed_precision``).
- Shared helpers, one home each: ``tests/_subprocess.py`` (a fresh Python process),
  ``tests/_arrays.py`` (arrays of any backend, bit-for-bit comparison),
  ``tests/mixed_precision/_parity.py`` (the mixed-precision model, masters, copies) and
  ``_split_cases.py`` beside it (the split master's cases).
- ``TFINIT_TEST_WITHOUT_TENSORFLOW=1``: ``import tensorflow`` fails as if it were not
  installed (CI's JAX pass: tfinit's fills, initializers and Caffe2 reader need no TensorFlow),
  and only the modules marked ``backend_neutral`` are collected (the others may import
  TensorFlow at their top).
- Which backends a module runs on: a module whose tests run on every backend says so with
  ``pytestmark = pytest.mark.backend_neutral`` (its TensorFlow-only tests marked
  ``tensorflow_only``); CI's JAX pass runs ``-m "backend_neutral and not tensorflow_only"``
  over all of ``tests/``, so a new backend-neutral module runs on JAX without a list to edit.
  A module without the marker runs on TensorFlow only.
- ``FAST_CASES``: a test module that defines this set of test ids keeps only those in the
  fast loop; its other tests are marked ``slow`` at collection (the Keras-parity matrix).
- The order of the files (``pytest_collection_modifyitems``): the two test processes take
  whole files in collection order (setup.cfg: ``--dist loadfile --no-loadscope-reorder``);
  ``LONG_FILES`` (minutes in a few tests: processes, notebooks, the wheel) go first, then
  the files with the most ``slow`` tests, so that the two processes end together. Any order
  passes.
- Markers (setup.cfg): ``slow`` (subprocesses, notebooks, the wheel, the demo, multi-worker,
  benchmarks, any test over 1 s on 2 cores: ``pytest -m "not slow"`` is the fast loop),
  ``backend_neutral`` (per module) and ``tensorflow_only`` (per test).
"""

import ast
import collections
import contextlib
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]


WITHOUT_TENSORFLOW = os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW") == "1"
if WITHOUT_TENSORFLOW:
    import _no_tensorflow

    _no_tensorflow.install()


def declares_backend_neutral(path):
    """Whether the test module at ``path`` sets ``pytestmark`` to (a list holding)
    ``pytest.mark.backend_neutral``; read from its source, without importing it."""
    for node in ast.parse(Path(path).read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr == "backend_neutral"
                       for n in ast.walk(node.value))
    return False


def pytest_ignore_collect(collection_path, config):
    """With TensorFlow blocked, collect only the modules marked ``backend_neutral``."""
    if (WITHOUT_TENSORFLOW and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")):
        return not declares_backend_neutral(collection_path) or None
    return None


@pytest.fixture(scope="session")
def tf():
    """The ``tensorflow`` module (imported only by the tests that ask for it)."""
    import tensorflow

    return tensorflow


@pytest.fixture(scope="session")
def mp():
    """``tfinit.mixed_precision`` (for the modules that take it as a fixture)."""
    from tfinit import mixed_precision

    return mixed_precision


@contextlib.contextmanager
def use_dtype_policy(policy):
    """Keras's global dtype policy set to ``policy`` for a block, the one before it restored
    when the block ends: the one helper through which tests set the global policy."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield keras.config.dtype_policy()
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.fixture
def dtype_policy():
    """``use_dtype_policy`` as a fixture: ``with dtype_policy("mixed_float16"): ...``; the
    policy the test started with is restored at teardown too, so a failing test cannot leak
    its policy into the next one.
    """
    import keras

    at_start = keras.config.dtype_policy()
    yield use_dtype_policy
    keras.config.set_dtype_policy(at_start)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global seeds (Python, NumPy, TensorFlow and Keras, via
    ``keras.utils.set_random_seed(0)``): with the suite split over two processes a test's
    neighbours change from run to run, and an unseeded initializer must not decide whether
    a convergence check passes."""
    keras = sys.modules.get("keras")
    if keras is not None:
        keras.utils.set_random_seed(0)
    yield


@pytest.fixture(autouse=True)
def _no_dtype_policy_leaks():
    """Every test leaves Keras's global dtype policy as it found it (restored, and the test
    fails, when it does not). Nothing to check before Keras is imported."""
    keras = sys.modules.get("keras")
    previous = keras.config.dtype_policy() if keras else None
    yield
    if previous is None:
        return
    now = keras.config.dtype_policy()
    keras.config.set_dtype_policy(previous)
    assert now.name == previous.name, f"the global dtype policy leaked: {now.name}"


#: files that take minutes in a few tests, the longest first as far as measured or estimated
#: (a scheduling hint: xdist's own order, by number of tests, puts them last, where one
#: process can run them while the other idles)
LONG_FILES = [
    "mixed_precision/test_keras_parity.py",
    "test_notebooks.py",
    "mixed_precision/test_checkpoint_preemption.py",
    "mixed_precision/test_master_invariant.py",
    "cli/test_demo.py",
    "test_benchmarks.py",
    "test_wheel.py",
    "distribute/test_distribute_multi_worker.py",
    "mixed_precision/test_mixed_precision_jax_sharded.py",
    "caffe2/test_detection_fuzz.py",
]


def _schedule(items):
    """Whole files in place, ``LONG_FILES`` first, then by number of slow tests (a slow test:
    over 1 s), then of tests; a file's own tests keep their order."""
    rank = {REPO / "tests" / name: i for i, name in enumerate(LONG_FILES)}
    slow, total = collections.Counter(), collections.Counter()
    for item in items:
        total[item.path] += 1
        slow[item.path] += item.get_closest_marker("slow") is not None
    items.sort(key=lambda item: (rank.get(item.path, len(rank)), -slow[item.path],
                                 -total[item.path], str(item.path)))


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test of a module with ``FAST_CASES`` that is not listed there;
    then order the files (``_schedule``)."""
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
    _schedule(items)

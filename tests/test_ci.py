"""CI's JAX pass chooses its test modules by marker, not by a list of files."""

import re

import pytest
from conftest import REPO, declares_backend_neutral

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it


def _jax_pass():
    run = (REPO / ".ci" / "run").read_text()
    return re.search(r"^KERAS_BACKEND=jax .*?\n(?:    .*\n)*", run, flags=re.M).group(0)


def test_the_jax_pass_selects_by_marker_and_names_no_test_file():
    command = _jax_pass()
    assert "TFINIT_TEST_WITHOUT_TENSORFLOW=1" in command
    assert '-m "backend_neutral and not tensorflow_only"' in command
    assert "tests/" not in command, command


@pytest.mark.parametrize("source, neutral", [
    ("import pytest\npytestmark = pytest.mark.backend_neutral\n", True),
    ("import pytest\npytestmark = [pytest.mark.backend_neutral, pytest.mark.slow]\n", True),
    ("import pytest\npytestmark = pytest.mark.slow\n", False),
    ("import pytest\n\ndef test_x():\n    backend_neutral = 1\n", False),
])
def test_a_module_is_backend_neutral_when_its_pytestmark_says_so(tmp_path, source, neutral):
    path = tmp_path / "test_module.py"
    path.write_text(source)
    assert declares_backend_neutral(path) is neutral


def test_the_modules_the_jax_pass_ran_by_name_are_still_selected():
    """The eleven modules .ci/run listed by hand before the marker (none is dropped)."""
    listed = ["fills", "fans", "registry", "serialization", "initializers", "docs", "layering",
              "caffe2_rng", "sources", "caffe2_netdef", "backend"]
    found = {path.stem: path for path in (REPO / "tests").rglob("test_*.py")}
    assert all(declares_backend_neutral(found[f"test_{m}"]) for m in listed)


def test_the_torch_pass_runs_the_torch_tests_on_torch_with_tensorflow_blocked():
    """The torch tests skip on any other backend: the pass checks its backend first."""
    run = (REPO / ".ci" / "run").read_text()
    command = re.search(r"^KERAS_BACKEND=torch TFINIT.*?\n(?:    .*\n)*", run, flags=re.M).group(0)
    assert "TFINIT_TEST_WITHOUT_TENSORFLOW=1" in command
    assert "tests/mixed_precision/test_mixed_precision_torch.py" in command
    assert "tests/mixed_precision/test_keras_parity.py" in command
    assert "assert keras.backend.backend() == 'torch'" in run
    assert (REPO / ".ci" / "torch-version.txt").read_text().count("torch==") == 1

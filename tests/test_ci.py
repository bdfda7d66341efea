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


def _pins(name):
    return [line for line in (REPO / ".ci" / name).read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_the_main_tests_run_the_readme_command_on_python_3_12():
    run = (REPO / ".ci" / "run").read_text()
    assert re.search(r'^PATH="\$SIDE/python312:\$PATH" \\\npython3 -m venv \.venv && ', run,
                     flags=re.M), "step 1 is the README's command with python3 = Python 3.12"
    assert 'ln -s "$PY312" "$SIDE/python312/python3"' in run


def test_the_nightly_pass_runs_a_pinned_keras_nightly_in_place_of_keras():
    (pin,) = _pins("keras-nightly.txt")
    assert re.fullmatch(r"keras-nightly==\d+\.\d+\.\d+\.dev\d+", pin), pin
    run = (REPO / ".ci" / "run").read_text()
    # keras-nightly provides the `keras` package: keras (TensorFlow requires it) is
    # uninstalled before it installs
    install = run.index('nightly/bin/pip" install -q --no-compile -r "$SIDE/nightly-requirements')
    assert install < run.index('uninstall -q -y keras\n') < run.index("-r .ci/keras-nightly.txt")
    assert '"$SIDE/nightly/bin/python" -m pytest -p no:cacheprovider -m "not slow"\n' in run


def test_what_the_nightly_pass_leaves_out_is_a_requirement_no_fast_test_imports():
    """NIGHTLY_LEAVES names requirements of setup.cfg (a renamed one would stay in
    silently); the fast loop's modules import none of them at their top (keras-hub's tests
    skip without it: importorskip)."""
    import configparser

    run = (REPO / ".ci" / "run").read_text()
    leaves = re.search(r'^NIGHTLY_LEAVES="([^"]*)"$', run, flags=re.M).group(1).split()
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    required = {re.match(r"[\w.-]+", line.strip()).group(0) for line in (
        cfg["options"]["install_requires"] + cfg["options.extras_require"]["test"]).splitlines()
        if line.strip() and not line.strip().startswith("#")}
    assert set(leaves) <= required, sorted(set(leaves) - required)
    modules = {{"orbax-checkpoint": "orbax"}.get(name, name.replace("-", "_"))
               for name in leaves} - {"keras"}
    for path in (REPO / "tests").rglob("*.py"):
        for line in path.read_text().splitlines():
            top = re.match(r"(?:import|from) (\w+)", line)  # module level: no indent
            assert not (top and top.group(1) in modules), (path.name, line)


def test_the_declared_ranges_are_what_ci_runs():
    """setup.cfg's bounds, tfinit/_versions.py's range and the oldest pair CI pins agree;
    the Python classifiers are the versions CI runs on."""
    from tfinit import _versions

    setup = (REPO / "setup.cfg").read_text()
    keras_range = f"keras>={_versions.KERAS[0]},<{_versions.KERAS[1]}"
    tf_range = f"tensorflow>={_versions.TENSORFLOW[0]},<{_versions.TENSORFLOW[1]}"
    assert keras_range in setup
    assert setup.count("tensorflow>=") == setup.count(tf_range) >= 3  # every extra alike
    assert f"keras=={_versions.KERAS[0]}" in _pins("min-versions.txt")
    assert f"tensorflow=={_versions.TENSORFLOW[0]}" in _pins("min-versions.txt")
    classifiers = re.findall(r"Programming Language :: Python :: (3\.\d+)", setup)
    run = (REPO / ".ci" / "run").read_text()
    ci_pythons = re.findall(r'^PY3\d+="\$\(find_python (3\.\d+)\)"', run, flags=re.M)
    assert classifiers == ci_pythons == ["3.10", "3.11", "3.12", "3.13"], (classifiers, ci_pythons)
    assert "python_requires = >=3.10" in setup
    for python in ci_pythons:  # each one makes a virtualenv of a pass
        assert f'"$PY{python.replace(".", "")}" -m venv' in run or \
            f'ln -s "$PY{python.replace(".", "")}"' in run, python


def test_the_long_files_exist_and_go_first_each_whole():
    """conftest's LONG_FILES name test files; the schedule puts them first, in their order,
    then the files with the most slow tests, each file's tests together in their order."""
    import types

    from conftest import LONG_FILES, _schedule

    assert all((REPO / "tests" / name).is_file() for name in LONG_FILES), LONG_FILES
    assert len(set(LONG_FILES)) == len(LONG_FILES)
    assert "--no-loadscope-reorder" in (REPO / "setup.cfg").read_text()

    def item(path, name, slow):
        marker = pytest.mark.slow.mark if slow else None
        return types.SimpleNamespace(path=REPO / "tests" / path, name=name,
                                     get_closest_marker=lambda _: marker)

    items = [item("a.py", "a1", False), item("b.py", "b1", True), item("a.py", "a2", False),
             item(LONG_FILES[1], "l1", True), item("b.py", "b2", False),
             item(LONG_FILES[0], "l0", False)]
    _schedule(items)
    assert [i.name for i in items] == ["l0", "l1", "b1", "b2", "a1", "a2"]

"""The wheel is whole: built from the sources, installed (not editable) into a fresh
virtualenv, it runs ``tfinit ops``, a fill and ``tfinit inspect`` on its own example nets,
from a folder outside the repository.

The fresh virtualenv gets tfinit from the wheel alone (``--no-deps``); its dependencies
(Keras, TensorFlow, numpy) are this test interpreter's, reached through a ``.pth`` line
naming this interpreter's site-packages. A line in a ``.pth`` file only extends
``sys.path``, so the editable install of this checkout that lives there is not seen.
"""

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # builds and installs the wheel

#: what a source tree holds that is not the package's source
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "tfinit-demo"
)


def _run(args, cwd, env=None, timeout=300):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the sources (the build leaves the checkout untouched)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--disable-pip-version-check", "-q", "-w", str(root / "dist"), str(source)], cwd=root)
    (path,) = (root / "dist").glob("tfinit-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A fresh virtualenv with the wheel installed; returns (its bin folder, env, cwd)."""
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--disable-pip-version-check", "-q", str(wheel)], cwd=root)
    purelib = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True,
    ).strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
            *site.getsitepackages()}
    with open(os.path.join(purelib, "test_interpreter_packages.pth"), "w") as pth:
        pth.write("\n".join(sorted(ours)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return venv / "bin", env, elsewhere


def test_wheel_holds_the_package_and_its_example_nets_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    examples = {n for n in names if n.startswith("tfinit/caffe2/examples/")}
    for net in ("mlp", "cnn", "seeded"):
        assert f"tfinit/caffe2/examples/{net}_init_net.pb" in examples
    assert "tfinit/caffe2/examples/README.md" in examples
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "notebooks/"))]
    assert wheel.stat().st_size < 1 << 20  # the example nets are small


def test_installed_wheel_runs_from_outside_the_repository(installed):
    bindir, env, elsewhere = installed
    out = _run([str(bindir / "tfinit"), "ops"], cwd=elsewhere, env=env)
    assert "XavierFill(seed=None, layout='keras', rng='keras')" in out
    assert "sqrt(3 / fan_in)" in out
    script = (
        "import numpy as np, tfinit\n"
        "print(tfinit.__file__)\n"
        "x = np.asarray(tfinit.XavierFill(seed=1234, rng='caffe2')((128, 256)))\n"
        "assert x.shape == (128, 256) and np.abs(x).max() <= np.sqrt(np.float32(3 / 128))\n"
        "import tfinit.caffe2, pathlib\n"
        "print(pathlib.Path(tfinit.caffe2.__file__).parent / 'examples' / 'cnn_init_net.pb')\n"
    )
    module_file, example = _run([str(bindir / "python"), "-c", script], cwd=elsewhere,
                                env=env).split()
    venv = str(bindir.parent)
    assert module_file.startswith(venv) and not module_file.startswith(str(REPO))
    assert example.startswith(venv)
    out = _run([str(bindir / "tfinit"), "inspect", example], cwd=elsewhere, env=env)
    assert "GivenTensorFill" in out
    out = _run([str(bindir / "tfinit"), "--help"], cwd=elsewhere, env=env)
    assert "usage: tfinit" in out and "convert" in out

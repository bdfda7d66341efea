"""The command line's porting aids: inspect shows seeds and engines, convert --atol,
ops prints the nearest Keras initializer (the demo's progress: tests/cli/test_demo.py)."""

import os
import subprocess
import sys

import _tfinit_entry
import pytest
from conftest import REPO

from tfinit import cli
from tfinit.caffe2 import NetDef, Operator
from tfinit.caffe2._netdef import DeviceOption


def test_inspect_shows_each_ops_random_seed_and_engine(tmp_path, capsys):
    net = NetDef(name="n", ops=[
        Operator("XavierFill", (), ("w",), {"shape": [2, 3]}, engine="CUDNN",
                 device_option=DeviceOption(random_seed=99)),
        Operator("GaussianFill", (), ("v",), {"shape": [2]}),
    ], device_option=DeviceOption(random_seed=7))
    path = tmp_path / "init_net.pb"
    path.write_bytes(net.to_bytes())
    assert cli.main(["inspect", str(path), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    op0 = next(line for line in lines if line.startswith("op #0"))
    op1 = next(line for line in lines if line.startswith("op #1"))
    assert op0.endswith("engine=CUDNN random_seed=99")
    assert op1.endswith("random_seed=7 (the net's)")


def test_ops_prints_the_nearest_keras_initializer(capsys):
    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    assert 'nearest Keras initializer: VarianceScaling(1.0, "fan_in", "uniform")' in out
    assert "nearest Keras initializer: RandomNormal" in out


def test_convert_takes_atol(capsys):
    args = cli.build_parser().parse_args(["convert", "i.pb", "p.pb", "o.keras", "--atol", "1e-3"])
    assert args.atol == 1e-3
    assert cli.main(["convert", "i.pb", "p.pb", "o.keras", "--atol", "0"]) == 2
    assert "Argument `--atol`" in capsys.readouterr().err



HELP_PROBE = """
import sys
import _tfinit_entry
try:
    status = _tfinit_entry.main(sys.argv[1:])
except SystemExit as done:
    status = done.code
heavy = sorted(m for m in ("keras", "tensorflow", "jax", "tfinit") if m in sys.modules)
print("status", status, "imported", heavy)
"""


@pytest.mark.slow  # a subprocess
@pytest.mark.parametrize("argv, status", [([], 2), (["--help"], 0), (["convert", "-h"], 0)])
def test_help_answers_without_importing_tfinit_keras_or_tensorflow(argv, status):
    out = subprocess.run([sys.executable, "-c", HELP_PROBE, *argv], capture_output=True,
                         text=True, cwd=REPO, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO))).stdout
    assert "usage: tfinit" in out
    assert out.strip().endswith(f"status {status} imported []"), out


def test_the_console_script_enters_through_the_light_entry_point():
    import configparser

    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    assert "tfinit = _tfinit_entry:main" in config["options.entry_points"]["console_scripts"]
    assert config["options"]["py_modules"].strip() == "_tfinit_entry"


def test_a_command_goes_through_to_tfinit_cli(capsys):
    assert _tfinit_entry.main(["ops"]) == 0
    assert "XavierFill" in capsys.readouterr().out

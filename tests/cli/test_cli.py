"""The `tfinit` command line."""

import subprocess
import sys

import pytest

from tfinit import cli, registry


def test_ops_lists_every_fill_with_arguments_and_maths(capsys):
    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    for name in registry.fill_ops():
        assert f"{name}(" in out
    assert "XavierFill(seed=None, layout='keras', rng='keras')" in out
    assert "sqrt(3 / fan_in)" in out and "uniform[min, max)" in out


@pytest.mark.slow  # a subprocess
def test_unknown_subcommand_exits_nonzero_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "tfinit.cli", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "invalid choice" in proc.stderr


def test_no_subcommand_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: tfinit" in capsys.readouterr().out

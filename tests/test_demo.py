"""`tfinit demo`, the main job: three runs, a table, a plot; bad options fail in one line."""

import contextlib
import io
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import REPO

from tfinit import cli, demo

pytestmark = pytest.mark.slow  # runs the demo, and subprocesses


@pytest.fixture(scope="module")
def short_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = demo.run(epochs=3, out_dir=out, samples=1024)
    return out, {r.name: r for r in results}, printed.getvalue()


def test_demo_trains_three_ways_and_writes_the_plot(short_demo, capsys):
    out, results, _ = short_demo
    assert list(results) == ["fp32", "float16", "pseudo_fp16"]
    png = out / "loss_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for r in results.values():
        assert len(r.losses) == 3 and r.losses[-1] < r.losses[0]  # every run learns
        assert len(r.lost_percent_per_epoch) == 3


def test_demo_shows_the_underflow_that_masters_prevent(short_demo):
    _, results, _ = short_demo
    frac = {n: r.lost_updates / r.attempted_updates for n, r in results.items()}
    # Plain float16 weights drop a large share of SGD updates; fp32 masters keep them.
    assert frac["float16"] > 0.05
    assert frac["pseudo_fp16"] < 0.01 and frac["fp32"] < 0.01
    # The masters follow the fp32 run far more closely than the 16-bit weights do.
    fp32 = results["fp32"].losses[-1]
    assert abs(results["pseudo_fp16"].losses[-1] - fp32) < 0.01 * fp32


def test_demo_reports_bytes_per_parameter(short_demo):
    _, results, _ = short_demo
    assert results["fp32"].bytes_per_param == pytest.approx(4.0, abs=0.05)  # SGD keeps no slots
    assert results["float16"].bytes_per_param == pytest.approx(2.0, abs=0.05)
    assert results["pseudo_fp16"].bytes_per_param == pytest.approx(6.0, abs=0.05)  # copy + master


def test_format_table_lists_every_run(short_demo):
    _, results, _ = short_demo
    table = demo.format_table(list(results.values()))
    assert table.splitlines()[0].split()[:3] == ["run", "final", "loss"]
    assert all(name in table for name in results)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--epochs", "-1"], "Argument `--epochs` must be a positive int. Received: --epochs=-1"),
        (["--dtype", "float8"], "--dtype: invalid choice"),
        (["--out", "/proc/tfinit-cannot-write"], "is not writable"),
    ],
)
def test_impossible_options_exit_nonzero_with_one_line(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "tfinit.cli", "demo", *args],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if line.startswith("tfinit:")]
    assert len(ours) == 1 and message in ours[0]
    assert "Traceback" not in proc.stderr


def test_demo_says_when_its_16_bit_times_come_from_cpu_emulation(short_demo):
    *_, printed = short_demo
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    notes = [line for line in printed.splitlines() if line.startswith("note: no GPU")]
    assert len(notes) == (0 if on_gpu else 1)
    if notes:
        assert "float16 step times" in notes[0] and "emulate 16-bit arithmetic" in notes[0]


def test_demo_without_matplotlib_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert cli.main(["demo", "--epochs", "1"]) == 2
    assert 'pip install "tfinit[demo]"' in capsys.readouterr().err


def test_demo_on_the_jax_backend_says_it_needs_tensorflow():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tfinit.cli", "demo"],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("tfinit:")]
    assert len(ours) == 1 and "tfinit demo needs the TensorFlow backend" in ours[0]

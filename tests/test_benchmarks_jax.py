"""``benchmarks.mixed_jax`` (fp32 masters vs Keras mixed on JAX) runs and reports what it should.

Runs on Keras's JAX backend only (CI's JAX pass, TensorFlow blocked); skipped elsewhere. No
timing assertions: smoke figures are meaningless. Checked: the rows and columns, positive
finite times and ratios, and the bytes per parameter measured from the arrays, which the
dtypes fix exactly (Keras mixed + Adam: 4 + 8 = 12; a master beside a 16-bit copy: 14).
"""

import json
import math
import os

import keras
import pytest

pytestmark = [
    pytest.mark.backend_neutral,  # runs in CI's JAX pass
    pytest.mark.skipif(keras.backend.backend() != "jax",
                       reason="benchmarks.mixed_jax measures Keras's JAX backend"),
]

COLUMNS = ["model", "dtype", "contender", "params", "ms_per_step", "ratio", "ratio_ci95",
           "vs_fp32", "bytes_per_param", "scalar_bytes", "step_mib", "timing_wall_s",
           "build_s"]


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from benchmarks import run as bench_run

    out = tmp_path_factory.mktemp("mixed_jax")
    # the runner's --gpu under KERAS_BACKEND=jax is this benchmark; --allow-cpu: smoke sizes
    assert bench_run.main(["--gpu", "--allow-cpu", "--out", str(out)]) == 0
    data = json.loads((out / "results_mixed_jax_smoke.json").read_text())
    return data, (out / "results_mixed_jax_smoke.md").read_text()


@pytest.mark.slow  # builds and compiles 8 models
def test_rows_columns_and_figures(results):
    from benchmarks import mixed_jax

    data, md = results
    s = mixed_jax.SIZES["smoke"]
    assert data["machine"]["sizes"] == "smoke" and data["machine"]["device_peak_mib"] is None
    if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW"):
        assert data["machine"]["tensorflow_imported"] is False
    rows = data["rows"]
    assert data["skipped"] == []
    assert [(r["model"], r["dtype"], r["contender"]) for r in rows] == [
        (m, d, c) for m, d in s["configs"] for c in mixed_jax.contenders(d)]
    assert {d for _, d in s["configs"]} == {"float16", "bfloat16"}
    for row in rows:
        assert list(row) == COLUMNS, row
        for key in ("ms_per_step", "ratio", "vs_fp32", "step_mib", "build_s"):
            assert _positive(row[key]), (key, row)
        low, high = row["ratio_ci95"]
        assert _positive(low) and low <= row["ratio"] <= high, row
        assert f"| {row['model']} | {row['dtype']} | {row['contender']} |" in md
    by = {(r["model"], r["contender"]): r for r in rows}
    for model, dtype in s["configs"]:
        assert by[model, "keras_mixed"]["ratio"] == 1.0 and by[model, "fp32"]["vs_fp32"] == 1.0
        params = {by[model, c]["params"] for c in mixed_jax.contenders(dtype)}
        assert len(params) == 1, (model, params)
        # measured from the arrays: fp32 weight + Adam's two fp32 slots
        assert by[model, "keras_mixed"]["bytes_per_param"] == 12.0, model
        assert by[model, "fp32"]["bytes_per_param"] == 12.0, model
    for contender in ("pseudo_fp16", "reverse"):  # + the 16-bit copy of every MLP weight
        assert by["mlp", contender]["bytes_per_param"] == 14.0, contender
        # the transformer's LayerNormalization weights stay fp32, unpaired
        assert 12.0 < by["transformer", contender]["bytes_per_param"] < 14.0, contender
    # split (the bfloat16 transformer): bfloat16 variable + int16 remainder, fp32 Adam slots;
    # the scratch fp32 master holds nothing between steps
    assert "split" not in mixed_jax.contenders("float16")
    assert by["transformer", "split"]["bytes_per_param"] <= 12.0


def test_without_an_accelerator_it_says_so_and_writes_nothing(monkeypatch, capsys, tmp_path):
    from benchmarks import mixed_jax
    from benchmarks import run as bench_run

    monkeypatch.setattr(mixed_jax, "accelerated", lambda: False)
    assert bench_run.main(["--gpu", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == mixed_jax.NO_GPU
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    assert mixed_jax.main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == mixed_jax.NOT_JAX.format(backend="torch")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # builds three models, compiles each one's train, test and predict steps
def test_per_batch_rows_columns_and_figures(tmp_path):
    """``benchmarks.per_batch_jax --smoke``: a row per call and contender, positive finite
    times, ratios within their interval, Keras mixed the baseline; the Markdown shows them."""
    from benchmarks import per_batch_jax

    assert per_batch_jax.main(["--smoke", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results_per_batch_jax_smoke.json").read_text())
    md = (tmp_path / "results_per_batch_jax_smoke.md").read_text()
    if os.environ.get("TFINIT_TEST_WITHOUT_TENSORFLOW"):
        assert data["machine"]["tensorflow_imported"] is False
    rows = data["rows"]
    assert [(r["call"], r["contender"]) for r in rows] == [
        (call, c) for call in per_batch_jax.CALLS for c in per_batch_jax.CONTENDERS]
    for row in rows:
        assert list(row) == ["call", "contender", "ms_per_call", "ratio", "ratio_ci95"], row
        assert _positive(row["ms_per_call"]) and _positive(row["ratio"]), row
        low, high = row["ratio_ci95"]
        assert _positive(low) and low <= row["ratio"] <= high, row
        assert row["contender"] != "keras_mixed" or row["ratio"] == 1.0, row
        assert f"| {row['call']} | {row['contender']} |" in md

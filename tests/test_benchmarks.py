"""The benchmark suite runs end to end (``--smoke``: tiny sizes) and reports what it should.

No timing assertions: smoke figures are meaningless. What is checked: every section and
row is there with the right fields, times and ratios are finite and positive, the memory
figures are exact where they can be (bytes per parameter are fixed by the dtypes).
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from benchmarks import run as bench_run
from benchmarks.training import MODELS

SECTIONS = ["comparisons", "fills", "load_memory", "training", "memory", "scaling", "distribute",
            "caffe2_import", "split_master"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert bench_run.main(["--smoke", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    return data, (out / "results.md").read_text()


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.slow  # runs the benchmark suite
def test_every_section_is_written(results):
    data, md = results
    assert data["mode"] == "smoke"
    assert list(data["sections"]) == SECTIONS
    for name in SECTIONS:
        assert data["sections"][name], name
        assert bench_run.TITLES[name] in md
        for row in data["sections"][name]:
            assert f"| {row['name']} |" in md


@pytest.mark.slow  # runs the benchmark suite
def test_timed_rows_have_finite_positive_times_and_ratios(results):
    data, _ = results
    for name in ("comparisons", "fills", "training", "scaling", "distribute"):
        for row in data["sections"][name]:
            for key in ("ours_ms", "baseline_ms", "ratio"):
                assert _positive(row[key]), (name, row)
            for key in [k for k in row if k.startswith("ratio_vs_") or k.endswith("_ms")]:
                assert _positive(row[key]), (name, key, row)
            q1, q3 = row["ratio_iqr"]
            assert 0 < q1 <= row["ratio"] <= q3, row  # the median lies in the middle half
            low, high = row["ratio_ci95"]
            assert 0 < low <= row["ratio"] <= high, row  # ...and in its confidence interval


@pytest.mark.slow  # runs the benchmark suite
def test_fills_cover_every_pair_and_given_values(results):
    names = [r["name"] for r in results[0]["sections"]["fills"]]
    for fill in ("XavierFill", "MSRAFill", "GaussianFill", "UniformFill", "ConstantFill",
                 "GivenTensorFill"):
        assert any(n.startswith(fill + " vs") or n.startswith(fill + " ->") for n in names), fill


@pytest.mark.slow  # runs the benchmark suite
def test_training_covers_both_models_and_dtypes_with_fp32(results):
    rows = results[0]["sections"]["training"]
    seen = {(kind, dtype) for kind in MODELS for dtype in ("float16", "bfloat16")
            if any(r["name"].startswith(f"{kind} ") and f"mixed_{dtype}" in r["name"]
                   for r in rows)}
    assert len(seen) == 4, seen
    assert {r["name"].split(": ")[1].split("+")[0] for r in rows} == {"pseudo_fp16", "reverse"}
    for row in rows:
        if "pseudo_fp16+MWO" in row["name"]:
            assert _positive(row["fp32_ms"])
        # Keras casts the shared weight on each of its 16 reads; the cached copy does not.
        if row["name"].startswith("reuse"):
            assert row["casts_ours"] < row["casts_baseline"] - 16, row


@pytest.mark.slow  # runs the benchmark suite
def test_scaling_doubles_the_width(results):
    rows = results[0]["sections"]["scaling"]
    for kind in MODELS:
        params = [r["params"] for r in rows if r["name"].startswith(kind + " ")]
        # each against the next: params[1:] is one shorter
        assert len(params) >= 2 and all(
            b > a for a, b in zip(params, params[1:], strict=False)), kind


@pytest.mark.slow  # runs the benchmark suite
def test_memory_bytes_per_parameter_follow_the_dtypes(results):
    rows = {r["name"].split(": ", 1)[1]: r for r in results[0]["sections"]["memory"]}
    # fp32 weight + Adam's two fp32 slots = 12 bytes; a 16-bit copy adds 2. Scalars (step
    # counters, loss scale) add a little, under 0.1 byte per parameter even at smoke size.
    expected = {"fp32": 12, "mixed_float16 (Keras)": 12, "pseudo_fp16 float16": 14,
                "pseudo_fp16 bfloat16": 14, "reverse float16": 14, "reverse bfloat16": 14}
    for name, value in expected.items():
        assert value <= rows[name]["bytes_per_param"] < value + 0.1, rows[name]
    assert rows["pseudo_fp16 float16"]["float16_bytes_per_param"] == 2.0
    assert rows["pseudo_fp16 bfloat16"]["bfloat16_bytes_per_param"] == 2.0


@pytest.mark.slow  # runs the benchmark suite
def test_load_memory_rows(results):
    rows = results[0]["sections"]["load_memory"]
    assert [r["name"].split(": ", 1)[1] for r in rows][:2] == ["tf.Variable(array)",
                                                               "GivenTensorFill"]
    for row in rows:
        # The variable itself is one copy, so the peak grows by at least the array's bytes.
        assert row["copies"] >= 0.95 and _positive(row["peak_growth_mib"]), row
        assert not row["bound_only"], row  # the peak was reset before the load (Linux)


@pytest.mark.slow  # runs the benchmark suite
def test_comparisons_give_each_ratio_its_target(results):
    rows = results[0]["sections"]["comparisons"]
    names = [r["name"] for r in rows]
    assert any("pseudo_fp16 vs mixed_float16" in n and n.startswith("MLP") for n in names)
    for mode in ("pseudo_fp16", "reverse"):
        assert any(f"{mode} bfloat16 vs mixed_bfloat16" in n for n in names), mode
    assert any("reverse vs mixed_float16" in n for n in names)
    assert sum(n.startswith("MirroredStrategy x2") for n in names) == 2
    for row in rows:
        assert row["within_target"] == (row["ratio"] <= row["target"]), row
        low, high = row["ratio_ci95"]
        expected = ("within" if high <= row["target"] else "over" if low > row["target"]
                    else "undecided")
        assert row["verdict"] == expected, row
    reuse = [r for r in rows if "read 16 times" in r["name"]]
    assert reuse
    for row in reuse:  # the shared weight's gradient against fp32, both ways
        for key in ("grad_max_abs_err_ours", "grad_max_rel_err_ours",
                    "grad_max_abs_err_keras", "grad_max_rel_err_keras"):
            assert math.isfinite(row[key]) and 0 <= row[key] < 0.1, (key, row)


def test_gpu_benchmark_without_a_gpu_says_so_and_exits_0(monkeypatch, capsys, tmp_path):
    from benchmarks import gpu

    monkeypatch.setattr(gpu, "gpu_devices", lambda: [])
    assert bench_run.main(["--gpu", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == gpu.NO_GPU
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # a benchmark
def test_gpu_benchmark_models_and_steps_run_on_cpu(monkeypatch, tmp_path):
    """The --gpu code path at tiny sizes on the CPU (internal --allow-cpu), so it can't rot."""
    from benchmarks import gpu

    monkeypatch.setattr(gpu, "gpu_devices", lambda: [])
    assert bench_run.main(["--gpu", "--allow-cpu", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results_gpu.json").read_text())["rows"]
    configs = {(r["name"].split()[0], r["name"].split()[1].rstrip(","),
                "jit_compile=True" in r["name"]) for r in rows}
    assert {c[0] for c in configs} == set(gpu.MODELS)
    assert {c[1] for c in configs} == {"float16", "bfloat16"}
    assert {c[2] for c in configs} == {False, True}
    for row in rows:
        for key in ("ours_ms", "baseline_ms", "reverse_ms", "fp32_ms", "ratio"):
            assert _positive(row[key]), (key, row)
        # a 16-bit copy (2 bytes) on top of the fp32 weight + Adam slots of the fp32 run
        extra = row["bytes_per_param_pseudo_fp16"] - row["bytes_per_param_fp32"]
        assert 1.9 < extra < 2.1, row
        assert row["peak_step_mib_fp32"] is None  # no device memory stats on the CPU


def test_verdict_is_decided_only_by_the_whole_interval():
    from benchmarks.comparisons import with_target

    def verdict(low, ratio, high):
        row = {"name": "r", "ratio": ratio, "ratio_ci95": [low, high]}
        return with_target(row, 1.00)["verdict"], with_target(row, 1.00)["within_target"]

    assert verdict(0.95, 0.97, 0.99) == ("within", True)
    assert verdict(0.98, 0.99, 1.02) == ("undecided", True)
    assert verdict(0.99, 1.01, 1.03) == ("undecided", False)
    assert verdict(1.01, 1.03, 1.05) == ("over", False)


def test_median_interval_covers_the_true_median_95_percent_of_the_time():
    from benchmarks._timing import median_ci95

    rng = np.random.default_rng(0)
    trials = 4000
    for n in (11, 41, 81):
        covered = sum(low <= 0.0 <= high for low, high in (
            median_ci95(rng.standard_normal(n)) for _ in range(trials)))
        # The binomial interval is conservative by at most a couple of percent at these n;
        # 4 standard errors of the estimated coverage (sqrt(.95 * .05 / trials)) on top.
        tolerance = 4 * math.sqrt(0.95 * 0.05 / trials)
        assert 0.95 - tolerance <= covered / trials <= 0.99, (n, covered / trials)
    assert median_ci95([3.0, 1.0]) == (1.0, 3.0)  # too few rounds: the whole range


@pytest.mark.slow  # a benchmark
def test_op_profile_attributes_the_finite_check_to_tfinit(capsys):
    """`python -m benchmarks.profile_ops` reads real tf.profiler traces: the step's MatMuls
    appear on both sides; float16: the finiteness check's sums only on tfinit's (Keras's
    LossScaleOptimizer checks element by element)."""
    from benchmarks import profile_ops

    assert profile_ops.main(["--dtype", "float16", "--width", "16", "--batch", "8", "--rounds", "1",
                             "--top", "100"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith(("op:", "step")):
            rows[cells[0]] = [float(c) for c in cells[1:]]
    # oneDNN builds on CPUs with AVX512 run TensorFlow's MatMul as _MklMatMul.
    matmul = rows.get("op:MatMul") or rows["op:_MklMatMul"]
    assert matmul[2] == matmul[3] == 8  # 3 Dense: 2 + 3 * 2 MatMuls
    assert matmul[0] > 0 and matmul[1] > 0
    assert rows["op:Sum"][2] == 0 and rows["op:Sum"][3] >= 6  # one sum per gradient
    assert rows["step"][0] > 0 and rows["step"][1] > 0


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_op_profile_bfloat16_has_no_finite_check_on_either_side(capsys):
    """bfloat16: MasterWeightOptimizer's default is no loss scaling and no finiteness check,
    as Keras's mixed_bfloat16: no reduction of the gradients on either side."""
    from benchmarks import profile_ops

    assert profile_ops.main(["--dtype", "bfloat16", "--width", "16", "--batch", "8",
                             "--rounds", "1", "--top", "100"]) == 0
    ops = set()
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("op:"):
            ops.add(cells[0])
            assert cells[0] not in ("op:Sum", "op:IsFinite", "op:All"), cells
    assert "op:MatMul" in ops or "op:_MklMatMul" in ops


def test_markdown_table_lists_union_of_columns():
    md = bench_run.to_markdown([{"name": "a", "x": 1}, {"name": "b", "y": 2}])
    assert md.splitlines() == ["| name | x | y |", "|---|---|---|", "| a | 1 |  |",
                               "| b |  | 2 |"]


@pytest.mark.slow  # a benchmark: peak memory of subprocess loads
def test_given_tensor_fill_loads_with_one_copy():
    """Peak memory (not time): a 32 MiB GivenTensorFill variable costs about one array.

    tf.Variable(array) holds two copies at its peak; GivenTensorFill hands TF one private
    copy that the variable adopts. 1.5 separates one copy from two with room for allocator
    slack; the peak must be reached during the load for the figure to be exact.
    """
    from benchmarks import fills

    (row,) = fills.load_memory("smoke", methods=["GivenTensorFill"], mebi_floats=8)
    assert not row["bound_only"], row
    assert 0.95 <= row["copies"] < 1.5, row


def test_self_timed_contenders_report_the_seconds_they_return():
    from benchmarks._timing import compare

    row = compare("x", lambda: 0.002, lambda: 0.004, repeats=5, self_timed=True)
    assert row["ours_ms"] == 2.0 and row["baseline_ms"] == 4.0 and row["ratio"] == 0.5


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_split_master_rows_hold_12_and_8_bytes_per_parameter_and_compare_quality(results):
    rows = {r["name"].split(": ", 1)[1]: r for r in results[0]["sections"]["split_master"]
            if r["name"].startswith("MLP width 16, Adam: ")}
    # Adam: weight 4 (Keras) / 2 + 4 (fp32 master) / 2 + 2 (split) + two 4-byte slots (or
    # two 2-byte ones with bfloat16 state); a few scalar variables on top
    expected = {"mixed_bfloat16 (Keras)": 12, "pseudo_fp16 fp32-master": 14, "split": 12,
                "split + bf16 state": 8}
    for scheme, want in expected.items():
        assert rows[scheme]["bytes_per_param"] == pytest.approx(want, abs=0.05), scheme
    assert rows["split"]["int16_bytes_per_param"] == 2.0
    assert "int16_bytes_per_param" not in rows["pseudo_fp16 fp32-master"]
    timed = [r for r in results[0]["sections"]["split_master"] if "ratio" in r]
    assert len(timed) == 1 and _positive(timed[0]["ratio_vs_fp32_master"])
    quality = {r["name"].split(": ", 1)[1]: r for r in results[0]["sections"]["split_master"]
               if r["name"].startswith("fine-tune")}
    assert len(quality) == 6
    # plain bfloat16 weights lose every update of fine-tuning at lr 1e-4; masters keep them
    assert quality["bfloat16 (Keras, no master)"]["final_over_first"] == 1.0
    for scheme in ("pseudo_fp16 fp32-master", "split", "split + bf16 state"):
        assert quality[scheme]["final_over_first"] < 0.9, scheme


def _run_jax_fills(backend, code):
    """``code`` in a fresh Python with KERAS_BACKEND=``backend`` on the CPU; TensorFlow is
    blocked (tests/_no_tensorflow.py) when the backend is jax."""
    block = ("import sys; sys.path.insert(0, 'tests'); import _no_tensorflow; "
             "_no_tensorflow.install(); " if backend == "jax" else "import sys; ")
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", block + code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a benchmark, in a subprocess
def test_jax_fills_benchmark_runs_on_cpu_without_tensorflow(tmp_path):
    """`python -m benchmarks --jax-fills --allow-cpu` with `import tensorflow` failing: the
    rows of every pair, and a seeded fill made twice on the CPU is the same bits."""
    from benchmarks import fills_jax

    done = _run_jax_fills("jax", "from benchmarks.run import main; sys.exit(main("
                          f"['--jax-fills', '--allow-cpu', '--out', {str(tmp_path)!r}]))")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results_gpu_jax.json").read_text())
    md = (tmp_path / "results_gpu_jax.md").read_text()
    assert done.stdout.strip() == md.strip()
    machine, size = results["machine"], fills_jax.SIZES["cpu"]
    assert machine["tensorflow_imported"] is False and machine["jax_devices"] == ["cpu:0"]
    assert "--allow-cpu" in machine["device"] and results["sizes"]["side"] == size["side"]
    side = size["side"]
    assert [r["name"] for r in results["rows"]] == [
        f"{ours} vs {base} {side}x{side} float32" for ours, _, base, _ in fills_jax.PAIRS]
    for row in results["rows"]:
        for key in ("ours_ms", "baseline_ms", "ratio"):
            assert _positive(row[key]), (key, row)
        assert row["ratio_iqr"][0] <= row["ratio"] <= row["ratio_iqr"][1], row
        assert row["ratio_ci95"][0] <= row["ratio"] <= row["ratio_ci95"][1], row
        assert row["repeats"] == size["repeats"] and row["ours_devices"] == ["cpu:0"], row
        assert f"| {row['name']} |" in md
    checks = results["device_vs_cpu"]
    assert [(c["fill"], c["stream"]) for c in checks] == [
        (label, stream) for label, stream, _ in fills_jax.VALUE_CASES]
    assert {c["stream"] for c in checks} == {"keras", "caffe2"}
    for check in checks:  # the CPU against itself: every stream is reproducible bit for bit
        assert check["default_devices"] == check["cpu_devices"] == ["cpu:0"], check
        assert check["shape"] == list(size["check_shape"]), check
        assert check["bitwise_equal"] is True, check
        assert check["max_abs_diff"] == 0.0 and check["n_differ"] == check["max_ulp_diff"] == 0


@pytest.mark.slow  # a subprocess importing TensorFlow
def test_jax_fills_benchmark_on_the_tensorflow_backend_says_how_to_run_it(tmp_path):
    from benchmarks import fills_jax

    done = _run_jax_fills("tensorflow", "import runpy; runpy.run_module("
                          "'benchmarks.fills_jax', run_name='__main__')")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == fills_jax.NOT_JAX.format(backend="tensorflow")
    assert "KERAS_BACKEND=jax python -m benchmarks.fills_jax" in done.stdout


def test_jax_fills_benchmark_refuses_without_jax_or_an_accelerator(monkeypatch, capsys,
                                                                   tmp_path):
    import keras

    from benchmarks import fills_jax

    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    assert fills_jax.main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == fills_jax.NOT_JAX.format(backend="torch")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    monkeypatch.setattr(fills_jax, "accelerated", lambda: False)
    assert bench_run.main(["--jax-fills", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == fills_jax.NO_GPU
    assert not list(tmp_path.iterdir())


def test_benchmark_modules_import_each_other_without_a_cycle():
    """benchmarks/ imports one way: the runner (run, __main__) imports the benchmarks, which
    import shared helpers (_markdown, _timing, ...); nothing imports back up."""
    import ast
    import graphlib

    folder = REPO / "benchmarks"
    graph = {}
    for path in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {a.name.split(".")[1] for a in node.names
                             if a.name.startswith("benchmarks.")}
        graph[path.stem] = imported & {p.stem for p in folder.glob("*.py")}
    assert graph["fills_jax"] and "run" not in graph["fills_jax"], graph["fills_jax"]
    list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a cycle


@pytest.mark.slow  # builds and compiles three models
def test_int8_state_rows_hold_12_8_and_6_bytes_per_parameter(tmp_path):
    """``benchmarks.int8_state --smoke``: a memory row per state dtype (the bytes fixed by
    the dtypes: 12, 8, 6 + the int8 blocks' scales and padding) and one timed row."""
    from benchmarks import int8_state

    assert int8_state.main(["--smoke", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results_int8_state_tensorflow_smoke.json").read_text())
    memory = {r["name"].split(": ", 1)[1]: r for r in rows if "bytes_per_param" in r}
    assert list(memory) == list(int8_state.STATES)
    assert memory["fp32 state"]["bytes_per_param"] == pytest.approx(12.0, abs=0.01)
    assert memory["bf16 state"]["bytes_per_param"] == pytest.approx(8.0, abs=0.01)
    assert 6.0 < memory["int8 state"]["bytes_per_param"] < 6.1
    timed = [r for r in rows if "ratio" in r]
    assert len(timed) == 1 and _positive(timed[0]["ratio"]) and _positive(timed[0]["ours_ms"])

"""The benchmark suite runs end to end (``--smoke``: tiny sizes) and reports what it should.

No timing assertions: smoke figures are meaningless. What is checked: every section and
row is there with the right fields, times and ratios are finite and positive, the memory
figures are exact where they can be (bytes per parameter are fixed by the dtypes).
"""

import json
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

from benchmarks import run as bench_run  # noqa: E402
from benchmarks.training import MODELS  # noqa: E402

SECTIONS = ["fills", "load_memory", "training", "memory", "scaling", "distribute"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert bench_run.main(["--smoke", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    return data, (out / "results.md").read_text()


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_every_section_is_written(results):
    data, md = results
    assert data["mode"] == "smoke"
    assert list(data["sections"]) == SECTIONS
    for name in SECTIONS:
        assert data["sections"][name], name
        assert bench_run.TITLES[name] in md
        for row in data["sections"][name]:
            assert f"| {row['name']} |" in md


def test_timed_rows_have_finite_positive_times_and_ratios(results):
    data, _ = results
    for name in ("fills", "training", "scaling", "distribute"):
        for row in data["sections"][name]:
            for key in ("ours_ms", "baseline_ms", "ratio"):
                assert _positive(row[key]), (name, row)
            for key in [k for k in row if k.startswith("ratio_vs_") or k.endswith("_ms")]:
                assert _positive(row[key]), (name, key, row)
            q1, q3 = row["ratio_iqr"]
            assert 0 < q1 <= row["ratio"] <= q3, row  # the median lies in the middle half


def test_fills_cover_every_pair_and_given_values(results):
    names = [r["name"] for r in results[0]["sections"]["fills"]]
    for fill in ("XavierFill", "MSRAFill", "GaussianFill", "UniformFill", "ConstantFill",
                 "GivenTensorFill"):
        assert any(n.startswith(fill + " vs") or n.startswith(fill + " ->") for n in names), fill


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


def test_scaling_doubles_the_width(results):
    rows = results[0]["sections"]["scaling"]
    for kind in MODELS:
        params = [r["params"] for r in rows if r["name"].startswith(kind + " ")]
        assert len(params) >= 2 and all(b > a for a, b in zip(params, params[1:])), kind


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


def test_load_memory_rows(results):
    rows = results[0]["sections"]["load_memory"]
    assert [r["name"].split(": ", 1)[1] for r in rows][:2] == ["tf.Variable(array)",
                                                               "GivenTensorFill"]
    for row in rows:
        # The variable itself is one copy, so the peak grows by at least the array's bytes.
        assert row["copies"] >= 0.95 and _positive(row["peak_growth_mib"]), row
        assert not row["bound_only"], row  # the peak was reset before the load (Linux)


def test_markdown_table_lists_union_of_columns():
    md = bench_run.to_markdown([{"name": "a", "x": 1}, {"name": "b", "y": 2}])
    assert md.splitlines() == ["| name | x | y |", "|---|---|---|", "| a | 1 |  |",
                               "| b |  | 2 |"]


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

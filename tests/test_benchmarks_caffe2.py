"""``benchmarks.caffe2_import`` (full-size Caffe2 nets) at smoke size: every row is there
and says what it should. No timing assertions (smoke figures are meaningless); the memory
rows are checked against their target, which holds at any size."""

import json
import math

import pytest

from benchmarks import caffe2_import
from benchmarks import run as bench_run


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert bench_run.main(["--smoke", "--only", "caffe2_import", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert list(data["sections"]) == ["caffe2_import"]
    assert bench_run.TITLES["caffe2_import"] in (out / "results.md").read_text()
    return data["sections"]["caffe2_import"]


@pytest.mark.slow  # the rows fixture runs the benchmark (about 19 s)
def test_rows_for_both_nets(rows):
    assert [row["name"] for row in rows] == [
        "VGG-19 /64: load_init_net vs bare protobuf parse",
        "VGG-19 /64: load_init_net peak memory",
        "VGG-19 /64: to_keras vs load_init_net + Keras layers by hand + set_weights",
        "ResNet-50 /64: load_init_net vs bare protobuf parse",
        "ResNet-50 /64: load_init_net peak memory",
    ]


@pytest.mark.slow  # the rows fixture runs the benchmark (about 19 s)
def test_timed_rows_have_targets_and_positive_ratios(rows):
    for row in rows:
        if "ratio" in row:
            assert row["target"] in (1.3, 1.5)
            assert row["ours_ms"] > 0 and row["baseline_ms"] > 0 and row["ratio"] > 0
            low, high = row["ratio_ci95"]
            assert low <= row["ratio"] <= high


@pytest.mark.slow  # the rows fixture runs the benchmark (about 19 s)
def test_to_keras_and_the_hand_built_model_agree(rows):
    (row,) = [r for r in rows if "to_keras" in r["name"]]
    assert row["outputs_max_abs_diff"] < 1e-5


@pytest.mark.slow  # the rows fixture runs the benchmark (about 19 s)
def test_memory_rows_compare_the_peak_with_the_floor(rows):
    for row in [r for r in rows if "peak memory" in r["name"]]:
        assert row["peak_growth_mb"] >= 0
        assert math.isclose(row["floor_mb (file + values)"],
                            row["file_mb"] + row["values_mb"], abs_tol=0.11)


@pytest.mark.slow  # over 1 s on 2 cores (the fast loop: README, Development)
def test_load_init_net_peak_memory_is_within_file_plus_twice_the_values(tmp_path):
    """A ResNet-50 of half the widths (6.4 M values, 32 MB): large enough for the figure to
    mean something, small enough for a test."""
    shapes = caffe2_import.resnet50_shapes(2)
    path = tmp_path / "init_net.pb"
    file_bytes = caffe2_import.write_init_net(path, shapes)
    values = sum(math.prod(s) for _, s in shapes)
    assert file_bytes > 5 * values  # 5 bytes a value, plus the ops' names and shapes
    row = caffe2_import._memory_row("ResNet-50 /2", path, file_bytes, values)
    assert row["within_target"], row
    # the arrays themselves are held: the growth is at least the values' bytes
    assert row["peak_growth_mb"] >= 0.95 * row["values_mb"], row

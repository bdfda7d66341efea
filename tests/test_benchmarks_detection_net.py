"""``benchmarks.detection_net`` (the toy Mask R-CNN at wider widths) at smoke size: both rows
are there, and the converted backbone computes what the same layers written in Keras do.
No timing assertions (smoke figures are meaningless)."""

import keras
import pytest

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="detection nets convert on TensorFlow only")


@pytest.mark.slow  # converts the net twice and times it (about 25 s on 2 cores)
def test_rows_and_the_backbone_check():
    from benchmarks import detection_net

    backbone, whole = detection_net.run("smoke")
    assert backbone["name"].startswith("toy Mask R-CNN backbone + RPN head (8 channels")
    assert backbone["max_abs_difference"] < 1e-4  # the same layers, the same weights
    assert "100 detections" in whole["name"]
    for row in (backbone, whole):
        assert row["ours_ms"] > 0 and row["baseline_ms"] > 0 and row["ratio"] > 0

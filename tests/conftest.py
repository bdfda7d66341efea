"""Shared test setup: quiet TensorFlow logs and locate ../shared (the reference facts)."""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def caffe2_reference():
    """The folder of Caffe2 reference facts; a missing one fails loudly, never skips."""
    folder = SHARED / "reference" / "caffe2"
    assert folder.is_dir(), f"Caffe2 reference facts not found at {folder} (shared/ must sit beside the repo)"
    return folder

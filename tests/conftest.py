"""Shared test setup: quiet TensorFlow logs. Test data lives in tests/data (never ../shared)."""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]

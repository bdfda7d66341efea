"""Shared test setup: quiet TensorFlow logs; REPO. Test data lives in tests/data, in the repo."""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]

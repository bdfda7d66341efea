"""A small run of the detection-case fuzzer (tests/caffe2/detfuzz.py): every mutant of the
detection cases converts and runs to outputs that pass the checks, or is refused with a
message naming an op; never a raw TensorFlow error, a NaN from finite input or an output
out of range. ``python tests/caffe2/detfuzz.py --count N`` runs more."""

import importlib.util

import keras
import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="the detection layers run on TensorFlow only")


def _detfuzz():
    spec = importlib.util.spec_from_file_location(
        "detfuzz", REPO / "tests" / "caffe2" / "detfuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 24 single-op mutants, each converted and run (about 3 s on 2 cores)
def test_detection_mutants_pass_or_are_refused():
    tally = _detfuzz().fuzz(24, seed=0, nets=False)
    assert tally["defect"] == [], "\n".join(tally["defect"])
    assert tally["pass"] >= 4 and tally["refusal"] >= 4, tally  # both kinds are exercised


def test_mutants_are_seeded():
    detfuzz = _detfuzz()
    first = [(m.case, m.kind, m.what) for m, _ in detfuzz.mutants(6, seed=3, nets=False)]
    again = [(m.case, m.kind, m.what) for m, _ in detfuzz.mutants(6, seed=3, nets=False)]
    other = [(m.case, m.kind, m.what) for m, _ in detfuzz.mutants(6, seed=4, nets=False)]
    assert first == again and first != other

"""Array helpers shared by the test modules of every backend."""

import keras
import numpy as np


def to_numpy(x):
    """``x`` (a tensor, a variable or an array of any backend) as a NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(x))


def assert_same_bits(have, want):
    """``have`` and ``want`` hold as many arrays, at least one, each pair equal bit for bit
    (dtype, shape and bytes): a list cut short, or empty, fails."""
    have, want = [to_numpy(a) for a in have], [to_numpy(b) for b in want]
    assert len(have) == len(want) > 0, f"{len(have)} arrays against {len(want)}"
    for i, (a, b) in enumerate(zip(have, want, strict=True)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (i, a.dtype, a.shape, b.dtype, b.shape)
        assert a.tobytes() == b.tobytes(), f"array {i} differs"

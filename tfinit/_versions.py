"""The Keras and TensorFlow versions tfinit is tested on, checked at import.

The range is what CI runs: the suite on the newest pair, and again on the oldest pair in a
virtualenv with exactly the lower bounds (``.ci/run``; docs/development.md lists the matrix).
CI's Keras-nightly pass runs a pinned dev build of the next release, which imports with the
warning below until that release is tested and claimed. tfinit touches Keras/TensorFlow
internals in one module (``tfinit/_keras_internals.py``), so a release past the upper bound
is untested ground: it imports with a warning; a release below the lower bound is refused.
"""

import re
import warnings

KERAS = ("3.10.0", "3.16")  # [oldest tested, first untested)
TENSORFLOW = ("2.16.2", "2.22")


def _parse(version):
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check(package, version, tested=None):
    """Refuse ``version`` of ``package`` below the tested range; warn above it.

    Raises:
        ImportError: ``version`` is older than the oldest tested release.
    """
    low, high = tested or {"keras": KERAS, "tensorflow": TENSORFLOW}[package]
    if _parse(version) < _parse(low):
        raise ImportError(
            f"tfinit needs {package} >= {low} (tested from {package} {low} to below {high}); "
            f"{package} {version} is installed. Upgrade it: pip install '{package}>={low}'."
        )
    if _parse(version) >= _parse(high):
        warnings.warn(
            f"tfinit is tested with {package} >= {low} and < {high}; {package} {version} is "
            "installed and untested (tfinit's Keras/TensorFlow touchpoints may have moved).",
            stacklevel=3,
        )


def check_installed():
    """Check the installed Keras, and TensorFlow when it is Keras's backend."""
    import keras

    check("keras", keras.__version__)
    if keras.backend.backend() == "tensorflow":  # Keras's TF backend imported TensorFlow
        import tensorflow as tf

        check("tensorflow", tf.__version__)


check_installed()

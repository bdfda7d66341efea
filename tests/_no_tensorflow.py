"""``import tensorflow`` failing as when TensorFlow is not installed (for the JAX checks).

tfinit's fills, initializer classes and Caffe2 reader and converter claim to need no
TensorFlow on the JAX backend; CI's JAX pass installs this finder
(``TFINIT_TEST_WITHOUT_TENSORFLOW=1``, see conftest.py) so that claim is what is tested.
"""

import sys


class NoTensorFlow:
    """A meta-path finder under which ``import tensorflow`` fails as when not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r} (TensorFlow blocked for "
                                      "this test: tfinit must not need it here)", name=name)
        return None


def install():
    """Make every later ``import tensorflow`` in this process fail."""
    if not any(isinstance(finder, NoTensorFlow) for finder in sys.meta_path):
        sys.meta_path.insert(0, NoTensorFlow())

"""``import tensorflow`` failing as when TensorFlow is not installed (for the JAX and torch checks).

tfinit's fills, initializer classes, Caffe2 reader and converter and the keras.Variable
mixed precision claim to need no TensorFlow on the JAX and torch backends; CI's JAX and torch
passes install this finder (``TFINIT_TEST_WITHOUT_TENSORFLOW=1``, see conftest.py) so that
claim is what is tested.

A probe ``importlib.util.find_spec("tensorflow")`` gets a spec without an origin (torch's
dynamo probes optional packages so and skips one without a file); the import itself fails
with ``ModuleNotFoundError``, as when TensorFlow is absent.
"""

import importlib.abc
import importlib.machinery
import sys


class NoTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta-path finder under which ``import tensorflow`` fails as when not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            return importlib.machinery.ModuleSpec(name, self)  # no origin: no file
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (TensorFlow blocked for "
                                  "this test: tfinit must not need it here)", name=spec.name)

    def exec_module(self, module):
        raise AssertionError("unreachable: create_module refuses every blocked module")


def install():
    """Make every later ``import tensorflow`` in this process fail."""
    if not any(isinstance(finder, NoTensorFlow) for finder in sys.meta_path):
        sys.meta_path.insert(0, NoTensorFlow())

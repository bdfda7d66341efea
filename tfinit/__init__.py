"""tfinit: Caffe2's parameter-initialization semantics for TensorFlow 2 / Keras 3.

``import tfinit`` registers every Caffe2 fill operator as a Keras initializer, so
``Dense(4, kernel_initializer="XavierFill")`` works. It imports TensorFlow only on the
TensorFlow backend's paths: on JAX (or torch) the fills, the initializer family's Keras
classes, the registry and ``tfinit.caffe2``'s NetDef reading work without it.
``tfinit.mixed_precision`` and ``tfinit.distribute`` load on first use and need the
TensorFlow backend (see ``tfinit._backend``).
"""

import importlib

from tfinit import _versions  # noqa: F401  (first: refuses an untested Keras/TensorFlow)
from tfinit import _backend
from tfinit.fills import (
    ConstantFill,
    DiagonalFill,
    GaussianFill,
    GivenTensorBoolFill,
    GivenTensorDoubleFill,
    GivenTensorFill,
    GivenTensorInt16Fill,
    GivenTensorInt64Fill,
    GivenTensorIntFill,
    MSRAFill,
    RangeFill,
    UniformFill,
    UniformIntFill,
    UniqueUniformFill,
    XavierFill,
    fill_ops,
    get,
)
from tfinit.parameter_info import ParameterInfo
from tfinit.initializers import (
    ExternalInitializer,
    Initializer,
    PseudoFP16Initializer,
    ReversePseudoFP16Initializer,
    update_initializer,
)
# The Caffe2 package registers its init_net reader with tfinit.sources (ExternalInitializer
# of a .pb file); it needs no TensorFlow.
from tfinit import caffe2  # noqa: F401
from tfinit._parameter_infos import parameter_infos

#: tfinit's submodules that run on some backends only, and those backends
_BACKEND_SUBMODULES = {
    "mixed_precision": ("tensorflow",) + _backend.KERAS_VARIABLE_MIXED_PRECISION,
    "distribute": ("tensorflow",),
}
# Imported where they run, so that their Keras registrations (MasterWeightOptimizer,
# PairPolicy) are behind a bare `import tfinit` and a `.keras` file with masters loads after it.
_IMPORTED_SUBMODULES = [name for name, backends in _BACKEND_SUBMODULES.items()
                        if _backend.name() in backends]
for _name in _IMPORTED_SUBMODULES:
    importlib.import_module(f"tfinit.{_name}")

__version__ = "0.1.0"

__all__ = [
    "ConstantFill", "DiagonalFill", "GaussianFill", "GivenTensorBoolFill", "GivenTensorDoubleFill",
    "GivenTensorFill", "GivenTensorInt16Fill", "GivenTensorInt64Fill", "GivenTensorIntFill",
    "MSRAFill", "RangeFill", "UniformFill", "UniformIntFill", "UniqueUniformFill", "XavierFill",
    "ExternalInitializer", "Initializer", "ParameterInfo", "PseudoFP16Initializer",
    "ReversePseudoFP16Initializer", "fill_ops", "get", "parameter_infos", "update_initializer",
]
__all__ += _IMPORTED_SUBMODULES  # so that `from tfinit import *` works on every backend


def __getattr__(name):
    """A submodule this backend does not run: the ``RuntimeError`` of ``tfinit._backend``
    naming the backend it needs (PEP 562; reached only when not yet imported).
    """
    if name in _BACKEND_SUBMODULES:
        _backend.tensorflow(f"tfinit.{name}")
        return importlib.import_module(f"tfinit.{name}")
    raise AttributeError(f"module 'tfinit' has no attribute {name!r}")

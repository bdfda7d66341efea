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

#: the submodules that need TensorFlow
_TF_SUBMODULES = ("mixed_precision", "distribute")
if _backend.name() == "tensorflow":
    # Keras has loaded TensorFlow already; importing them now keeps their Keras
    # registrations (MasterWeightOptimizer, PseudoFP16Policy) behind a bare `import tfinit`.
    from tfinit import distribute, mixed_precision  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "ConstantFill", "DiagonalFill", "GaussianFill", "GivenTensorBoolFill", "GivenTensorDoubleFill",
    "GivenTensorFill", "GivenTensorInt16Fill", "GivenTensorInt64Fill", "GivenTensorIntFill",
    "MSRAFill", "RangeFill", "UniformFill", "UniformIntFill", "UniqueUniformFill", "XavierFill",
    "ExternalInitializer", "Initializer", "ParameterInfo", "PseudoFP16Initializer",
    "ReversePseudoFP16Initializer", "fill_ops", "get", "parameter_infos", "update_initializer",
]
if _backend.name() == "tensorflow":  # so that `from tfinit import *` works on every backend
    __all__ += list(_TF_SUBMODULES)


def __getattr__(name):
    """``tfinit.mixed_precision`` / ``tfinit.distribute`` off the TensorFlow backend: the
    ``RuntimeError`` of ``tfinit._backend`` (PEP 562; reached only when not yet imported).
    """
    if name in _TF_SUBMODULES:
        if not (name == "mixed_precision"
                and _backend.name() in _backend.KERAS_VARIABLE_MIXED_PRECISION):
            _backend.tensorflow(f"tfinit.{name}")  # mixed_precision also runs on JAX, torch
        return importlib.import_module(f"tfinit.{name}")
    raise AttributeError(f"module 'tfinit' has no attribute {name!r}")

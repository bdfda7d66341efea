"""tfinit: Caffe2's parameter-initialization semantics for TensorFlow 2 / Keras 3.

``import tfinit`` registers every Caffe2 fill operator as a Keras initializer, so
``Dense(4, kernel_initializer="XavierFill")`` works.
"""

from tfinit import _versions  # noqa: F401  (first: refuses an untested Keras/TensorFlow)
from tfinit.registry import fill_ops
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
from tfinit import mixed_precision
from tfinit import distribute

__version__ = "0.1.0"

__all__ = [
    "ConstantFill", "DiagonalFill", "GaussianFill", "GivenTensorBoolFill", "GivenTensorDoubleFill",
    "GivenTensorFill", "GivenTensorInt16Fill", "GivenTensorInt64Fill", "GivenTensorIntFill",
    "MSRAFill", "RangeFill", "UniformFill", "UniformIntFill", "UniqueUniformFill", "XavierFill",
    "ExternalInitializer", "Initializer", "ParameterInfo", "PseudoFP16Initializer",
    "ReversePseudoFP16Initializer", "distribute", "fill_ops", "get", "mixed_precision",
    "update_initializer",
]

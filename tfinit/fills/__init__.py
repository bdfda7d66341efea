"""Caffe2's fill operators as Keras 3 initializers: the public home of every fill.

Each class has the Caffe2 operator's name, argument names and maths (see
``docs/caffe2-semantics.md``), takes Keras's ``(shape, dtype=None)`` call,
and is registered for Keras serialization both as ``"tfinit>Name"`` and as the
bare ``"Name"``. Fills use ``keras.ops`` / ``keras.random`` only, so they run on
every Keras 3 backend.

Dtypes: the call's dtype (what the layer asks for) wins; otherwise the fill's own
dtype (``ConstantFill(dtype=...)``, the typed ``GivenTensor*Fill`` variants), then
``keras.config.floatx()``. Deterministic values are cast only when the cast is
exact: integers must fit the target, floats going to an integer or bool dtype must
be integral (0/1 for bool), integers going to a float dtype must be representable,
and floats going to a narrower float dtype are rounded to nearest but must stay
finite. Anything else is a ``ValueError``.

Shapes with a zero dimension give an empty tensor: there is nothing to draw (Caffe2
itself dies with SIGFPE on some of them).

Where the code lives (this module re-exports it, so ``tfinit.fills.X`` keeps working):

- ``tfinit.constant_fills``: the fills that draw nothing (Constant, Range, Diagonal,
  GivenTensor*);
- ``tfinit.random_fills``: the random fills; their stream (``rng="keras"`` or
  ``"caffe2"``) is a strategy object of ``tfinit._streams``;
- ``tfinit._fill_base``: the ``Fill`` base class; ``tfinit._args`` / ``tfinit._exact``:
  argument checks and exact casts; ``tfinit._backend``: the backend-specific pieces;
- ``tfinit.registry``: the op-name table and ``get``.
"""

from tfinit._backend import tf_tensor_from_numpy
from tfinit._exact import check_exact_cast
from tfinit._fill_base import Fill
from tfinit.constant_fills import (
    ConstantFill,
    DiagonalFill,
    GivenTensorBoolFill,
    GivenTensorDoubleFill,
    GivenTensorFill,
    GivenTensorInt16Fill,
    GivenTensorInt64Fill,
    GivenTensorIntFill,
    RangeFill,
)
from tfinit.random_fills import (
    RNGS,
    GaussianFill,
    MSRAFill,
    RandomFill,
    UniformFill,
    UniformIntFill,
    UniqueUniformFill,
    XavierFill,
)
from tfinit.registry import get

__all__ = [
    "RNGS", "ConstantFill", "DiagonalFill", "Fill", "GaussianFill", "GivenTensorBoolFill",
    "GivenTensorDoubleFill", "GivenTensorFill", "GivenTensorInt16Fill", "GivenTensorInt64Fill",
    "GivenTensorIntFill", "MSRAFill", "RandomFill", "RangeFill", "UniformFill",
    "UniformIntFill", "UniqueUniformFill", "XavierFill", "check_exact_cast", "get",
    "tf_tensor_from_numpy",
]

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

The package (this module is its public face; ``tfinit.fills.X`` and ``tfinit.X`` work):

- ``registry``: the op-name table (``fill_ops``, ``get``, ``lookup``, ``build``), public;
  ``tfinit.registry`` is the same module;
- ``_base``: the ``Fill`` base class and the registration of every fill (Keras
  serialization as ``"tfinit>Name"`` and the bare name);
- ``_constant``: the fills that draw nothing (Constant, Range, Diagonal, GivenTensor*);
- ``_random``: the random fills; their stream (``rng="keras"`` or ``"caffe2"``) is a
  strategy object of ``_streams``, Caffe2's CPU stream is replayed by ``_caffe2_rng``.

- ``_exact``: exact casts (a value becomes a tensor only when the dtype holds it).

Outside the package: ``tfinit._args`` (argument checks),
``tfinit._fans`` (fan rules, layouts), ``tfinit._backend`` (the backend-specific pieces).
"""

import sys

from tfinit._backend import tf_tensor_from_numpy
from tfinit.fills._exact import check_exact_cast
from tfinit.fills import registry  # noqa: F401  (the public submodule; also tfinit.registry)
from tfinit.fills._base import Fill
from tfinit.fills._base import distributed  # noqa: F401  (for tfinit.initializers)
from tfinit.fills._constant import (
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
from tfinit.fills._random import (
    RNGS,
    GaussianFill,
    MSRAFill,
    RandomFill,
    UniformFill,
    UniformIntFill,
    UniqueUniformFill,
    XavierFill,
)
from tfinit.fills.registry import fill_ops, get

# tfinit 0.1.0's module paths name the same modules (the same objects, not copies):
# `tfinit.registry` is public; `tfinit.constant_fills` / `tfinit.random_fills` were where the
# fills lived (and what 0.1.0's saved configs name as their "module"; Keras itself finds a
# fill by its registered name, "tfinit>XavierFill").
_OLD_PATHS = {"registry": "tfinit.fills.registry", "constant_fills": "tfinit.fills._constant",
              "random_fills": "tfinit.fills._random"}
for _old, _new in _OLD_PATHS.items():
    sys.modules.setdefault(f"tfinit.{_old}", sys.modules[_new])
    setattr(sys.modules["tfinit"], _old, sys.modules[_new])
del _old, _new

__all__ = [
    "RNGS", "ConstantFill", "DiagonalFill", "Fill", "GaussianFill", "GivenTensorBoolFill",
    "GivenTensorDoubleFill", "GivenTensorFill", "GivenTensorInt16Fill", "GivenTensorInt64Fill",
    "GivenTensorIntFill", "MSRAFill", "RandomFill", "RangeFill", "UniformFill",
    "UniformIntFill", "UniqueUniformFill", "XavierFill", "check_exact_cast", "fill_ops", "get",
    "tf_tensor_from_numpy",
]

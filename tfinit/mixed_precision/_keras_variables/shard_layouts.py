"""ZeRO-1 on Keras's JAX backend: the layout of a master sharded over a mesh axis.

``MasterWeightOptimizer(inner, shard_over="batch")`` keeps what each device must hold whole
(the 16-bit copies the layers compute with, in the layout Keras gave them) apart from what
only the optimizer step touches: the fp32 masters (a split pair: its int16 remainders and its
scratch master) and the inner optimizer's state, which follows its target's layout. Those
are sharded over the named mesh axis as well, on the rule of :func:`sharded_layout`:

- the first dimension the layout leaves whole whose size the axis size divides takes the axis;
- else the first dimension already sharded (a model axis) whose size the product of its axes'
  sizes and the axis size divides takes it too (``("model", "batch")``);
- else (no such dimension: a bias of odd length, a scalar) the layout stays as Keras gave it,
  and the variable is stored whole on every device of the axis, as without ``shard_over``.

A layout that already uses the axis is kept. The step's arithmetic is element-wise, so each
device updates its slice of a master and the copies are gathered back (16-bit) by XLA.
"""

import math

import keras
import numpy as np

from tfinit import _keras_internals as internals
from tfinit.mixed_precision import _backend_choice as backend_choice

_WHO = "MasterWeightOptimizer"


def mesh_for(shard_over):
    """The active distribution's ``DeviceMesh``, which must have the axis ``shard_over``.

    Raises:
        ValueError: no ``keras.distribution`` is active, or its mesh has no such axis.
    """
    distribution = keras.distribution.distribution()
    if distribution is None:
        raise ValueError(
            f"{_WHO}: Argument `shard_over={shard_over!r}` names a device mesh axis, but no "
            "keras.distribution is active. Set one before building the optimizer, e.g. "
            "keras.distribution.set_distribution(keras.distribution.DataParallel()) (its "
            "axis is 'batch'), or leave shard_over=None.")
    mesh = distribution.device_mesh
    if shard_over not in mesh.axis_names:
        raise ValueError(
            f"{_WHO}: Argument `shard_over` must be an axis of the active distribution's "
            f"device mesh, one of {list(mesh.axis_names)}. Received: shard_over={shard_over!r}")
    return mesh


def shard_over_here(shard_over):
    """Whether a saved optimizer's ``shard_over`` applies here: JAX, an active distribution
    whose mesh has that axis."""
    distribution = (keras.distribution.distribution()
                    if backend_choice.NAME == "jax" else None)
    return distribution is not None and shard_over in distribution.device_mesh.axis_names


def _axes_of(entry):
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def _entries(layout, rank):
    """The mesh axes of each dimension of ``layout`` (a ``TensorLayout``, a
    ``jax.sharding.NamedSharding`` or None: whole on every device)."""
    if layout is None:
        return [None] * rank
    axes = layout.axes if isinstance(layout, keras.distribution.TensorLayout) else layout.spec
    return list(axes) + [None] * (rank - len(axes))


def sharded_layout(layout, shape, mesh, axis):
    """``layout`` with ``axis`` added on the module docstring's rule, for a variable of
    ``shape`` on ``mesh`` (a ``keras.distribution.DeviceMesh``): a
    ``jax.sharding.NamedSharding`` (a dimension may take two axes, which a ``TensorLayout``
    cannot say), or ``layout`` itself when no dimension takes the axis."""
    from jax.sharding import NamedSharding, PartitionSpec

    entries = _entries(layout, len(shape))
    if any(axis in _axes_of(entry) for entry in entries):
        return layout
    sizes = dict(zip(mesh.axis_names, mesh.shape, strict=True))
    whole = [i for i, entry in enumerate(entries) if entry is None]
    sharded = [i for i, entry in enumerate(entries) if entry is not None]
    for i in whole + sharded:
        parts = _axes_of(entries[i]) + (axis,)
        if shape[i] % math.prod(sizes[name] for name in parts) == 0:
            entries[i] = axis if len(parts) == 1 else parts
            return NamedSharding(mesh.backend_mesh, PartitionSpec(*entries))
    return layout


def shard(variables, mesh, axis):
    """Lay each of ``variables`` (a pair's stored fp32 master or remainder, its scratch
    master) out on :func:`sharded_layout` of its current layout (its value moves)."""
    for variable in variables:
        layout = internals.variable_layout(variable)
        new = sharded_layout(layout, tuple(variable.shape), mesh, axis)
        if new is not layout:
            internals.set_variable_layout(variable, new)


def to_numpy(value):
    """``value`` whole, as numpy, also when its pieces live in several processes (a master
    sharded over a mesh axis that spans hosts: every process gathers it, collectively)."""
    if getattr(value, "is_fully_addressable", True):
        return keras.ops.convert_to_numpy(value)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(value, tiled=True)


def save_gathered(variables, store):
    """Keras's ``Optimizer.save_own_variables`` of ``variables``, each gathered whole first
    (:func:`to_numpy`), so a state sharded over processes is written as one array."""
    for index, variable in enumerate(variables):
        store[str(index)] = np.asarray(to_numpy(variable.value))


def laid_out(variable, value):
    """``value`` constrained to ``variable``'s layout (in a compiled step: a sharding
    constraint, so XLA gathers or slices there), or ``value`` when it has none."""
    layout = internals.variable_layout(variable)
    if layout is None:
        return value
    return keras.distribution.distribute_tensor(value, layout)

"""The chosen backend's modules (``_backend_choice``): what ``scope`` and
``MasterWeightOptimizer``, each written once above this module, ask of it, and the pair
functions the public functions over pairs use.

- ``scope_steps``: the steps of ``scope`` that differ (``check``, ``strategy``,
  ``creating``, ``after_build``, ``adopt_model``, ``after_exit``);
- ``BackendOptimizer``: ``MasterWeightOptimizer``'s pairs and step.

Each backend folder's ``pair_records`` gives the same five functions over its variables:

- ``pair_of(variable)``: the pair record on a variable, or None;
- ``pair_pending()``: make the pairs still waiting for their layers' weights (on the
  ``keras.Variable`` backends a pair is made from a built layer; on TensorFlow, when its
  variable is created: nothing waits);
- ``refresh(pairs)``: copy <- cast(master), in any distribution context;
- ``master_for_file(value)``: what a Keras weights file stores for a value;
- ``replica_arrays(variable)``: its per-replica (per-device) values, numpy.
"""

from tfinit.mixed_precision import _backend_choice as backend_choice
from tfinit.mixed_precision._common import pair_policy

if backend_choice.KERAS_VARIABLES:
    # Keras's JAX or torch backend (no TensorFlow): the same public names;
    # docs/mixed-precision.md#on-kerass-jax-backend lists what differs there.
    from tfinit.mixed_precision._keras_variables import scope_steps
    from tfinit.mixed_precision._keras_variables.optimizer import BackendOptimizer
    from tfinit.mixed_precision._keras_variables.pair_records import (
        master_for_file, pair_of, pair_pending, refresh, replica_arrays)
else:
    # Importing the folder refuses another Keras backend.
    from tfinit.mixed_precision._tensorflow import scope_steps
    from tfinit.mixed_precision._tensorflow.optimizer import BackendOptimizer
    from tfinit.mixed_precision._tensorflow.pair_records import (
        master_for_file, pair_of, pair_pending, refresh, replica_arrays)

# No variable creator on JAX and torch: layers build fp32 weights and pair up once built.
pair_policy.layers_build_masters(backend_choice.KERAS_VARIABLES)

__all__ = ["BackendOptimizer", "master_for_file", "pair_of", "pair_pending", "refresh",
           "replica_arrays", "scope_steps"]

"""The chosen backend's modules (``_common.backend_choice``): its ``scope``, its
``MasterWeightOptimizer`` and the pair functions the public functions over pairs use.

Each backend folder's ``pair_records`` gives the same five functions over its variables:

- ``pair_of(variable)``: the pair record on a variable, or None;
- ``pair_pending()``: make the pairs still waiting for their layers' weights (on the
  ``keras.Variable`` backends a pair is made from a built layer; on TensorFlow, when its
  variable is created: nothing waits);
- ``refresh(pairs)``: copy <- cast(master), in any distribution context;
- ``master_for_file(value)``: what a Keras weights file stores for a value;
- ``replica_arrays(variable)``: its per-replica (per-device) values, numpy.
"""

from tfinit.mixed_precision._common import backend_choice

if backend_choice.KERAS_VARIABLES:
    # Keras's JAX or torch backend (no TensorFlow): the same public names;
    # docs/mixed-precision.md#on-kerass-jax-backend lists what differs there.
    from tfinit.mixed_precision._keras_variables.optimizer import MasterWeightOptimizer
    from tfinit.mixed_precision._keras_variables.pair_records import (
        master_for_file, pair_of, pair_pending, refresh, replica_arrays)
    from tfinit.mixed_precision._keras_variables.scope import scope
else:
    # TensorFlow last: the API reference (griffe reads the source and keeps a name's last
    # binding) documents this branch. Importing the folder refuses another Keras backend.
    from tfinit.mixed_precision._tensorflow.optimizer import MasterWeightOptimizer
    from tfinit.mixed_precision._tensorflow.pair_records import (
        master_for_file, pair_of, pair_pending, refresh, replica_arrays)
    from tfinit.mixed_precision._tensorflow.scope import scope

__all__ = ["MasterWeightOptimizer", "master_for_file", "pair_of", "pair_pending", "refresh",
           "replica_arrays", "scope"]

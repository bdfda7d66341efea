"""The active backend's pair functions, chosen once: the one place the public functions of
``tfinit.mixed_precision`` learn which backend holds the pairs.

Each backend's pair module gives the same five functions over its variables:

- ``pair_of(variable)``: the pair record on a variable, or None;
- ``pair_pending()``: make the pairs still waiting for their layers' weights (on the
  ``keras.Variable`` backends a pair is made from a built layer; on TensorFlow, when its
  variable is created: nothing waits);
- ``refresh(pairs)``: copy <- cast(master), in any distribution context;
- ``master_for_file(value)``: what a Keras weights file stores for a value;
- ``replica_arrays(variable)``: its per-replica (per-device) values, numpy.
"""

from tfinit import _backend

if _backend.name() in _backend.KERAS_VARIABLE_MIXED_PRECISION:  # JAX, torch: keras.Variable
    from tfinit.mixed_precision._jax_pairs import (master_for_file, pair_of, pair_pending,
                                                   refresh, replica_arrays)
else:
    from tfinit.mixed_precision._pairs import (master_for_file, pair_of, pair_pending,
                                               refresh, replica_arrays)

__all__ = ["master_for_file", "pair_of", "pair_pending", "refresh", "replica_arrays"]

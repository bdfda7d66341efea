"""What Keras's JAX backend does its own way for the ``keras.Variable`` pairs.

The other keras.Variable backend's module defines the same names; ``active`` holds the
chosen backend's.
"""

import jax

#: Keras's optimizers write a variable through ``assign`` (not its tensor in place)
OPTIMIZERS_WRITE_IN_PLACE = False
#: the split master's bit arithmetic runs here (``tfinit._split_master.jax``)
SPLITS_MASTERS = True
#: ``fit``'s compiled step hands the masters in, as optimizer state, to
#: ``compute_loss_and_updates`` (``scope`` reads them there for a penalty on a master)
STEP_HANDS_IN_MASTERS = True
#: the step differentiates ``layer.losses`` as read eagerly (not: its stateless loss)
STEP_DIFFERENTIATES_LAYER_LOSSES = False


def is_traced(value):
    """Whether ``value`` is a JAX tracer (a value of a step being compiled)."""
    return isinstance(value, jax.core.Tracer)


def is_deleted(value):
    """Whether ``value`` is a JAX array whose buffer is gone (donated to a compiled step)."""
    return not is_traced(value) and isinstance(value, jax.Array) and value.is_deleted()

"""What Keras's torch backend does its own way for the ``keras.Variable`` pairs.

``jax`` defines the same names for JAX; ``active`` holds the chosen backend's.
"""

#: Keras's torch optimizers update a variable's tensor in place (no ``assign``): a plain
#: optimizer training a reverse master leaves its copy stale
OPTIMIZERS_WRITE_IN_PLACE = True
#: no split master: its bit arithmetic runs on TensorFlow and JAX only
SPLITS_MASTERS = False
#: the eager step reads the masters from the variables themselves
STEP_HANDS_IN_MASTERS = False
#: the eager step differentiates ``layer.losses``: a penalty on a master must carry its
#: gradient to the copy the optimizer is given the gradient of
STEP_DIFFERENTIATES_LAYER_LOSSES = True


def is_traced(value):
    """Whether ``value`` is a value of a step being compiled: never (eager steps)."""
    return False


def is_deleted(value):
    """Whether ``value``'s buffer is gone: never (no donated buffers)."""
    return False

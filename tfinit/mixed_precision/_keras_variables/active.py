"""The differences of the ``keras.Variable`` backend ``_backend_choice`` chose: ``jax``'s
or ``torch``'s (the same names in both)."""

from tfinit.mixed_precision import _backend_choice as backend_choice

if backend_choice.NAME == "torch":
    from tfinit.mixed_precision._keras_variables.torch import (
        OPTIMIZERS_WRITE_IN_PLACE, SPLITS_MASTERS, STEP_DIFFERENTIATES_LAYER_LOSSES,
        STEP_HANDS_IN_MASTERS, is_deleted, is_traced)
else:
    from tfinit.mixed_precision._keras_variables.jax import (
        OPTIMIZERS_WRITE_IN_PLACE, SPLITS_MASTERS, STEP_DIFFERENTIATES_LAYER_LOSSES,
        STEP_HANDS_IN_MASTERS, is_deleted, is_traced)

__all__ = ["OPTIMIZERS_WRITE_IN_PLACE", "SPLITS_MASTERS", "STEP_DIFFERENTIATES_LAYER_LOSSES",
           "STEP_HANDS_IN_MASTERS", "is_deleted", "is_traced"]

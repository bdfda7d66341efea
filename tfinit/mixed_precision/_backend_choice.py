"""The backend ``tfinit.mixed_precision`` runs on, chosen once from Keras's: the one place
that asks. Every module whose code or imports differ by backend reads it here.

- ``KERAS_VARIABLES``: Keras's JAX or torch backend, whose pairs are made from built layers'
  ``keras.Variable`` objects (the ``_keras_variables`` folder); otherwise TensorFlow, whose
  variable creator makes pairs as variables are created (the ``_tensorflow`` folder).
- ``NAME``: the backend's name (``"tensorflow"``, ``"jax"``, ``"torch"``).
"""

from tfinit import _backend

NAME = _backend.name()
#: pairs are made from built layers' keras.Variable objects (JAX, torch): no variable creator
KERAS_VARIABLES = NAME in _backend.KERAS_VARIABLE_MIXED_PRECISION

"""``tfinit.mixed_precision`` on Keras's TensorFlow backend: pairs made by a variable creator
(``tf.Variable`` records, Keras variables, checkpoint and file hooks), the optimizer's step
(tf.distribute, ``IndexedSlices``) and the scope's steps. Private: the package module is
the public face; the same module names as ``_keras_variables`` where both backends define a
thing."""

from tfinit import _backend

_backend.tensorflow("tfinit.mixed_precision")  # refuses clearly on another Keras backend

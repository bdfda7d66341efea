"""What every save format stores for a pair: the fp32 master, never a rounded copy.

- ``tf.train.Checkpoint`` (Keras models, optimizers, raw ``tf.Module``s alike): a pseudo_fp16
  variable's key holds its fp32 *master* (a split pair's rebuilt exactly: the same file); a
  restore sets the master bit-exactly and re-casts the copy. So an fp32 checkpoint of the
  same architecture restores exactly into a pseudo_fp16 model (fine-tuning), and restoring
  masters into a plain 16-bit model raises TensorFlow's dtype error instead of dropping them.
  A reverse variable is the master itself.
- ``tf.saved_model.save`` / ``model.export``: every variable is written as what it is (the
  16-bit copy as 16-bit), so the artifact loads and serves; functions traced for it read the
  reverse copy through Keras's cast, so the copy need not be in the artifact.
- Keras ``.weights.h5`` / ``.keras``: each layer with pseudo_fp16 pairs stores its masters
  (``save_own_variables`` on that layer object) and loads 16-bit files as their exact
  widening (``load_own_variables``). Reads of the variables are untouched.
"""

import numpy as np

from tfinit import _keras_internals as internals
from tfinit._precision import COMPUTE_DTYPES, dtype_name
from tfinit.mixed_precision._tensorflow import pair_records
from tfinit.mixed_precision._common.weight_files import StoreView


def install_variable_hooks(tf_var):
    """Make ``tf_var`` (the variable the code holds) checkpoint and restore its master."""
    pair = pair_records.pair_of(tf_var)
    internals.checkpoint_through(tf_var, lambda: pair.checkpoint_tensors(tf_var),
                                 pair.restore_tensors)


# ------------------------------------------------------------------ Keras weight files


def widened_for_loading(value):
    """A 16-bit float array from a file, widened to fp32 exactly (so masters are exact)."""
    array = np.asarray(value)
    if dtype_name(array.dtype) in COMPUTE_DTYPES:
        return array.astype(np.float32)
    return value


def install_layer_hooks(layer):
    """Make ``layer`` save its pseudo_fp16 masters and load 16-bit files exactly (once)."""
    if internals.has_object_method(layer, "load_own_variables"):  # only set here
        return
    save = layer.save_own_variables
    load = layer.load_own_variables

    def save_own_variables(store):
        return save(StoreView(store, write=pair_records.master_for_file))

    def load_own_variables(store):
        return load(StoreView(store, read=widened_for_loading))

    internals.set_object_method(layer, "save_own_variables", save_own_variables)
    internals.set_object_method(layer, "load_own_variables", load_own_variables)

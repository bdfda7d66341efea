"""What Keras weight files store for a pair on the ``keras.Variable`` backends: a layer's
pseudo_fp16 masters (fp32), in the layout TensorFlow's tfinit writes (``tensorflow``'s
module of this name installs the same hook there, with checkpoints')."""

from tfinit import _keras_internals as internals
from tfinit.mixed_precision._common import pair_kinds, weight_files


def install_layer_hooks(layer):
    """``.weights.h5`` / ``.keras`` files store ``layer``'s pseudo_fp16 masters (fp32), in the
    layout TensorFlow's tfinit writes; loading assigns them, which sets the masters."""
    if internals.has_object_method(layer, "save_own_variables"):
        return
    save = layer.save_own_variables

    def save_own_variables(store):
        return save(weight_files.StoreView(store, write=_master_for_file))

    internals.set_object_method(layer, "save_own_variables", save_own_variables)


def _master_for_file(value):
    return weight_files.master_or_value(value, pair_kinds.record_of)

"""Caffe2 models without Caffe2: read NetDefs, replay init nets, load into Keras.

``read_netdef`` decodes ``init_net.pb`` / ``predict_net.pb``; ``fill`` runs one Caffe2
fill operator and ``load_init_net`` replays an init net, both on tfinit's fills;
``load_into_keras`` assigns Caffe2 parameters to Keras layers (layout converted) and
``to_keras`` builds a Keras model from a predict net.
"""

from tfinit.caffe2._netdef import DeviceOption, NetDef, Operator, read_netdef
from tfinit.caffe2._fill import DATA_TYPES, fill, load_init_net
from tfinit.caffe2._fill import supported_ops as replayed_ops
from tfinit.caffe2._keras import LoadReport, load_into_keras
from tfinit.caffe2._to_keras import supported_ops as converted_ops
from tfinit.caffe2._to_keras import to_keras

__all__ = [
    "DATA_TYPES",
    "DeviceOption",
    "LoadReport",
    "NetDef",
    "converted_ops",
    "Operator",
    "fill",
    "load_init_net",
    "load_into_keras",
    "read_netdef",
    "replayed_ops",
    "to_keras",
]

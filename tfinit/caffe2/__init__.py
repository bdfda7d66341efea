"""Caffe2 models without Caffe2: read NetDefs, replay init nets, load into Keras.

``read_netdef`` decodes ``init_net.pb`` / ``predict_net.pb``; ``fill`` runs one Caffe2
fill operator and ``load_init_net`` replays an init net, both on tfinit's fills;
``load_into_keras`` assigns Caffe2 parameters to Keras layers (layout converted) and
``to_keras`` builds a Keras model from a predict net; ``learning_rate`` is Caffe2's
``LearningRate`` op as a Keras schedule; ``check_forward`` compares it blob by
blob with what Caffe2 computed. ``DataType`` / ``DATA_TYPES`` name Caffe2's
``TensorProto.DataType`` values (a fill's ``dtype``). Every public name documents its
contract with a doctested example (``tests/test_docs.py``). Importing this package
registers tfinit's Keras layers (``tfinit>Caffe2LSTM`` etc.) so ``.keras`` files of
converted models load. It does not import TensorFlow itself.
"""

from tfinit.caffe2._netdef import DeviceOption, NetDef, Operator, read_netdef
from tfinit.caffe2._fill import DATA_TYPES, DataType, fill, load_init_net
from tfinit.caffe2._fill import supported_ops as replayed_ops
from tfinit.caffe2._keras import LoadReport, load_into_keras
from tfinit.caffe2._to_keras import supported_ops as converted_ops
from tfinit.caffe2._to_keras import to_keras
from tfinit.caffe2._check import BlobCheck, CheckReport, check_forward
from tfinit.caffe2._layers import (
    Caffe2Broadcast,
    Caffe2ChannelShuffle,
    Caffe2LRN,
    Caffe2Parameter,
    Caffe2Pooling2D,
    Caffe2Reshape,
    Caffe2ShapeInfo,
    Caffe2Split,
)
from tfinit.caffe2._generic_layers import (
    Caffe2AffineChannel,
    Caffe2BatchPermutation,
    Caffe2Cast,
    Caffe2Gather,
    Caffe2LengthsToSegmentIds,
    Caffe2ResizeNearest,
    Caffe2RowConcat,
    Caffe2TopK,
)
from tfinit.caffe2._lstm import Caffe2LSTM
from tfinit.caffe2._sequence import Caffe2TimeMajor
from tfinit._caffe2_training import Caffe2LearningRate, learning_rate
from tfinit._caffe2_training import learning_rate_policies

__all__ = [
    "BlobCheck",
    "Caffe2AffineChannel",
    "Caffe2BatchPermutation",
    "Caffe2Cast",
    "Caffe2Gather",
    "Caffe2LengthsToSegmentIds",
    "Caffe2ResizeNearest",
    "Caffe2RowConcat",
    "Caffe2TopK",
    "Caffe2Broadcast",
    "Caffe2ChannelShuffle",
    "Caffe2LRN",
    "Caffe2LearningRate",
    "Caffe2LSTM",
    "Caffe2Parameter",
    "Caffe2Pooling2D",
    "Caffe2Reshape",
    "Caffe2ShapeInfo",
    "Caffe2Split",
    "Caffe2TimeMajor",
    "CheckReport",
    "check_forward",
    "DATA_TYPES",
    "DataType",
    "DeviceOption",
    "LoadReport",
    "NetDef",
    "converted_ops",
    "Operator",
    "fill",
    "learning_rate",
    "learning_rate_policies",
    "load_init_net",
    "load_into_keras",
    "read_netdef",
    "replayed_ops",
    "to_keras",
]

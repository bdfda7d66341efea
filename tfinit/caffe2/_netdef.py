"""Caffe2 NetDef protobufs read and written without the caffe2 package.

The message classes are built at runtime from a descriptor written here from
Caffe2's field numbers (``caffe2.proto``: NetDef, OperatorDef, Argument,
DeviceOption), in a private descriptor pool. Messages tfinit never looks inside
(TensorProto, QTensorProto, PartitionInfo) are declared as ``bytes``: same wire
format, kept opaque.

``read_netdef`` returns a plain, typed Python view: :class:`NetDef`,
:class:`Operator`, :class:`DeviceOption`; an argument's value type says which
protobuf field held it (Caffe2's ops read one field only):

==========  ==============================
field       Python value
==========  ==============================
``f``       ``float`` (a float32 value)
``i``       ``int``
``s``       ``bytes``
``floats``  ``numpy.ndarray`` of float32
``ints``    ``numpy.ndarray`` of int64
``strings`` ``list`` of ``bytes``
``n``       :class:`NetDef`
``nets``    ``list`` of :class:`NetDef`
``t`` etc.  :class:`RawField` (undecoded bytes)
none        ``None`` (a name only)
==========  ==============================
"""

import dataclasses
import os
import reprlib
from typing import Optional

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, text_format

from tfinit.caffe2._large_floats import take_floats

_T = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
_SCALARS = {
    "string": _T.TYPE_STRING,
    "bytes": _T.TYPE_BYTES,
    "float": _T.TYPE_FLOAT,
    "int32": _T.TYPE_INT32,
    "int64": _T.TYPE_INT64,
    "uint32": _T.TYPE_UINT32,
    "bool": _T.TYPE_BOOL,
}

# Caffe2's caffe2.proto field numbers (a copy: tests/data/models/caffe2_proto_fields.json).
# Unparsed sub-messages are "bytes".
_FIELDS = {
    "NetDef": [
        ("name", 1, _OPT, "string"),
        ("op", 2, _REP, "OperatorDef"),
        ("type", 3, _OPT, "string"),
        ("num_workers", 4, _OPT, "int32"),
        ("device_option", 5, _OPT, "DeviceOption"),
        ("arg", 6, _REP, "Argument"),
        ("external_input", 7, _REP, "string"),
        ("external_output", 8, _REP, "string"),
        ("partition_info", 9, _REP, "bytes"),
    ],
    "OperatorDef": [
        ("input", 1, _REP, "string"),
        ("output", 2, _REP, "string"),
        ("name", 3, _OPT, "string"),
        ("type", 4, _OPT, "string"),
        ("arg", 5, _REP, "Argument"),
        ("device_option", 6, _OPT, "DeviceOption"),
        ("engine", 7, _OPT, "string"),
        ("control_input", 8, _REP, "string"),
        ("is_gradient_op", 9, _OPT, "bool"),
        ("debug_info", 10, _OPT, "string"),
        ("domain", 11, _OPT, "string"),
        ("op_version", 12, _OPT, "int64"),
    ],
    "Argument": [
        ("name", 1, _OPT, "string"),
        ("f", 2, _OPT, "float"),
        ("i", 3, _OPT, "int64"),
        ("s", 4, _OPT, "bytes"),
        ("floats", 5, _REP, "float"),
        ("ints", 6, _REP, "int64"),
        ("strings", 7, _REP, "bytes"),
        ("n", 8, _OPT, "NetDef"),
        ("nets", 9, _REP, "NetDef"),
        ("t", 10, _OPT, "bytes"),
        ("tensors", 11, _REP, "bytes"),
        ("qtensors", 12, _REP, "bytes"),
    ],
    "DeviceOption": [
        ("device_type", 1, _OPT, "int32"),
        ("device_id", 2, _OPT, "int32"),
        ("random_seed", 3, _OPT, "uint32"),
        ("node_name", 4, _OPT, "string"),
        ("numa_node_id", 5, _OPT, "int32"),
        ("extra_info", 6, _REP, "string"),
    ],
}


def _message_classes():
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfinit_caffe2_netdef.proto", package="caffe2", syntax="proto2"
    )
    for msg_name, fields in _FIELDS.items():
        msg = proto.message_type.add(name=msg_name)
        for name, number, label, kind in fields:
            field = msg.field.add(name=name, number=number, label=label)
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = _T.TYPE_MESSAGE
                field.type_name = f".caffe2.{kind}"
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with a real caffe2
    pool.Add(proto)
    # protobuf >= 4.22 has GetMessageClass; older ones (TF 2.16 allows 3.20) a factory.
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:
        get_class = message_factory.MessageFactory(pool).GetPrototype
    return {name: get_class(pool.FindMessageTypeByName(f"caffe2.{name}")) for name in _FIELDS}


_PB = _message_classes()


# ---------------------------------------------------------------- the typed view


@dataclasses.dataclass(frozen=True)
class RawField:
    """An argument field tfinit does not decode (``t``, ``tensors``, ``qtensors``)."""

    field: str
    data: tuple


@dataclasses.dataclass
class DeviceOption:
    """Caffe2's ``DeviceOption`` message: where an op runs, and its random fills' seed.

    tfinit reads ``random_seed``: a fill op whose ``device_option.random_seed`` is set, or
    whose net's is (Caffe2 merges the net's ``device_option`` into each op's, the op's
    fields winning), draws from Caffe2's own CPU stream with that seed, so it gets the
    values Caffe2 drew (``load_init_net``). Unset, Caffe2 seeds from the clock and tfinit
    draws fresh values. The other fields are kept as read and written back unchanged.

    Args:
        device_type: Caffe2's ``DeviceTypeProto`` int (0: CPU, 1: CUDA, ...).
        device_id: the device's index.
        random_seed: an int in ``[0, 2**32)``, or ``None``: not set.
        node_name: Caffe2's node name.

    Example:

    >>> from tfinit.caffe2 import DeviceOption, NetDef, Operator, load_init_net
    >>> net = NetDef(device_option=DeviceOption(random_seed=1), ops=[
    ...     Operator("XavierFill", (), ("fc_w",), {"shape": [2, 3]})])
    >>> load_init_net(net)["fc_w"].astype(float).round(4).tolist()  # Caffe2's values
    [[0.5153, -0.4414, -0.1939], [0.4694, -0.9414, 0.5997]]
    """

    device_type: int = 0
    device_id: int = 0
    random_seed: Optional[int] = None  # None: not set (Caffe2 then seeds from the clock)
    node_name: str = ""


@dataclasses.dataclass
class Operator:
    """One Caffe2 ``OperatorDef``: an operator type, its input and output blobs, arguments.

    ``args`` maps an argument name to its value. From :func:`read_netdef` a value has the
    type of the ``Argument`` field Caffe2 stored it in (a float is a float32 value, a list
    of ints an int64 array; the table is in ``tfinit/caffe2/_netdef.py``). One built in
    Python may hold plain values (``[2, 3]``, ``0.5``, ``"NCHW"``): writing the net
    (``NetDef.to_bytes``) or reading it back (``read_netdef(net)``) types them as Caffe2's
    ``utils.MakeArgument`` does, and the fills read them that way.

    Args:
        type: the operator type (``"FC"``, ``"XavierFill"``).
        inputs: the input blob names, a tuple.
        outputs: the output blob names, a tuple.
        args: ``{argument name: value}``.
        name: the op's name (Caffe2 uses it in logs).
        engine: Caffe2's engine (``"CUDNN"``), kept as read.
        device_option: a :class:`DeviceOption`, or ``None`` (the net's applies).

    Raises:
        TypeError: when the net is written or read back, an argument Caffe2 cannot store
            (a list mixing numbers and strings), naming it.

    Example:

    >>> from tfinit.caffe2 import NetDef, Operator, read_netdef
    >>> op = Operator("GivenTensorFill", (), ("fc_b",), {"shape": [2], "values": [0.1, 0.2]})
    >>> typed = read_netdef(NetDef(ops=[op])).ops[0]
    >>> typed.outputs, typed.args["shape"], typed.args["values"]
    (('fc_b',), array([2]), array([0.1, 0.2], dtype=float32))
    """

    type: str
    inputs: tuple = ()
    outputs: tuple = ()
    args: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    engine: str = ""
    device_option: Optional[DeviceOption] = None


@dataclasses.dataclass
class NetDef:
    """A Caffe2 ``NetDef``: operators run in order, and the blobs the net reads and writes.

    An init net (``init_net.pb``) is fill operators writing the parameters; a predict net
    (``predict_net.pb``) is the model's computation, reading the data input and those
    parameters. :func:`read_netdef` returns one; one built in Python is written with
    ``to_bytes()`` as Caffe2 writes its ``.pb`` files, and every function of
    ``tfinit.caffe2`` that reads a net takes it directly.

    Args:
        name: the net's name.
        ops: a list of :class:`Operator`, in the order Caffe2 runs them.
        external_input: the blobs the net reads that none of its ops writes (a predict
            net's data input and parameters).
        external_output: the blobs the net returns.
        device_option: a :class:`DeviceOption` that applies to every op (an op's own
            fields win), or ``None``.
        args: the net's arguments, ``{name: value}``.
        type: Caffe2's executor (``""``, ``"simple"``, ``"dag"``, ...), kept as read.

    Raises:
        TypeError: ``to_bytes()`` on an argument Caffe2 cannot store, naming it.

    Example:

    >>> from tfinit.caffe2 import NetDef, Operator, read_netdef
    >>> net = NetDef(name="init", external_output=["fc_b"], ops=[
    ...     Operator("ConstantFill", (), ("fc_b",), {"shape": [3], "value": 1.0})])
    >>> data = net.to_bytes()  # an init_net.pb's contents
    >>> back = read_netdef(data)
    >>> back.name, back.ops[0].type, back.ops[0].args
    ('init', 'ConstantFill', {'shape': array([3]), 'value': 1.0})
    """

    name: str = ""
    ops: list = dataclasses.field(default_factory=list)
    external_input: list = dataclasses.field(default_factory=list)
    external_output: list = dataclasses.field(default_factory=list)
    device_option: Optional[DeviceOption] = None
    args: dict = dataclasses.field(default_factory=dict)
    type: str = ""

    def to_bytes(self):
        """The serialized NetDef (the ``.pb`` file's contents)."""
        return _encode_net(self).SerializeToString()


# ---------------------------------------------------------------- decoding


def read_netdef(source, progress=None):
    """A :class:`NetDef` from a ``.pb`` path, ``.pbtxt`` path, bytes, or a NetDef.

    Reads Caffe2's ``caffe2.proto`` wire format (the NetDef, OperatorDef, Argument and
    DeviceOption messages) without the caffe2 package. Each argument's value has the type
    of the field Caffe2 stored it in: ``f`` a float (a float32 value), ``i`` an int, ``s``
    bytes, ``floats`` / ``ints`` a float32 / int64 array, ``strings`` a list of bytes,
    ``n`` / ``nets`` a NetDef / a list of them; tensors are kept undecoded. A NetDef built
    in Python comes back with its arguments typed as Caffe2 stores them. A file is
    untrusted input: empty or malformed bytes (truncated, corrupted, not a NetDef) are
    refused with the file named.

    Args:
        source: a path (``.pb``; ``.pbtxt`` / ``.prototxt`` as protobuf text), the
            serialized bytes, or a :class:`NetDef`.
        progress: ``None`` or a callable ``(bytes done, total bytes)``, called as a file
            or bytes are read (op by op through a binary NetDef;
            ``load_init_net(verbose=1)`` shows it as a ``keras.utils.Progbar``).

    Returns:
        A :class:`NetDef`.

    Raises:
        TypeError: ``source`` is not a path, bytes or a NetDef.
        ValueError: empty or malformed input, or NetDefs nested too deeply (the message
            names the file).
        OSError: the file cannot be read.

    Example:

    >>> from importlib import resources
    >>> from tfinit.caffe2 import read_netdef
    >>> examples = resources.files("tfinit.caffe2") / "examples"  # nets made by Caffe2
    >>> net = read_netdef(examples / "mlp_predict_net.pb")
    >>> [op.type for op in net.ops]
    ['FC', 'Relu', 'FC', 'Relu', 'FC', 'Softmax']
    >>> net.ops[0].inputs, net.ops[0].args["order"], net.external_output
    (('data', 'fc1_w', 'fc1_b'), b'NCHW', ['prob'])
    >>> read_netdef(b"\\x08")
    Traceback (most recent call last):
    ...
    ValueError: read_netdef: the given bytes is not a valid Caffe2 NetDef (...).
    """
    if isinstance(source, NetDef):
        return _decode_net(_encode_net(source))
    text = False
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        text = path.endswith((".pbtxt", ".prototxt"))
        with open(path, "rb") as handle:
            data = handle.read()
        where = path
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data, where = bytes(source), "the given bytes"
    else:
        raise TypeError(
            "read_netdef: Argument `source` must be a path, bytes or a NetDef. "
            f"Received: source={reprlib.repr(source)} (of type {type(source).__name__})."
        )
    if not (data.strip() if text else data):
        raise ValueError(f"read_netdef: {where} is empty ({len(data)} bytes); expected a "
                         "serialized Caffe2 NetDef (init_net.pb / predict_net.pb).")
    net, total = _PB["NetDef"](), len(data)
    report = progress or (lambda done, total: None)
    report(0, total)
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), net)
            result = _decode_net(net)
        else:
            data, floats = take_floats(data, report)
            net.ParseFromString(data)
            del data
            result = _put_floats(_decode_net(net), net, floats)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, _BadText) as err:
        raise ValueError(f"read_netdef: {where} is not a valid Caffe2 NetDef ({err}).") from None
    except RecursionError:
        raise ValueError(f"read_netdef: {where} nests NetDefs too deeply.") from None
    report(total, total)
    return result


class _BadText(Exception):
    pass


def _put_floats(net, pb, floats):
    """Set the values ``take_floats`` cut out (``_large_floats``) as the arguments' arrays."""
    for (op_index, arg_index), values in floats.items():
        name = _text(pb.op[op_index].arg[arg_index].name, "an argument name")
        net.ops[op_index].args[name] = values
    return net


def _text(value, what="a string field"):
    # proto2 does not validate UTF-8 on parse: upb hands invalid strings over as bytes.
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise _BadText(f"{what} is not valid UTF-8: {value!r}") from None
    return value


def _texts(values, what):
    return [_text(v, what) for v in values]


def _decode_device_option(pb):
    return DeviceOption(
        device_type=pb.device_type,
        device_id=pb.device_id,
        random_seed=pb.random_seed if pb.HasField("random_seed") else None,
        node_name=_text(pb.node_name, "a node name"),
    )


def _decode_arg(pb):
    if pb.HasField("f"):
        return float(np.float32(pb.f))
    if pb.HasField("i"):
        return int(pb.i)
    if pb.HasField("s"):
        return bytes(pb.s)
    if pb.HasField("n"):
        return _decode_net(pb.n)
    if pb.HasField("t"):
        return RawField("t", (bytes(pb.t),))
    if len(pb.floats):
        return np.asarray(pb.floats, dtype=np.float32)
    if len(pb.ints):
        return np.asarray(pb.ints, dtype=np.int64)
    if len(pb.strings):
        return [bytes(s) for s in pb.strings]
    if len(pb.nets):
        return [_decode_net(n) for n in pb.nets]
    for name in ("tensors", "qtensors"):
        if len(getattr(pb, name)):
            return RawField(name, tuple(bytes(b) for b in getattr(pb, name)))
    return None


def _decode_args(pbs):
    return {_text(a.name, "an argument name"): _decode_arg(a) for a in pbs}


def _decode_op(pb):
    return Operator(
        type=_text(pb.type, "an operator type"),
        inputs=tuple(_texts(pb.input, "an input name")),
        outputs=tuple(_texts(pb.output, "an output name")),
        args=_decode_args(pb.arg),
        name=_text(pb.name, "an operator name"),
        engine=_text(pb.engine, "an engine name"),
        device_option=_decode_device_option(pb.device_option)
        if pb.HasField("device_option")
        else None,
    )


def _decode_net(pb):
    return NetDef(
        name=_text(pb.name, "a net name"),
        ops=[_decode_op(op) for op in pb.op],
        external_input=_texts(pb.external_input, "an external input name"),
        external_output=_texts(pb.external_output, "an external output name"),
        device_option=_decode_device_option(pb.device_option)
        if pb.HasField("device_option")
        else None,
        args=_decode_args(pb.arg),
        type=_text(pb.type, "a net type"),
    )


# ---------------------------------------------------------------- encoding


def make_arg(name, value):
    """``value`` as Caffe2's ``utils.MakeArgument`` stores it, read back as a typed value.

    Floats pass through float32 (the ``f``/``floats`` fields), ints and bools become
    int64, str becomes bytes. A mixed list raises ``TypeError`` naming the argument.
    """
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        # Fast path for big tensors; same result as the protobuf round trip.
        if value.dtype.kind == "f":
            with np.errstate(over="ignore"):
                return value.astype(np.float32).reshape(-1)
        return value.astype(np.int64).reshape(-1)
    pb = _PB["Argument"]()
    _encode_arg(name, value, pb)
    return _decode_arg(pb)



def _encode_device_option(option, pb):
    pb.device_type = option.device_type
    pb.device_id = option.device_id
    if option.random_seed is not None:
        pb.random_seed = option.random_seed
    if option.node_name:
        pb.node_name = option.node_name


def _encode_arg(name, value, pb):
    """Fill an Argument the way Caffe2's ``utils.MakeArgument`` does."""
    pb.name = name
    if value is None:
        return
    if isinstance(value, RawField):
        field = getattr(pb, value.field)
        if value.field == "t":
            pb.t = value.data[0]
        else:
            field.extend(value.data)
    elif isinstance(value, (bool, int, np.integer, np.bool_)):
        pb.i = int(value)
    elif isinstance(value, (float, np.floating)):
        pb.f = float(value)
    elif isinstance(value, str):
        pb.s = value.encode("utf-8")
    elif isinstance(value, bytes):
        pb.s = value
    elif isinstance(value, NetDef):
        pb.n.CopyFrom(_encode_net(value))
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if value.dtype.kind == "f":
            with np.errstate(over="ignore"):
                pb.floats.extend(value.astype(np.float32).reshape(-1).tolist())
        else:
            pb.ints.extend(value.astype(np.int64).reshape(-1).tolist())
    else:
        items = list(value.reshape(-1)) if isinstance(value, np.ndarray) else list(value)
        if items and all(isinstance(v, NetDef) for v in items):
            pb.nets.extend(_encode_net(v) for v in items)
        elif all(isinstance(v, (str, bytes)) for v in items):
            pb.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
        elif all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in items):
            pb.ints.extend(int(v) for v in items)
        elif all(isinstance(v, (float, np.floating)) for v in items):
            pb.floats.extend(float(v) for v in items)
        else:
            raise TypeError(
                f"argument {name!r}: cannot store {value!r} in a Caffe2 Argument "
                "(expected numbers, strings or NetDefs of one kind)."
            )


def _encode_net(net):
    pb = _PB["NetDef"](name=net.name, type=net.type)
    for op in net.ops:
        op_pb = pb.op.add(
            type=op.type, name=op.name, engine=op.engine,
            input=list(op.inputs), output=list(op.outputs),
        )
        for key, value in op.args.items():
            _encode_arg(key, value, op_pb.arg.add())
        if op.device_option is not None:
            _encode_device_option(op.device_option, op_pb.device_option)
    for key, value in net.args.items():
        _encode_arg(key, value, pb.arg.add())
    pb.external_input.extend(net.external_input)
    pb.external_output.extend(net.external_output)
    if net.device_option is not None:
        _encode_device_option(net.device_option, pb.device_option)
    return pb

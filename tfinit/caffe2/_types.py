"""Caffe2's ``TensorProto.DataType`` (``caffe2.proto``) as a named enum, and its numpy dtypes.

The ``dtype`` argument of Caffe2's fill operators holds these values; ``data_type`` reads
one from an int or a name. Pure Python and numpy: the Caffe2 fill replay
(``tfinit.caffe2._fill``) and anything else that reads Caffe2 nets use it.
"""

import enum

import numpy as np


class DataType(enum.IntEnum):
    """Caffe2's ``TensorProto.DataType`` (``caffe2.proto``): the ``dtype`` argument's values.

    A member is the int Caffe2 stores (``DataType.FLOAT == 1``), so it goes wherever a
    Caffe2 argument takes that int: the ``dtype`` of ``tfinit.caffe2.fill`` and of a fill
    operator in a NetDef take a member, its int or its name (``"INT64"``, ``"int64"``).
    Caffe2 has no value 11. ``DATA_TYPES`` is the same table as a dict of names to ints.

    Args:
        value: the int Caffe2 stores (``DataType(10)``); ``DataType["INT64"]`` looks up
            a name.

    Raises:
        ValueError: an int that is not one of Caffe2's data types (``KeyError`` for an
            unknown name looked up with ``[]``).

    Example:

    >>> from tfinit.caffe2 import DataType, fill
    >>> DataType.INT64, int(DataType.INT64), DataType(1).name
    (<DataType.INT64: 10>, 10, 'FLOAT')
    >>> fill("ConstantFill", shape=[2], value=3, dtype=DataType.INT32).tolist()  # or "INT32"
    [3, 3]
    >>> DataType(11)
    Traceback (most recent call last):
    ...
    ValueError: 11 is not a valid DataType
    """

    UNDEFINED = 0
    FLOAT = 1
    INT32 = 2
    BYTE = 3
    STRING = 4
    BOOL = 5
    UINT8 = 6
    INT8 = 7
    UINT16 = 8
    INT16 = 9
    INT64 = 10
    FLOAT16 = 12
    DOUBLE = 13
    ZERO_COLLISION_HASH = 14


class _DataTypeNames(dict):
    """Caffe2's ``TensorProto.DataType`` names and the ints Caffe2 stores: a ``dict``.

    ``{"UNDEFINED": 0, "FLOAT": 1, ..., "ZERO_COLLISION_HASH": 14}``, in Caffe2's order:
    the values a fill operator's ``dtype`` argument takes (Caffe2 has no value 11).
    :class:`DataType` is the same table as an ``enum.IntEnum``; a fill's ``dtype`` takes a
    name, an int or a member.

    Example:

    >>> from tfinit.caffe2 import DATA_TYPES, DataType
    >>> DATA_TYPES["FLOAT"], DATA_TYPES["INT64"], DATA_TYPES["FLOAT16"]
    (1, 10, 12)
    >>> DATA_TYPES == {member.name: member.value for member in DataType}
    True
    """


#: Caffe2's ``TensorProto.DataType`` enum, name -> int (a dict, documented).
DATA_TYPES = _DataTypeNames((member.name, int(member)) for member in DataType)
#: numpy dtypes of the Caffe2 data types tfinit can produce (STRING: object arrays of bytes).
NUMPY_DTYPES = {
    DataType.FLOAT: "float32", DataType.INT32: "int32", DataType.BYTE: "uint8",
    DataType.STRING: "object", DataType.BOOL: "bool", DataType.UINT8: "uint8",
    DataType.INT8: "int8", DataType.UINT16: "uint16", DataType.INT16: "int16",
    DataType.INT64: "int64", DataType.FLOAT16: "float16", DataType.DOUBLE: "float64",
}


def data_type(value, op_type="fill"):
    """A Caffe2 ``TensorProto.DataType`` from an int or a name ('FLOAT', 'int64').

    A known value is a :class:`DataType` (an ``int``); an unknown int stays a plain int, so
    the operator that reads it can name it in its own error, as Caffe2 does.
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        key = value.upper().rsplit(".", 1)[-1]
        if key not in DATA_TYPES:
            raise ValueError(
                f"{op_type}: Argument `dtype` must name a Caffe2 data type ("
                f"{', '.join(DATA_TYPES)}). Received: dtype={value!r}, an unknown Caffe2 "
                f"data type."
            )
        return DataType[key]
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = int(value)
        return DataType(value) if value in DATA_TYPES.values() else value
    raise TypeError(
        f"{op_type}: Argument `dtype` must be a TensorProto.DataType int or name. "
        f"Received: dtype={value!r} (of type {type(value).__name__})."
    )

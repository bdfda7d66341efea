"""Large float arguments read with numpy before the protobuf parse of a NetDef.

A GivenTensorFill's `values` are an Argument's `floats`: in proto2 unpacked, 5 bytes per
value (tag 0x2d, then the little-endian float32). Parsed by protobuf into a repeated
field, then copied into numpy, a 718 MB init net took twice the parse. So before the
parse, every Argument of a top-level op whose message ends in a run of at least
``MIN_FLOATS`` such values has that run cut out and read with numpy; the protobuf parse
sees the rest. Any bytes this walk does not understand leave the data as it is (the
parse then reports them).
"""

import numpy as np

FLOAT_TAG = 5 << 3 | 5  # Argument.floats (field 5), wire type 5 (32-bit)
FLOAT_ELEMENT = np.dtype([("tag", "u1"), ("value", "<f4")])  # one value: 5 bytes
MIN_FLOATS = 64


class _Opaque(Exception):
    pass


def _varint(data, pos, end):
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Opaque
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value):
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data, pos, end):
    """``(field number, wire type, start of the field, start of its payload, its end)``."""
    while pos < end:
        start = pos
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos, end)
            yield number, wire, start, pos, pos
            continue
        if wire == 2:
            length, pos = _varint(data, pos, end)
            payload = pos
        elif wire in (1, 5):
            length, payload = (8 if wire == 1 else 4), pos
        else:
            raise _Opaque
        pos = payload + length
        if pos > end:
            raise _Opaque
        yield number, wire, start, payload, pos


def _float_run(data, pos, end):
    """The float32 values of ``data[pos:end]`` when it is only `floats` elements, else None."""
    count, rest = divmod(end - pos, 5)
    if rest or count < MIN_FLOATS:
        return None
    elements = np.frombuffer(data, FLOAT_ELEMENT, count=count, offset=pos)
    if not np.all(elements["tag"] == FLOAT_TAG):
        return None
    return elements["value"].astype(np.float32)  # an aligned copy of the strided view


def _stripped_arg(data, start, end):
    """``(the Argument's name field, its values)`` when it is a name and then only
    `floats`, else None (any other field: protobuf decodes the Argument)."""
    for number, wire, field, _, _ in _fields(data, start, end):
        if number == 5 and wire == 5:
            values = _float_run(data, field, end)
            return None if values is None else (data[start:field], values)
        if number != 1:
            return None
    return None


def take_floats(data, report):
    """``(data with large float arguments cut out, {(op index, arg index): values})``;
    ``report(bytes walked, total)`` as each op is reached."""
    try:
        pieces, floats, kept = [], {}, 0
        op_index = -1
        for number, wire, field, payload, stop in _fields(data, 0, len(data)):
            if number != 2 or wire != 2:
                continue
            op_index += 1
            report(payload, len(data))
            op_pieces, op_kept, arg_index, changed = [], payload, -1, False
            for n, w, f, p, e in _fields(data, payload, stop):
                if n != 5 or w != 2:
                    continue
                arg_index += 1
                cut = _stripped_arg(data, p, e)
                if cut is None:
                    continue
                arg, values = cut
                floats[(op_index, arg_index)] = values
                op_pieces += [data[op_kept:f], b"\x2a", _encode_varint(len(arg)), arg]
                op_kept, changed = e, True
            if changed:
                op_pieces.append(data[op_kept:stop])
                op = b"".join(op_pieces)
                pieces += [data[kept:field], b"\x12", _encode_varint(len(op)), op]
                kept = stop
    except _Opaque:
        return data, {}
    if not floats:
        return data, {}
    pieces.append(data[kept:])
    return b"".join(pieces), floats

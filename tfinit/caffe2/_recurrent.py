"""Caffe2's RecurrentNetwork op, for the LSTM that ``rnn_cell.LSTM`` builds.

The op's step net must be that LSTM's: ``FC(hidden_t_prev, gates_t_w, gates_t_b)``,
``Sum(gates_t, input_t)``, ``LSTMUnit(hidden_t_prev, cell_t_prev, gates_t, [seq_lengths,]
timestep)``. The arguments say which op input is the sequence (``link_external`` of
``input_t``), the initial states (``initial_recurrent_state_ids``), the parameters
(``param``) and which output is which state, all or last (``alias_src/dst/offset``).
"""

from tfinit.caffe2._lstm import Caffe2LSTM
from tfinit.caffe2._op_args import Unsupported, ints

_PATTERN = "rnn_cell.LSTM's step net (FC, Sum, LSTMUnit)"


def _strings(op, name):
    return [s.decode() if isinstance(s, bytes) else s for s in op.args.get(name) or []]


def _ints(op, name):
    value = op.args.get(name)
    return [] if value is None else ints(value, name)


def _one_per_entry(**lists):
    """The RecurrentNetwork arguments ``lists`` (``{name: values}``) entry by entry: Caffe2
    enforces one entry per link (``link_*``) or alias (``alias_*``) in each of them."""
    if len({len(values) for values in lists.values()}) > 1:
        names = ", ".join(f"`{name}`" for name in lists)
        given = ", ".join(f"{name}={values}" for name, values in lists.items())
        raise ValueError(f"RecurrentNetwork's arguments {names} must be of one length, an "
                         f"entry each per link or alias (Caffe2 refuses the net otherwise). "
                         f"Received: {given}")
    return zip(*lists.values(), strict=True)


def _links(op):
    """``{internal blob: external blob}`` of the op's links."""
    return dict(_one_per_entry(link_internal=_strings(op, "link_internal"),
                               link_external=_strings(op, "link_external")))


def _aliases(op):
    """``(src, dst, offset)`` of each of the op's aliases (which output is which state)."""
    return _one_per_entry(alias_src=_strings(op, "alias_src"),
                          alias_dst=_strings(op, "alias_dst"),
                          alias_offset=_ints(op, "alias_offset"))


def param_slots(op):
    """Indices of the RecurrentNetwork inputs that are parameters (the ``param`` arg)."""
    return set(_ints(op, "param"))


def lengths_input(op):
    """The op input holding ``seq_lengths`` (None when the LSTMUnit ignores lengths)."""
    unit = _step_ops(op)[2]
    if len(unit.inputs) < 5 or not unit.args.get("sequence_lengths", 1):
        return None
    links = set(_strings(op, "link_external"))
    initial = {op.inputs[k] for k in _ints(op, "initial_recurrent_state_ids")
               if k < len(op.inputs)}
    outer = [blob for k, blob in enumerate(op.inputs)
             if k not in param_slots(op) and blob not in links and blob not in initial]
    if len(outer) != 1:
        raise Unsupported(f"RecurrentNetwork: cannot tell the seq_lengths input among {outer}")
    return outer[0]


def io_blobs(op):
    """``(sequence, initial states, seq_lengths or None, {output: alias offset})``: the
    blobs a RecurrentNetwork reads and writes, by role (``to_keras(time_major=False)``)."""
    fc, add, _ = _step_ops(op)
    links = _links(op)
    seq_internal = next((blob for blob in add.inputs if blob != fc.outputs[0]), None)
    states = [op.inputs[k] for k in _ints(op, "initial_recurrent_state_ids")
              if k < len(op.inputs)]
    offsets = {dst: offset for _, dst, offset in _aliases(op)}
    return links.get(seq_internal), states, lengths_input(op), offsets


def _step_ops(op):
    step = op.args.get("step_net")
    if step is None or not hasattr(step, "ops"):
        raise Unsupported("RecurrentNetwork without a step_net NetDef")
    types = [s.type for s in step.ops]
    if types != ["FC", "Sum", "LSTMUnit"]:
        raise Unsupported(f"RecurrentNetwork whose step net is {types}; only {_PATTERN} is")
    return step.ops


def lstm(b, op, *_):
    """The RecurrentNetwork handler: a :class:`Caffe2LSTM` layer, outputs by alias."""
    fc, add, unit = _step_ops(op)
    h_prev, c_prev, gates = unit.inputs[:3]
    links = _links(op)
    if fc.inputs[0] != h_prev or add.outputs[0] != gates or fc.outputs[0] not in add.inputs:
        raise Unsupported(f"RecurrentNetwork: the step net is not {_PATTERN}")
    seq_internal = next((blob for blob in add.inputs if blob != fc.outputs[0]), None)
    sequence = links.get(seq_internal)
    states = _strings(op, "recurrent_states")
    ids = _ints(op, "initial_recurrent_state_ids")
    state_of = {links.get(h_prev): "hidden", links.get(c_prev): "cell"}
    if sequence not in op.inputs or len(states) != 2 or len(ids) != 2 or set(
            state_of.get(s) for s in states) != {"hidden", "cell"}:
        raise Unsupported(f"RecurrentNetwork links that do not match {_PATTERN}")
    initial = {state_of[s]: op.inputs[k] for s, k in zip(states, ids, strict=True)}
    w_blob, w = b.param(fc, 1)
    bias_blob, _ = b.param(fc, 2)
    if w.ndim != 2 or w.shape[0] != 4 * w.shape[1]:
        raise ValueError(f"LSTM weight '{w_blob}' has shape {w.shape}; expected [4H, H]")
    lengths = lengths_input(op)
    for blob in (sequence, *initial.values(), *([lengths] if lengths else [])):
        if blob not in b.blobs:
            raise ValueError(f"reads '{blob}', which no earlier op wrote")
    name = b.name(fc.outputs[0].rsplit("/", 1)[0].replace("/", "_") or op.outputs[0])
    layer = Caffe2LSTM(w.shape[1], forget_bias=float(unit.args.get("forget_bias", 0.0)),
                       drop_states=bool(unit.args.get("drop_states", 0)), name=name)
    inputs = [b.blobs[sequence], b.blobs[initial["hidden"]], b.blobs[initial["cell"]]]
    if lengths:
        inputs.append(b.blobs[lengths])
    hidden_all, hidden_last, cell_all, cell_last = layer(inputs)
    b.routes[name] = {"recurrent_kernel": w_blob, "bias": bias_blob}
    values = {("hidden", 1): hidden_all, ("hidden", -1): hidden_last,
              ("cell", 1): cell_all, ("cell", -1): cell_last}
    outputs = {}
    for src, dst, offset in _aliases(op):
        if (state_of.get(src), offset) not in values:
            raise Unsupported(f"RecurrentNetwork output '{dst}' (alias of {src} at offset "
                              f"{offset})")
        outputs[dst] = values[(state_of[src], offset)]
    result = []
    for blob in op.outputs:
        if blob not in outputs:
            b.opaque[blob] = "a RecurrentNetwork step workspace, not a tensor"
        result.append(outputs.get(blob))
    return tuple(result)

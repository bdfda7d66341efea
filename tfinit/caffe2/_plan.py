"""What of a predict net ``to_keras`` cannot convert, found before any layer is built.

:func:`problems` looks at every op (its type, engine, ``order`` and the arguments
its spec's static checks read, with the parameters' shapes) and returns one
:class:`Problem` per unsupported op or op feature; :func:`refusal` makes the one message
that names them all, grouped, each with its op indices and count. ``to_keras`` raises it
and ``tfinit inspect`` prints the same list ("convertible: yes/no").
"""

import dataclasses

from tfinit.caffe2 import _ops

# Engines that pick an implementation of the same maths (CPU/GPU kernels); other engines
# (DNNLOWP: quantized arithmetic, ...) compute something else and are refused.
SAME_MATHS_ENGINES = ("", "DEFAULT", "CUDNN", "DEPTHWISE_3x3", "EIGEN", "NNPACK", "MKLDNN",
                      "IDEEP", "ACCELERATE", "MIOPEN", "OPENGL", "METAL")
DETECTION_OPS = ("GenerateProposals", "GenerateProposalsCPP", "RoIAlign", "RoIAlignRotated",
                 "RoIPool", "BoxWithNMSLimit", "BBoxTransform",
                 "CollectAndDistributeFpnRpnProposals", "CollectRpnProposals",
                 "DistributeFpnProposals", "HeatmapMaxKeypoint", "PSRoIPool")
CONTROL_FLOW_OPS = ("If", "AsyncIf", "While", "Do", "ONNXWhile")


@dataclasses.dataclass(frozen=True)
class Problem:
    """Op ``index`` of type ``op_type`` has ``feature``, which to_keras does not convert."""

    index: int
    op_type: str
    feature: str
    note: str = ""  # what kind of op an unsupported type is


def _kind(op_type):
    if op_type in DETECTION_OPS:
        return "a detection op"
    if op_type in CONTROL_FLOW_OPS:
        return "control flow"
    if op_type.startswith("Int8") or op_type.endswith("Int8"):
        return "a quantized Int8 op"
    return ""


def _order(op):
    try:
        return _ops.op_order(op)
    except _ops.Unsupported:
        return None


def problems(net, params, handled):
    """Every unsupported op type and op feature of ``net``, in op order.

    ``params``: ``{blob: array}`` of the init net (FC weights' shapes are checked);
    ``handled``: ``{op type: OpSpec}`` of the op types to_keras converts (``_spec.SPECS``),
    whose ``checks`` run here.
    """
    found = []
    layouts = [_order(op) for op in net.ops if op.type in _ops.LAYOUT_OPS]
    main = max(set(layouts) - {None}, key=layouts.count, default=None)
    for k, op in enumerate(net.ops):
        if op.type not in handled:
            found.append(Problem(k, op.type, op.type, _kind(op.type)))
            continue
        if op.engine not in SAME_MATHS_ENGINES:
            found.append(Problem(k, op.type, f"engine {op.engine!r} on {op.type}"))
        if "order" in op.args:
            try:
                order = _ops.op_order(op)
            except _ops.Unsupported as err:
                found.append(Problem(k, op.type, str(err)))
            else:
                if op.type in _ops.LAYOUT_OPS and main is not None and order != main:
                    found.append(Problem(k, op.type, f"order {order} in a net of {main} ops"))
        for check in handled[op.type].checks:
            try:
                check(op, params)
            except _ops.Unsupported as err:
                found.append(Problem(k, op.type, str(err)))
            except (ValueError, TypeError, OverflowError):
                pass  # a bad argument: reported with its op when the layers are built
    return found


def grouped(found):
    """``[("feature (op #k)" or "feature (ops #j, #k: 2 ops)", [op indices])]``, in order
    of first appearance."""
    groups = {}
    for problem in found:
        groups.setdefault((problem.feature, problem.note), []).append(problem.index)
    lines = []
    for (feature, note), indices in groups.items():
        where = (f"op #{indices[0]}" if len(indices) == 1 else
                 f"ops {', '.join(f'#{k}' for k in indices)}: {len(indices)} ops")
        lines.append((f"{feature} ({where}{', ' + note if note else ''})", indices))
    return lines


def summary(found):
    """Every group of :func:`grouped`, joined by ``'; '``."""
    return "; ".join(line for line, _ in grouped(found))


def refusal(found, handled):
    """The one-line message naming every problem, or None when there is none."""
    if not found:
        return None
    ops = len({p.index for p in found})
    return (f"to_keras: unsupported Caffe2 op(s) and op feature(s) in {ops} of the net's ops: "
            f"{summary(found)}. Supported op types: {', '.join(sorted(handled))}.")

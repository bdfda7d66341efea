"""One spec per converted Caffe2 operator: the table ``to_keras``, ``tfinit inspect`` and
docs/caffe2-ops.md's status table read.

An :class:`OpSpec` holds, for one op type, the handler that builds its Keras layers (it
reads and checks the arguments that need shapes), the static checks run on every op
before anything is built (Caffe2's rejections: a ``ValueError`` naming the argument and
value; ``Unsupported`` for what is not converted), which inputs are parameters and which
data inputs are integers, the inputs and outputs Caffe2's schema allows, whether its
outputs' row counts depend on the input values, and its docs line. The classification ops
of ``_ops`` come in through one adapter (:func:`_classification`), their handlers and
checks unchanged.
"""

import dataclasses
from collections.abc import Callable

from tfinit.caffe2 import _detection_args as detection_args
from tfinit.caffe2 import _detection_ops as detection
from tfinit.caffe2 import _generic_ops as generic
from tfinit.caffe2 import _ops
from tfinit.caffe2._plan import DETECTION_OPS
from tfinit.caffe2._recurrent import lstm, param_slots

STATIC, DATA_DEPENDENT = "static", "data-dependent"


def _no_params(op, params, written):
    return set()


def _from(first):
    """Inputs from index ``first`` on are parameters (init-net blobs)."""
    return lambda op, params, written: set(range(first, len(op.inputs)))


def _if_in_init_net(*slots):
    """Inputs at ``slots`` are parameters when the init net holds them (Gather's data,
    ResizeNearest's scales)."""
    return lambda op, params, written: {k for k in slots
                                        if k < len(op.inputs) and op.inputs[k] in params
                                        and op.inputs[k] not in written}


def _elementwise_params(op, params, written):
    """Add/Mul/Sum: the inputs the init net fills that no earlier op or data input wrote;
    one input stays data."""
    slots = {k for k, blob in enumerate(op.inputs) if blob in params and blob not in written}
    return slots - {0} if len(slots) == len(op.inputs) else slots


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """How one Caffe2 op type converts.

    Attributes:
        op_type: the Caffe2 type name.
        build: ``build(builder, op, *data tensors)`` -> the output tensor(s), in order.
        family: ``"classification"``, ``"recurrent"``, ``"generic"`` or ``"detection"``.
        doc: one line for docs/caffe2-ops.md and ``tfinit inspect``.
        checks: ``check(op, params)`` each, run on every op before any layer is built.
        params: ``params(op, init-net blobs, blobs written so far)`` -> the input slots
            that are parameters.
        int_inputs: input slots whose data inputs are integers (int32 Keras inputs).
        inputs: ``(fewest, most)`` inputs Caffe2's schema takes (None: not checked here).
        outputs: ``(fewest, most)`` outputs (None: not checked here).
        rows: ``"data-dependent"`` when an output's row count depends on input values
            (refused on JAX, whose compiled functions need static shapes).
    """

    op_type: str
    build: Callable
    family: str
    doc: str
    checks: tuple = ()
    params: Callable = _no_params
    int_inputs: tuple = ()
    inputs: tuple | None = None
    outputs: tuple | None = None
    rows: str = STATIC

    def check_arity(self, op):
        """Caffe2's schema check on the numbers of inputs and outputs."""
        for what, given, bounds in (("inputs", op.inputs, self.inputs),
                                    ("outputs", op.outputs, self.outputs)):
            if bounds is not None and not bounds[0] <= len(given) <= bounds[1]:
                count = str(bounds[0]) if bounds[0] == bounds[1] else f"{bounds[0]} to {bounds[1]}"
                raise ValueError(f"{op.type} takes {count} {what}, as Caffe2's schema says. "
                                 f"Received: {len(given)} {what} {list(given)}")


_CLASSIFICATION_DOCS = {
    "FC": "Dense on the flattened trailing axes (axis, axis_w)",
    "Conv": "2-D convolution: kernel/stride/dilation/pads/group, legacy_pad, NCHW/NHWC",
    "SpatialBN": "BatchNormalization in test mode (is_test=1)",
    "MaxPool": "max pooling with Caffe2's pads, legacy_pad (ceil mode), global_pooling",
    "AveragePool": "average pooling, padded cells not counted",
    "Softmax": "softmax over the axes from `axis` on, flattened",
    "Relu": "max(x, 0)", "Sigmoid": "1 / (1 + exp(-x))", "Tanh": "tanh",
    "Dropout": "identity at inference (is_test)",
    "Concat": "concatenation along `axis` (axis 0: the rows of rois/detections) + split_info",
    "Sum": "sum of equal shapes", "Add": "sum with numpy or broadcast=1 broadcasting",
    "Mul": "product with numpy or broadcast=1 broadcasting",
    "Flatten": "[N, rest] (Caffe2's order)", "Reshape": "shape arg or init-net shape; old_shape",
    "Split": "split along `axis` (sizes from `split`, an init-net blob or equal)",
    "ChannelShuffle": "channel shuffle by `group`", "LRN": "cross-channel LRN",
}
_UNARY = ("Relu", "Sigmoid", "Tanh")


def _classification(op_type):
    """The adapter: a classification op of ``_ops`` (HANDLERS, STATIC_CHECKS,
    PARAM_SLOTS) as an :class:`OpSpec`."""
    if op_type in _ops.ELEMENTWISE:
        params = _elementwise_params
    elif op_type == "Reshape":  # a shape from the init net is a parameter, not data
        params = _if_in_init_net(1)
    elif op_type in _ops.PARAM_SLOTS:
        params = _from(_ops.PARAM_SLOTS[op_type])
    else:
        params = _no_params
    handler = _ops.HANDLERS[op_type]
    if op_type == "Concat":
        handler = _concat
    return OpSpec(op_type, handler, "classification", _CLASSIFICATION_DOCS[op_type],
                  checks=tuple(_ops.STATIC_CHECKS.get(op_type, ())), params=params,
                  inputs=(1, 1) if op_type in _UNARY else None,
                  outputs=(1, 1) if op_type in _UNARY else None)


def _concat(b, op, *xs):
    """Concat: on axis 0 (rows known at run time) :func:`generic.row_concat`, else
    ``_ops``'s Concat."""
    if xs and not op.args.get("add_axis", 0) and b.axis(op, xs[0], b.order_axis(op)) == 0:
        return generic.row_concat(b, op, *xs)
    return _ops.HANDLERS["Concat"](b, op, *xs)


def _generic(op_type, build, doc, **fields):
    return OpSpec(op_type, build, "generic", doc, **fields)


_GENERIC = (
    _generic("AffineChannel", generic.affine_channel,
             "x * scale[c] + bias[c] (NCHW, rank 4 or 2; is_learnable: trainable)",
             checks=(generic.check_affine_channel,), params=_from(1), inputs=(3, 3),
             outputs=(1, 1)),
    _generic("ResizeNearest", generic.resize_nearest,
             "floor(H * scale) rows; source row min(floor(y / scale), H - 1)",
             checks=(generic.check_resize_nearest,), params=_from(1), inputs=(1, 2),
             outputs=(1, 1)),
    _generic("ConvTranspose", generic.conv_transpose,
             "transposed 2-D convolution: kernel (required), stride, pads, adj; bias optional",
             checks=(generic.check_conv_transpose,), params=_from(1), inputs=(2, 3),
             outputs=(1, 1)),
    _generic("TopK", generic.top_k,
             "k largest along `axis`, ties lower index first; k past the axis pads 0 / -1",
             checks=(generic.check_top_k,), inputs=(1, 1), outputs=(2, 3)),
    _generic("Gather", generic.gather,
             "take along `axis`; negative indices wrap; data from the init net or data",
             checks=(generic.check_gather,), params=_if_in_init_net(0), int_inputs=(1,),
             inputs=(2, 2), outputs=(1, 1)),
    _generic("BatchPermutation", generic.batch_permutation,
             "row i of Y is row indices[i] of X (one index per row)", int_inputs=(1,),
             inputs=(2, 2), outputs=(1, 1)),
    _generic("Cast", generic.cast, "cast to `to` (float to int toward zero)",
             checks=(generic.check_cast,), inputs=(1, 1), outputs=(1, 1)),
    _generic("LengthsToSegmentIds", generic.lengths_to_segment_ids,
             "[2, 1] -> [0, 0, 1]", int_inputs=(0,), inputs=(1, 1), outputs=(1, 1),
             rows=DATA_DEPENDENT),
    _generic("ExpandDims", generic.expand_dims, "size-1 axes inserted at `dims`",
             checks=(generic.check_expand_dims,), inputs=(1, 1), outputs=(1, 1)),
    _generic("AliasWithName", generic.identity, "identity", inputs=(1, 1), outputs=(1, 1)),
    _generic("CopyGPUToCPU", generic.identity, "identity", inputs=(1, 1), outputs=(1, 1)),
    _generic("CopyCPUToGPU", generic.identity, "identity", inputs=(1, 1), outputs=(1, 1)),
)


def _detection(op_type, build, doc, reader, **fields):
    return OpSpec(op_type, build, "detection", doc,
                  checks=detection.static_checks(reader), **fields)


_DETECTION = (
    _detection("RoIAlign", detection.roi_align,
               "bilinear average of sampling_ratio^2 points per bin (<= 0: ceil(roi / pooled))",
               detection_args.roi_align_args, inputs=(2, 2), outputs=(1, 1)),
    _detection("GenerateProposals", detection.generate_proposals,
               "anchors + deltas, clipped, min_size, pre/post-NMS top N, NMS per image",
               detection_args.generate_proposals_args, params=_from(3), rows=DATA_DEPENDENT),
    _detection("BBoxTransform", detection.bbox_transform,
               "deltas / weights applied to rois, dw/dh clipped, boxes clipped per image",
               detection_args.bbox_transform_args, inputs=(3, 3), outputs=(1, 2)),
    _detection("BoxWithNMSLimit", detection.box_with_nms_limit,
               "per class: score_thresh, NMS or soft-NMS; top detections_per_im per image",
               detection_args.box_with_nms_limit_args, rows=DATA_DEPENDENT),
    _detection("CollectAndDistributeFpnRpnProposals", detection.collect_and_distribute,
               "top rpn_post_nms_topN rois by score, one FPN level each by sqrt(area)",
               detection_args.collect_and_distribute_args, rows=DATA_DEPENDENT),
)

SPECS = {
    **{op_type: _classification(op_type) for op_type in _ops.HANDLERS},
    "RecurrentNetwork": OpSpec(
        "RecurrentNetwork", lstm, "recurrent", "an LSTM step net (keras.layers.LSTM)",
        params=lambda op, params, written: param_slots(op)),
    **{spec.op_type: spec for spec in _GENERIC},
    **{spec.op_type: spec for spec in _DETECTION},
}
bbox_rois = detection.bbox_rois
nms_images = detection.nms_images


def data_dependent(net):
    """``[(index, op type)]`` of the ops that need dynamic shapes: their output rows depend
    on input values, or they are detection ops (whose layers run on TensorFlow only)."""
    return [(k, op.type) for k, op in enumerate(net.ops) if op.type in SPECS and (
        SPECS[op.type].rows == DATA_DEPENDENT or SPECS[op.type].family == "detection")]


def detection_ops(net):
    """``[(op type, [op indices], converted)]`` of the net's detection ops (``_plan``'s
    DETECTION_OPS and any spec of the ``"detection"`` family), in order of first use."""
    kinds = set(DETECTION_OPS) | {t for t, spec in SPECS.items() if spec.family == "detection"}
    used = {}
    for k, op in enumerate(net.ops):
        if op.type in kinds:
            used.setdefault(op.type, []).append(k)
    return [(op_type, indices, op_type in SPECS) for op_type, indices in used.items()]

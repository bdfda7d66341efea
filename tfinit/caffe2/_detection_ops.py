"""Caffe2's five detection ops in a converted net: one handler per op type.

Each reads and checks its arguments with ``_detection_args`` (static checks: before any
layer is built) and its inputs' shapes (Caffe2's order, the first axis dropped), then calls
the op's layer of ``_detection`` on the net's tensors (4-D feature maps are NHWC inside
the model, as those layers take them). The rules are in docs/caffe2-ops.md.

Batch > 1: Caffe2 1.8.1's CollectAndDistributeFpnRpnProposals sorts the rois of all images
together and caps the whole batch, and BBoxTransform and BoxWithNMSLimit then read each
image's rows as one block, so some detections are reported under another image. In a net
where a BBoxTransform reads Collect's ``rois`` (every Detectron-style net), the converter
builds Collect with ``group_by_image=True``: each image keeps its own best rois, in one
block, and gets what it gets alone. A net of Collect alone keeps Caffe2's order exactly. A
BoxWithNMSLimit reading a BBoxTransform's boxes without ``batch_splits`` is given that
BBoxTransform's ``im_info``, and refuses a batch of several images when run.
"""

from tfinit.caffe2 import _detection_args as args_of
from tfinit.caffe2._detection import (
    Caffe2BBoxTransform,
    Caffe2BoxWithNMSLimit,
    Caffe2CollectAndDistributeFpnRpnProposals,
    Caffe2GenerateProposals,
    Caffe2RoIAlign,
)
from tfinit.caffe2._op_args import NCHW, Unsupported


def _per_example(b, x):
    """A tensor's per-example shape in Caffe2's order."""
    return tuple(b.caffe2_shape(x)[1:])


def _check_order(b, op):
    order = op.args.get("order", NCHW)
    order = order.decode() if isinstance(order, bytes) else order
    if order != b.layout:
        raise Unsupported(f"{op.type} with order {order} in a net whose other ops are "
                          f"{b.layout}")


def _listed(y):
    return tuple(y) if isinstance(y, (list, tuple)) else y


def roi_align(b, op, x, rois):
    args = args_of.roi_align_args(op)
    _check_order(b, op)
    args_of.check_roi_align_shapes(op, _per_example(b, x), _per_example(b, rois))
    if args.sampling_ratio > 0:  # one roi's sampling grid is built whole: refuse a huge one
        b.check_size(op, f"one roi's sampling grid of {op.type} (pooled_h x sampling_ratio by "
                     f"pooled_w x sampling_ratio points per channel)",
                     [None, args.pooled_h * args.sampling_ratio,
                      args.pooled_w * args.sampling_ratio, x.shape[-1] or 1])
    return Caffe2RoIAlign(**args.layer_kwargs(), name=b.name(op.outputs[0]))(x, rois)


def generate_proposals(b, op, scores, deltas, im_info):
    args = args_of.generate_proposals_args(op)
    blob, anchors = b.param(op, 3)
    args_of.check_generate_proposals_shapes(op, _per_example(b, scores),
                                            _per_example(b, deltas),
                                            _per_example(b, im_info), anchors.shape)
    layer = Caffe2GenerateProposals(anchors.tolist(), **args.layer_kwargs(),
                                    name=b.name(op.outputs[0]))
    return _listed(layer(scores, deltas, im_info))


def bbox_transform(b, op, rois, deltas, im_info):
    args = args_of.bbox_transform_args(op)
    args_of.check_bbox_transform_shapes(op, _per_example(b, rois), _per_example(b, deltas),
                                        _per_example(b, im_info))
    layer = Caffe2BBoxTransform(**args.layer_kwargs(), num_outputs=len(op.outputs),
                                name=b.name(op.outputs[0]))
    return _listed(layer(rois, deltas, im_info))


def box_with_nms_limit(b, op, *inputs):
    args = args_of.box_with_nms_limit_args(op)
    args_of.check_box_with_nms_limit_shapes(op, args, *(_per_example(b, x) for x in inputs))
    layer = Caffe2BoxWithNMSLimit(**args.layer_kwargs(), num_outputs=len(op.outputs),
                                  name=b.name(op.outputs[0]))
    images = b.nms_images.get(op.inputs[1]) if len(inputs) == 2 else None
    if images in b.blobs:  # boxes of a BBoxTransform, no batch_splits: one image at a time
        return _listed(layer(*inputs, images=b.blobs[images]))
    return _listed(layer(*inputs))


def collect_and_distribute(b, op, *inputs):
    args = args_of.collect_and_distribute_args(op)
    half = len(inputs) // 2
    args_of.check_collect_and_distribute_shapes(
        op, [_per_example(b, x) for x in inputs[:half]],
        [_per_example(b, x) for x in inputs[half:]])
    group = op.outputs[0] in b.bbox_rois  # a BBoxTransform reads the rois: one block per image
    layer = Caffe2CollectAndDistributeFpnRpnProposals(
        **args.layer_kwargs(), group_by_image=group, name=b.name(op.outputs[0]))
    return tuple(layer(list(inputs)))


def static_checks(reader):
    """The static check of an op whose arguments ``reader`` reads (raises ValueError)."""
    return (lambda op, params: reader(op),)


def bbox_rois(net):
    """The blobs a BBoxTransform reads as rois (Collect's ``rois`` in a full net)."""
    return {op.inputs[0] for op in net.ops if op.type == "BBoxTransform" and op.inputs}


def nms_images(net):
    """BBoxTransform's ``box_out`` blob -> its ``im_info`` blob: a BoxWithNMSLimit reading
    those boxes without ``batch_splits`` refuses a batch of several images."""
    return {op.outputs[0]: op.inputs[2] for op in net.ops
            if op.type == "BBoxTransform" and len(op.inputs) == 3 and op.outputs}

"""Check a conversion blob by blob against what Caffe2 computed: ``check_forward``.

The reference is an ``.npz`` of ``input/<blob>`` (what was fed to Caffe2) and
``blob/<blob>`` (what the predict net wrote; an in-place blob holds its last value),
optionally ``param/<blob>`` (the init net's values). The converted model is run on the
inputs and every stored blob it computes is compared, in the order the net writes them.
"""

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from tfinit import _backend
from tfinit.caffe2._fill import load_init_net
from tfinit.caffe2._memory import Limit
from tfinit.caffe2._netdef import read_netdef
from tfinit.caffe2._ops import TO_NCHW, TO_NHWC
from tfinit.caffe2._sequence import SEQUENCE, STATE, input_roles
from tfinit.caffe2._to_keras import build, data_inputs, model_of, net_layout



@dataclasses.dataclass
class BlobCheck:
    """One blob compared by :func:`check_forward`: the converted model's ``y`` and Caffe2's.

    ``max_abs = max|y - y_caffe2|`` and ``max_rel = max_abs / max|y_caffe2|``. The blob
    passes (``ok``) when ``|y - y_caffe2| <= atol + rtol * |y_caffe2|`` everywhere; integer
    blobs must be equal. A blob of another shape fails, with both shapes in ``note``.

    Args:
        blob: the Caffe2 blob name.
        shape: its shape, in Caffe2's layout.
        max_abs: the largest absolute difference.
        max_rel: ``max_abs`` over the largest ``|y_caffe2|``.
        atol: the absolute tolerance used (by default ``max(1e-5, 1e-4 * max|y_caffe2|)``).
        ok: whether the blob is within the tolerance.
        op: ``"op #k Type"``, the op that last wrote the blob.
        note: why it failed, when not the values (a shape mismatch).

    Example:

    >>> from importlib import resources
    >>> from tfinit.caffe2 import check_forward
    >>> examples = resources.files("tfinit.caffe2") / "examples"  # a net Caffe2 ran
    >>> report = check_forward(examples / "mlp_predict_net.pb", examples / "mlp_init_net.pb",
    ...                        examples / "mlp_forward.npz")
    >>> check = report.blobs[0]
    >>> check.blob, check.shape, check.op, check.ok, check.max_abs <= check.atol
    ('fc1', (4, 16), 'op #0 FC', True, True)
    """

    blob: str
    shape: tuple
    max_abs: float
    max_rel: float
    atol: float
    ok: bool
    op: str = ""  # "op #k Type", the op that last wrote the blob
    note: str = ""


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_forward` found: every stored blob compared, in net order.

    ``ok`` is True when every blob is within the tolerance; ``first_divergent`` is the
    first that is not (in the order the net writes them, so the op it names is where the
    conversion first departs from Caffe2). ``str(report)`` is a table: one row per blob
    with its shape, ``max_abs``, ``max_rel``, tolerance and result, then the blobs not
    compared and a summary line.

    Args:
        blobs: a list of :class:`BlobCheck`, in the order the net writes the blobs.
        skipped: ``{blob: why}``: blobs in the reference file the model does not compute
            (a RecurrentNetwork's step workspaces, blobs no converted op writes).
        rtol: the relative tolerance used.

    Example:

    >>> import numpy as np
    >>> from importlib import resources
    >>> from tfinit.caffe2 import check_forward
    >>> examples = resources.files("tfinit.caffe2") / "examples"
    >>> reference = dict(np.load(examples / "mlp_forward.npz"))
    >>> reference["blob/fc2"] = reference["blob/fc2"] + 1.0  # as if Caffe2 computed otherwise
    >>> report = check_forward(examples / "mlp_predict_net.pb", examples / "mlp_init_net.pb",
    ...                        reference)
    >>> report.ok, report.first_divergent.blob, report.first_divergent.op
    (False, 'fc2', 'op #2 FC')
    >>> str(report).splitlines()[-1]
    "1 of 6 blobs diverge; the first is 'fc2' (op #2 FC)"
    """

    blobs: list
    skipped: dict  # blob -> why it was not compared
    rtol: float

    @property
    def ok(self):
        return all(check.ok for check in self.blobs)

    @property
    def first_divergent(self):
        """The first blob (in net order) past the tolerance, or None."""
        return next((check for check in self.blobs if not check.ok), None)

    def __str__(self):
        width = max([len(c.blob) for c in self.blobs] + [4])
        lines = [f"{'blob':<{width}}  {'shape':<18} {'max_abs':>10} {'max_rel':>10} "
                 f"{'atol':>9}  result"]
        for c in self.blobs:
            shape = "x".join(str(d) for d in c.shape) or "scalar"
            lines.append(f"{c.blob:<{width}}  {shape:<18} {c.max_abs:>10.3g} "
                         f"{c.max_rel:>10.3g} {c.atol:>9.2g}  "
                         f"{'ok' if c.ok else 'DIVERGES'}{' ' + c.note if c.note else ''}")
        for blob, why in self.skipped.items():
            lines.append(f"{blob:<{width}}  not compared: {why}")
        first = self.first_divergent
        if first is None:
            lines.append(f"all {len(self.blobs)} blobs match Caffe2 (rtol {self.rtol:g}, "
                         "atol max(1e-5, 1e-4 * max|y|) unless given)")
        else:
            bad = sum(not c.ok for c in self.blobs)
            lines.append(f"{bad} of {len(self.blobs)} blobs diverge; the first is "
                         f"'{first.blob}' ({first.op})")
        return "\n".join(lines)


def _load_reference(forward):
    if isinstance(forward, Mapping):
        return dict(forward), "the given mapping"
    path = os.fspath(forward)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}, path
    except (OSError, ValueError) as err:
        raise ValueError(f"check_forward: cannot read '{path}' as an .npz of Caffe2 blobs "
                         f"({err}).") from None


def _to_layout(array, source, target):
    if array.ndim != 4 or source == target:
        return array
    return array.transpose(0, *(TO_NHWC if target == "NHWC" else TO_NCHW))


def _compare(blob, actual, expected, rtol, atol):
    if actual.shape != expected.shape:
        return BlobCheck(blob, expected.shape, float("inf"), float("inf"), 0.0, False,
                         note=f"shape {list(actual.shape)} != Caffe2's {list(expected.shape)}")
    if expected.dtype.kind in "iub":
        diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
        max_abs = float(diff.max()) if diff.size else 0.0
        return BlobCheck(blob, expected.shape, max_abs, max_abs, 0.0, max_abs == 0)
    expected64, actual64 = expected.astype(np.float64), actual.astype(np.float64)
    scale = float(np.abs(expected64).max()) if expected.size else 0.0
    tol = max(1e-5, 1e-4 * scale) if atol is None else float(atol)
    diff = np.abs(actual64 - expected64)
    max_abs = float(diff.max()) if diff.size else 0.0
    ok = bool(np.all(diff <= tol + rtol * np.abs(expected64)))
    return BlobCheck(blob, expected.shape, max_abs, max_abs / scale if scale else max_abs,
                     tol, ok)


def _batch_major(array, role, blob):
    """Caffe2's time-major ``array`` as ``to_keras(time_major=False)`` takes it."""
    if role == SEQUENCE:
        return array.transpose(1, 0, *range(2, array.ndim))
    if role == STATE:
        if array.ndim < 2 or array.shape[0] != 1:
            raise ValueError(f"check_forward: the initial state '{blob}' must be Caffe2's "
                             f"[1, N, H]. Received: shape {list(array.shape)}")
        return array[0]
    return array


def _time_major(array, role):
    """A batch-major model output in Caffe2's time-major form."""
    if role == SEQUENCE:
        return array.transpose(1, 0, *range(2, array.ndim))
    return array[None] if role == STATE else array


def _feeds(net, reference, where, input_format, params, time_major=True):
    data = data_inputs(net, params)
    missing = [blob for blob in data if f"input/{blob}" not in reference]
    if missing:
        raise ValueError(f"check_forward: {where} holds no input/<blob> for the data "
                         f"input(s) {missing} of the net.")
    layout = net_layout(net)
    target = {"channels_first": "NCHW", "channels_last": "NHWC"}.get(input_format, layout)
    feeds = {blob: _to_layout(np.asarray(reference[f"input/{blob}"]), layout, target)
             for blob in data}
    if not time_major:
        roles = input_roles(net, data)
        feeds = {blob: _batch_major(array, roles[blob], blob) for blob, array in feeds.items()}
    return feeds, layout, target


def _reference_params(reference):
    return {k[6:]: v for k, v in reference.items() if k.startswith("param/")}


def reference_input_shape(predict_net, forward, input_format=None, params=None,
                          time_major=True):
    """The ``input_shape`` for :func:`to_keras` that a reference file's inputs have.

    The data inputs are the blobs the net reads that are not parameters: ``params`` (the
    init net's blobs; by default the file's ``param/<blob>`` keys) are not data;
    ``time_major=False``: the batch-major shapes, a sequence's time axis ``None`` (free).
    """
    reference, where = _load_reference(forward)
    if params is None:
        params = _reference_params(reference)
    net = read_netdef(predict_net)
    feeds = _feeds(net, reference, where, input_format, params, time_major)[0]
    if not time_major:
        roles = input_roles(net, list(feeds))
        return {blob: (None, *array.shape[2:]) if roles[blob] == SEQUENCE else array.shape[1:]
                for blob, array in feeds.items()}
    return {blob: array.shape[1:] for blob, array in feeds.items()}


def check_forward(predict_net, init_net, forward, input_format=None, rtol=1e-4, atol=None, *,
                  max_bytes=None, time_major=True):
    """Run the converted net on a reference file's inputs; compare every stored blob.

    The reference holds what was fed to Caffe2 (``input/<blob>``) and what its predict
    net wrote (``blob/<blob>``; a blob written in place holds its last value, as Caffe2's
    workspace does), optionally the init net's values (``param/<blob>``). The net is
    converted with :func:`to_keras` returning every stored blob it computes, run on the
    inputs, and each blob compared in the order the net writes them, moved to Caffe2's
    layout: the first that diverges names the op where the conversion departs from
    Caffe2. The net runs with float32 products in full float32 precision, as Caffe2's CPU
    ops compute them: GPUs' TF32 default is off while it runs (restored after).

    Args:
        predict_net: path, bytes or NetDef.
        init_net: path, bytes, NetDef or ``{blob: array}``; None takes the file's
            ``param/<blob>`` values.
        forward: path of the ``.npz`` (or a mapping with its keys).
        input_format: as in :func:`to_keras` (inputs and blobs are moved to it).
        rtol, atol: the tolerance; ``atol=None`` is ``max(1e-5, 1e-4 * max|y|)`` per blob.
        max_bytes: as in :func:`to_keras`: the most bytes one example of a blob may take.
        time_major: as in :func:`to_keras`; ``False`` checks the batch-major model: the
            file's time-major inputs are fed batch-major and its outputs moved back.

    Returns:
        A :class:`CheckReport`; ``report.ok`` is False past the tolerance and
        ``report.first_divergent`` names the first blob that diverges.

    Raises:
        ValueError: an unreadable file, a data input it lacks, or a net ``to_keras``
            cannot convert.

    Example:

    >>> from importlib import resources
    >>> from tfinit.caffe2 import check_forward
    >>> examples = resources.files("tfinit.caffe2") / "examples"  # a net Caffe2 ran
    >>> report = check_forward(examples / "mlp_predict_net.pb", examples / "mlp_init_net.pb",
    ...                        examples / "mlp_forward.npz")
    >>> report.ok, [check.blob for check in report.blobs]
    (True, ['fc1', 'relu1', 'fc2', 'relu2', 'fc3', 'prob'])
    >>> print(report)
    blob   shape                 max_abs    max_rel      atol  result
    fc1    4x16                      ...        ...       ...  ok
    ...
    all 6 blobs match Caffe2 (rtol 0.0001, atol max(1e-5, 1e-4 * max|y|) unless given)
    """
    reference, where = _load_reference(forward)
    net = read_netdef(predict_net)
    if init_net is None:
        params = _reference_params(reference)
    else:
        params = init_net if isinstance(init_net, Mapping) else load_init_net(
            init_net, max_bytes=max_bytes)
    feeds, layout, target = _feeds(net, reference, where, input_format, params, time_major)
    stored = [key[5:] for key in reference if key.startswith("blob/")]
    b = build(net, params, {blob: array.shape[1:] for blob, array in feeds.items()},
              input_format, limit=Limit(max_bytes, "check_forward"), time_major=time_major,
              reserve=stored)
    compared = sorted((blob for blob in stored if blob in b.blobs), key=lambda x: b.writer[x])
    skipped = {blob: b.opaque.get(blob, "the converted net does not write it")
               for blob in stored if blob not in b.blobs}
    if not compared:
        raise ValueError(f"check_forward: none of the blobs in {where} is computed by the "
                         f"converted net (it holds {stored}).")
    model = model_of(b, net, compared)
    arrays = [feeds[blob] for blob, _ in b.inputs]
    with _backend.full_float32_matmuls():  # Caffe2's float32, not the GPU's TF32
        outs = model(arrays if len(arrays) > 1 else arrays[0])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    checks = []
    for blob, out in zip(compared, outs, strict=True):
        role = b.roles.get(blob)
        actual = _time_major(np.asarray(out), role) if role else _to_layout(
            np.asarray(out), target, layout)
        check = _compare(blob, actual, np.asarray(reference[f"blob/{blob}"]), rtol, atol)
        k = b.writer[blob]
        check.op = f"op #{k} {net.ops[k].type}"
        checks.append(check)
    return CheckReport(checks, skipped, rtol)

"""A seeded mutation fuzzer over the detection cases (tests/caffe2/data/detcases).

Each mutant is one case with one change: an op argument (a boundary, huge, negative, NaN or
mistyped value, or removed), an input's rows (dropped or repeated, so paired inputs stop
pairing), an input's values (a NaN, an inf, a zero im_info column, a roi's batch index past
the batch, values times 1e6), the op's inputs or outputs (one dropped), or an init tensor
(anchors scaled). It is converted with ``to_keras`` and run on the mutated inputs, and
classified:

* ``pass``: it ran and every output passes the checks (finite where the inputs are
  finite, except RoIAlign's documented ``0 / 0`` bins; detections' classes, batch splits,
  rois' batch indices and boxes in range);
* ``refusal``: a ``ValueError`` at conversion, or an ``InvalidArgumentError`` when run whose
  message names an op type of the net (a check of tfinit's);
* ``overflow``: it ran, and the only problem is a non-finite output of an op outside the
  five detection ops (a net's mask head overflowing float32 after a weight was scaled by
  1e6: Keras's arithmetic, which the detection ops' checks do not reach), counted apart;
* ``defect``: anything else: another exception, a raw TensorFlow error, a NaN from finite
  input, an output out of range.

Run ``python tests/caffe2/detfuzz.py --count 200 --seed 0`` (from the repository root, on
the TensorFlow backend); tests/caffe2/test_detection_fuzz.py runs a small count.
"""

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "detcases"
MAX_BYTES = 2 << 30  # conversion refuses a blob past 2 GiB: a mutant must not exhaust memory
OPS = ("RoIAlign", "GenerateProposals", "BBoxTransform", "BoxWithNMSLimit",
       "CollectAndDistributeFpnRpnProposals")
KINDS = ("arg", "rows", "values", "io", "param")


@dataclasses.dataclass
class Mutant:
    case: str
    kind: str
    what: str
    net: object
    params: dict
    inputs: dict  # data input blob -> array (Caffe2 layout)


def _cases():
    return {c["name"]: c for c in json.loads((DATA / "cases.json").read_text())["cases"]}


def _arg_values(rng, value):
    if isinstance(value, float):
        options = [0.0, -1.0, 1.0, 1e30, float("nan"), value * 2, -value, 1, 2.5]
    elif isinstance(value, (int, np.integer)):
        options = [0, -1, 1, 1000000, 2**31, int(value) * 3, -int(value), 0.5]
    else:
        options = ["bogus", 1, 0.0]
    return options[rng.integers(len(options))]  # as given: an int stays an int


def mutate(rng, case, net, params, inputs):
    """One mutant of ``case`` (its predict net, init params, data inputs): ``(kind, what,
    net, params, inputs)``."""
    from tfinit.caffe2 import NetDef

    kind = KINDS[rng.integers(len(KINDS))]
    ops = list(net.ops)
    k = int(rng.integers(len(ops)))
    detection = [j for j, op in enumerate(ops) if op.type in OPS]
    if kind in ("arg", "io") and detection and rng.random() < 0.8:  # in a net: its 5 ops
        k = detection[rng.integers(len(detection))]
    op = ops[k]
    if kind == "arg":
        args = dict(op.args)
        if args and rng.random() < 0.8:
            name = sorted(args)[rng.integers(len(args))]
            if rng.random() < 0.15:
                del args[name]
                what = f"op #{k} {op.type}: removed {name}"
            else:
                args[name] = _arg_values(rng, args[name])
                what = f"op #{k} {op.type}: {name}={args[name]!r}"
        else:
            name = rng.choice(["sampling_ratio", "nms_thresh", "pooled_h", "spatial_scale",
                               "rpn_post_nms_topN", "detections_per_im", "score_thresh"])
            args[name] = _arg_values(rng, 1.0 if name in ("nms_thresh", "spatial_scale",
                                                          "score_thresh") else 1)
            what = f"op #{k} {op.type}: added {name}={args[name]!r}"
        ops[k] = dataclasses.replace(op, args=args)
    elif kind == "io":
        if rng.random() < 0.5 and len(op.inputs) > 1:
            j = int(rng.integers(len(op.inputs)))
            ops[k] = dataclasses.replace(op, inputs=op.inputs[:j] + op.inputs[j + 1:])
            what = f"op #{k} {op.type}: input {op.inputs[j]} dropped"
        elif len(op.outputs) > 1:
            ops[k] = dataclasses.replace(op, outputs=op.outputs[:-1])
            what = f"op #{k} {op.type}: last output dropped"
        else:
            ops[k] = dataclasses.replace(op, inputs=tuple(reversed(op.inputs)))
            what = f"op #{k} {op.type}: inputs reversed"
    elif kind == "param" and params:
        blob = sorted(params)[rng.integers(len(params))]
        params = dict(params)
        value = np.asarray(params[blob])
        factor = rng.choice([0.0, -1.0, 1e6])
        params[blob] = (value * factor).astype(value.dtype) if value.dtype.kind == "f" else value
        what = f"param {blob} times {factor}"
    else:
        inputs = dict(inputs)
        blob = sorted(inputs)[rng.integers(len(inputs))]
        value = np.array(inputs[blob])
        if kind == "rows" or kind == "param":
            n = len(value)
            rows = rng.choice([max(n - 1, 0), n + 1, 1, 0])
            value = value[np.resize(np.arange(max(n, 1)), rows)] if n else value
            what = f"input {blob}: {n} rows -> {len(value)}"
        elif value.size and value.dtype.kind == "f":
            flat = value.reshape(-1)
            i = int(rng.integers(flat.size))
            choice = rng.integers(5)
            if choice == 0:
                flat[i] = np.nan
                what = f"input {blob}: a NaN"
            elif choice == 1:
                flat[i] = np.inf
                what = f"input {blob}: an inf"
            elif choice == 2 and value.ndim == 2:
                value[:, rng.integers(value.shape[1])] = 0 if "im_info" in blob else 99
                what = f"input {blob}: a column set to 0 or 99"
            elif choice == 3:
                value *= 1e6
                what = f"input {blob}: times 1e6"
            else:
                value = -value
                what = f"input {blob}: negated"
        else:
            what = f"input {blob}: unchanged (empty or integer)"
        inputs[blob] = value
        kind = "values" if kind != "rows" else kind
    net = NetDef(name=net.name, ops=ops, external_input=list(net.external_input),
                 external_output=list(net.external_output))
    return kind, what, net, params, inputs


def _safe(blob):
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", blob) or "layer"


def _finite_inputs(inputs, params):
    return all(np.isfinite(np.asarray(v, np.float64)).all() for v in (*inputs.values(),
                                                                       *params.values())
               if np.asarray(v).dtype.kind == "f")


def check_outputs(net, outputs, got, inputs, finite_in):
    """The problems with a mutant's outputs ([] when none)."""
    problems = []
    writer = {}
    for op in net.ops:
        for blob in op.outputs:
            writer[blob] = op
    images = None
    for blob, value in inputs.items():
        if "im_info" in blob:
            images = len(value)
    for blob, y in zip(outputs, got, strict=True):
        op = writer.get(blob)
        y = np.asarray(y)
        nan_ok = op is not None and op.type == "RoIAlign" and int(op.args.get("aligned", 0))
        if finite_in and y.dtype.kind == "f" and not nan_ok and not np.isfinite(y).all():
            if op is not None and op.type not in OPS:  # e.g. a Conv of the mask head
                problems.append(f"overflow: {blob} of {op.type} is not finite (float32 "
                                f"arithmetic outside the detection ops, as in Keras)")
            else:
                problems.append(f"{blob}: NaN or inf from finite input")
        if op is None:
            continue
        if op.type == "BoxWithNMSLimit":
            position = list(op.outputs).index(blob)
            if position == 2 and y.size and (y.min() < 0 or y.max() >= 1000):
                problems.append(f"{blob}: a class out of range")
            if position == 3 and len(got) > outputs.index(op.outputs[0]) and \
                    op.outputs[0] in outputs:
                count = len(got[outputs.index(op.outputs[0])])
                if int(round(float(y.sum()))) != count:
                    problems.append(f"{blob}: batch_splits sum {y.sum()} != {count} rows")
        if op.type in ("GenerateProposals", "CollectAndDistributeFpnRpnProposals") and \
                y.ndim == 2 and y.shape[1] == 5 and y.size and images is not None:
            ids = y[:, 0]
            if ids.min() < 0 or ids.max() >= images or not np.array_equal(ids, np.round(ids)):
                problems.append(f"{blob}: a roi's batch index out of [0, {images})")
        if op.type == "BBoxTransform" and list(op.outputs).index(blob) == 0 and y.size \
                and finite_in and y.min() < 0:
            problems.append(f"{blob}: a box below 0 (clipped to the image)")
    return problems


def run_mutant(mutant, outputs):
    """``(class, detail)`` for one mutant."""
    import keras
    import tensorflow as tf

    from tfinit.caffe2 import to_keras

    types = {op.type for op in mutant.net.ops}
    try:
        shapes = {blob: tuple(np.shape(v)[1:]) for blob, v in mutant.inputs.items()}
        shape = next(iter(shapes.values())) if len(shapes) == 1 else shapes
        model = to_keras(mutant.net, mutant.params, shape, outputs=outputs,
                         max_bytes=MAX_BYTES)
    except ValueError as err:
        return "refusal", f"ValueError: {str(err)[:160]}"
    except Exception as err:  # noqa: BLE001 - any other exception is the defect found
        return "defect", f"conversion raised {type(err).__name__}: {str(err)[:300]}"
    by_name = {_safe(blob): v for blob, v in mutant.inputs.items()}
    try:
        arrays = [by_name[t.name] for t in model.inputs]
        got = model(arrays if len(arrays) > 1 else arrays[0])
    except tf.errors.InvalidArgumentError as err:
        text = str(err)
        named = [t for t in types if t in text.split("\n\n")[-1] or f"{t}:" in text
                 or f"{t} (" in text]
        if named and "[Op:" not in text.split("Arguments received")[0]:
            return "refusal", f"InvalidArgumentError naming {named[0]}"
        return "defect", f"raw InvalidArgumentError: {text[:400]}"
    except ValueError as err:  # a layer's own check, or Keras's (a shape it does not take)
        text = str(err)
        if any(t in text for t in types) or "expected shape" in text \
                or "incompatible" in text:
            return "refusal", f"ValueError: {text[:160]}"
        return "defect", f"run raised ValueError: {text[:300]}"
    except Exception as err:  # noqa: BLE001 - any other exception is the defect found
        return "defect", f"run raised {type(err).__name__}: {str(err)[:300]}"
    got = got if isinstance(got, (list, tuple)) else [got]
    got = [keras.ops.convert_to_numpy(y) for y in got]
    problems = check_outputs(mutant.net, outputs, got, mutant.inputs,
                             _finite_inputs(mutant.inputs, mutant.params))
    if problems and all(p.startswith("overflow: ") for p in problems):
        return "overflow", "; ".join(problems)
    return ("defect", "; ".join(problems)) if problems else ("pass", "")


def mutants(count, seed, nets=True):
    """``count`` mutants, seeded: ``(Mutant, outputs)``; ``nets=False`` leaves out the
    whole-net cases (several seconds each), ``nets="only"`` takes only them."""
    from tfinit.caffe2 import read_netdef

    cases = _cases()
    names = sorted(n for n, c in cases.items()
                   if (c["kind"] == "net") == (nets == "only") or nets is True)
    rng = np.random.default_rng(seed)
    for _ in range(count):
        name = names[rng.integers(len(names))]
        case = cases[name]
        net = read_netdef(DATA / f"{name}_predict_net.pb")
        arrays = np.load(DATA / f"{name}.npz")
        params = {b: np.asarray(arrays[f"param/{b}"]) for b in case["params"]}
        inputs = {b: arrays[f"input/{b}"] for b in case["data_inputs"]}
        kind, what, net, params, inputs = mutate(rng, case, net, params, inputs)
        yield Mutant(name, kind, what, net, params, inputs), case["outputs"]


def fuzz(count, seed, nets=True, out=None):
    """Run ``count`` mutants; returns ``{"pass": n, "refusal": n, "defect": [details]}``."""
    tally = {"pass": 0, "refusal": 0, "overflow": 0, "defect": []}
    for k, (mutant, outputs) in enumerate(mutants(count, seed, nets)):
        outputs = [b for b in outputs if any(b in op.outputs for op in mutant.net.ops)]
        verdict, detail = run_mutant(mutant, outputs)
        if verdict == "defect":
            tally["defect"].append(f"{mutant.case} [{mutant.kind}] {mutant.what}: {detail}")
        else:
            tally[verdict] += 1
        if out is not None:
            print(f"{k:4d} {verdict:8s} {mutant.case} [{mutant.kind}] {mutant.what}"
                  f"{': ' + detail.splitlines()[0] if detail else ''}", file=out, flush=True)
    return tally


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100, help="mutants to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-nets", action="store_true", help="single-op cases only")
    parser.add_argument("--only-nets", action="store_true", help="whole-net cases only")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    nets = "only" if args.only_nets else not args.no_nets
    tally = fuzz(args.count, args.seed, nets=nets, out=sys.stdout)
    print(f"mutants {args.count}: {tally['pass']} pass, {tally['refusal']} refusals, "
          f"{tally['overflow']} overflows outside the detection ops, "
          f"{len(tally['defect'])} defects")
    for line in tally["defect"]:
        print("DEFECT", line)
    return 1 if tally["defect"] else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's tfinit
    sys.exit(main())

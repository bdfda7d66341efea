"""Where a training step's time goes, op by op: tfinit against Keras, profiled in turn.

``python -m benchmarks.profile_ops [--dtype bfloat16] [--kind classifier] [--width 256]``

Both contenders (pseudo_fp16 + MasterWeightOptimizer(SGD) and Keras ``mixed_<dtype>``, the
comparisons table's MLP rows) run under ``tf.profiler`` in alternating rounds; the TensorFlow
compute threads' events are summed per op type and divided by the number of steps. Figures
are thread time (two threads can each spend 1 ms in the same wall millisecond), so they show
which ops cost more, not the step's wall time; the ``step`` row is the wall time of a call.
"""

import argparse
import collections
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def op_times(profile_dir, steps):
    """Thread time (ms per step) and count per op type in a ``tf.profiler`` trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    times, counts = collections.Counter(), collections.Counter()
    for path in Path(profile_dir).rglob("*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            for line in plane.lines:
                compute = line.name.startswith("tf_Compute")
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name.split(":")[-1]
                    if compute or name == "step":
                        key = f"op:{name}" if compute else name
                        times[key] += event.duration_ps / 1e9 / steps
                        counts[key] += 1 / steps
    return times, counts


def profile(contenders, steps=10, rounds=10):
    """Per-op thread time of each contender (label -> Contender), averaged over rounds."""
    import tensorflow as tf

    times = {label: collections.Counter() for label in contenders}
    counts = {label: collections.Counter() for label in contenders}
    for c in contenders.values():
        c.run(3)  # trace and warm up
    for r in range(rounds):
        order = list(contenders.items())
        for label, c in order if r % 2 == 0 else order[::-1]:
            with tempfile.TemporaryDirectory() as d:
                tf.profiler.experimental.start(d)
                c.run(steps)
                tf.profiler.experimental.stop()
                t, n = op_times(d, steps)
            for key in t:
                times[label][key] += t[key] / rounds
                counts[label][key] += n[key] / rounds
    return times, counts


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_ops",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16"])
    parser.add_argument("--kind", default="classifier", choices=["classifier", "mlp", "reuse"])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--mode", default="pseudo_fp16", choices=["pseudo_fp16", "reverse"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)

    from benchmarks._timing import disable_cpu_remapping
    from benchmarks.training import Contender

    disable_cpu_remapping()
    contenders = {
        label: Contender(mode, args.kind, args.width, args.dtype, args.batch, optimizer="sgd")
        for label, mode in (("keras", "keras_mixed"), ("tfinit", args.mode))
    }
    times, counts = profile(contenders, rounds=args.rounds)
    keys = sorted(set(times["keras"]) | set(times["tfinit"]),
                  key=lambda k: -max(times["keras"][k], times["tfinit"][k]))
    print(f"{args.kind} width {args.width}, batch {args.batch}, {args.dtype}: ms per step "
          "(thread time), ops per step")
    print("| event | keras ms | tfinit ms | keras ops | tfinit ops |\n|---|---|---|---|---|")
    for key in [k for k in keys if k != "op:Process"][:args.top]:
        print(f"| {key} | {times['keras'][key]:.3f} | {times['tfinit'][key]:.3f} | "
              f"{counts['keras'][key]:.0f} | {counts['tfinit'][key]:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Multi-worker training with fp32 master weights: ``python examples/multi_worker.py``.

Starts a cluster of local worker processes on 127.0.0.1 (``TF_CONFIG`` for each), trains a
small Keras model built inside ``MultiWorkerMirroredStrategy.scope()`` +
``tfinit.mixed_precision.scope("pseudo_fp16")`` with a custom loop (``strategy.run``;
Keras 3's ``fit`` does not support this strategy upstream) and
``MasterWeightOptimizer``, checkpoints with ``tf.train.CheckpointManager``, and checks
that every worker ends with bit-identical fp32 masters.

``--compute-dtype bfloat16`` stops with a clear error: MultiWorkerMirroredStrategy
broadcasts initial values between workers with an op that has no bfloat16 kernel, so
16-bit bfloat16 variables cannot be created there (TensorFlow's limit, not tfinit's).

Fault tolerance: ``--kill-worker 1 --kill-at-step 11`` makes worker 1 SIGKILL itself after
step 11 in the first attempt; the launcher stops the rest of the cluster and starts it
again (``--max-restarts``), the workers restore the latest checkpoint and finish. The
input is a pure function of the step number, so a resumed run sees the same batches.

Outputs under ``--out``: ``worker<i>.npz`` (each worker's masters by variable path, plus
``step`` and ``resumed_from``) and ``summary.json``. Exit status 0 only if the run
finished and every worker's masters are bit-identical.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GLOBAL_BATCH = 16
EXAMPLES = 256


# -- the worker -------------------------------------------------------------------------
def _worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras

    import tfinit
    from tfinit import mixed_precision as mp

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=args.timeout)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    is_chief = task["index"] == 0

    with strategy.scope(), mp.scope("pseudo_fp16", args.compute_dtype):
        model = keras.Sequential([
            keras.Input((8,)),
            keras.layers.Dense(32, activation="relu", kernel_initializer=tfinit.XavierFill(seed=1)),
            keras.layers.Dense(1, kernel_initializer=tfinit.GaussianFill(std=0.1, seed=2)),
        ])
        optimizer = mp.MasterWeightOptimizer(keras.optimizers.SGD(0.02, momentum=0.9))
        optimizer.build(model.trainable_variables)
    with strategy.scope():
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    # Every worker saves (the save is a collective); only the chief's directory is kept.
    directory = args.checkpoint_dir if is_chief else tempfile.mkdtemp(prefix="tfinit_worker_")
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
    latest = tf.train.latest_checkpoint(args.checkpoint_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    start = int(step.numpy())

    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(EXAMPLES, 8)).astype(np.float32)
    y_all = np.tanh(x_all @ rng.normal(size=(8, 1)).astype(np.float32))

    def dataset_fn(context):
        per_replica = context.get_per_replica_batch_size(GLOBAL_BATCH)
        offset = context.input_pipeline_id * per_replica

        def batch(s):  # the rows of global batch s that this worker's replica takes
            rows = (s * GLOBAL_BATCH + offset + tf.range(per_replica, dtype=tf.int64))
            rows = rows % EXAMPLES
            return tf.gather(x_all, rows), tf.gather(y_all, rows)

        return tf.data.Dataset.range(start, args.steps).map(batch)

    batches = iter(strategy.distribute_datasets_from_function(dataset_fn))

    train_step = tfinit.distribute.train_step(
        strategy, model, optimizer, tfinit.distribute.mean_squared_error, GLOBAL_BATCH)

    losses = []
    for s in range(start, args.steps):
        losses.append(float(train_step(*next(batches))))
        step.assign_add(1)
        done = s + 1
        if done % args.checkpoint_every == 0 or done == args.steps:
            manager.save(checkpoint_number=done)
        if args.kill_at_step == done and task["index"] == args.kill_worker:
            print(f"worker {task['index']}: killing myself after step {done}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    from tfinit.distribute import replica_mismatches

    problems = replica_mismatches(model)  # this worker's replicas; copies == cast(master)
    if problems:
        raise SystemExit(f"worker {task['index']}: replicas disagree: {problems}")
    masters = {"step": np.int64(step.numpy()), "resumed_from": np.int64(start)}
    for v in model.trainable_variables:
        master = mp.parameter_info(v).blob_copy[tf.float32]  # a MirroredVariable
        masters[v.path] = master.values[0].numpy()  # this worker's (only) replica
    os.makedirs(args.out, exist_ok=True)
    np.savez(os.path.join(args.out, f"worker{task['index']}.npz"), **masters)
    if not is_chief:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({"worker": task["index"], "resumed_from": start, "steps": args.steps,
                      "first_loss": losses[0] if losses else None,
                      "last_loss": losses[-1] if losses else None}), flush=True)


# -- the launcher -----------------------------------------------------------------------
def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _attempt(args, attempt):
    """Start every worker, wait; on any failure stop the others. Returns the exit codes."""
    workers = [f"127.0.0.1:{p}" for p in _free_ports(args.workers)]
    argv = [sys.executable, os.path.abspath(__file__), "--worker"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in sorted(vars(args).items())
        if k not in ("worker", "max_restarts", "workers", "kill_at_step")]
    if attempt == 0 and args.kill_at_step is not None:
        argv.append(f"--kill-at-step={args.kill_at_step}")
    env_path = os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])
    procs = []
    for index in range(args.workers):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), PYTHONPATH=env_path)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        procs.append(subprocess.Popen(argv, env=env))
    deadline = time.monotonic() + args.timeout
    codes = [None] * len(procs)
    while None in codes:
        codes = [p.poll() for p in procs]
        failed = any(c not in (None, 0) for c in codes)
        if failed or time.monotonic() > deadline:
            for p in procs:  # the cluster cannot continue without every worker
                if p.poll() is None:
                    p.kill()
            codes = [p.wait() for p in procs]
            break
        time.sleep(0.2)
    return codes


def _launch(args):
    import numpy as np

    attempts = []
    for attempt in range(args.max_restarts + 1):
        codes = _attempt(args, attempt)
        attempts.append(codes)
        print(f"attempt {attempt}: worker exit codes {codes}", flush=True)
        if all(c == 0 for c in codes):
            break
    summary = {"attempts": attempts, "finished": all(c == 0 for c in attempts[-1])}
    if summary["finished"]:
        files = [np.load(os.path.join(args.out, f"worker{i}.npz"), allow_pickle=False)
                 for i in range(args.workers)]
        keys = sorted(files[0].files)
        summary["masters_identical"] = all(
            sorted(f.files) == keys and all(f[k].tobytes() == files[0][k].tobytes() for k in keys)
            for f in files[1:])
        summary["step"] = int(files[0]["step"])
    print(json.dumps(summary), flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f)
    return 0 if summary["finished"] and summary["masters_identical"] else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--compute-dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--out", default=None, help="output folder (default: a new temp dir)")
    parser.add_argument("--checkpoint-dir", default=None, help="default: <out>/checkpoints")
    parser.add_argument("--kill-worker", type=int, default=1)
    parser.add_argument("--kill-at-step", type=int, default=None,
                        help="first attempt only: the --kill-worker SIGKILLs itself here")
    parser.add_argument("--max-restarts", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=150, help="seconds per attempt")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args) or 0
    args.out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="tfinit_multi_worker_"))
    args.checkpoint_dir = os.path.abspath(args.checkpoint_dir
                                          or os.path.join(args.out, "checkpoints"))
    os.makedirs(args.out, exist_ok=True)
    print(f"outputs in {args.out}", flush=True)
    return _launch(args)


if __name__ == "__main__":
    sys.exit(main())

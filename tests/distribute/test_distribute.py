"""tfinit under MirroredStrategy on two logical CPUs (tests/distribute/_distribute_mirrored.py).

Logical devices must be configured before TensorFlow initialises, so the training runs in
one fresh interpreter that reports what it measured as JSON; each test asserts on one part.
Single-device references use the same seeds, data order and global batch (16, 3 epochs).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# float16 keeps 10 fraction bits, bfloat16 7. Two replicas sum half-batch gradients where
# one device sums the whole batch, so 16-bit rounding differs; 12 steps of SGD keep the
# masters within a few ulps of the 16-bit type at the parameter's magnitude. Measured: < 1
# ulp for both dtypes on an Intel CPU with AMX/AVX512-BF16; on an AMD EPYC without AVX512,
# where bfloat16 kernels are emulated with other accumulation orders, float16 < 1 ulp and
# bfloat16 2.8 ulps (the first bias). A replica that applied its own half-batch gradient
# instead of the all-reduced one would be off by ~lr * |g| * steps: tens of ulps or more.
FRACTION_BITS = {"float16": 10, "bfloat16": 7}
ULPS = {"float16": 2, "bfloat16": 4}


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE)),
                                           os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, os.path.join(HERE, "_distribute_mirrored.py")],
                            capture_output=True, text=True, env=env, timeout=240)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("REPORT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def _check(report, name):
    part = report[name]
    assert part["error"] is None, part["error"]
    return part


def _assert_close_to_one_device(part, dtype):
    for key, diff in part["max_abs_diff"].items():
        magnitude = max(part["max_abs"][key], 2.0**-14)
        ulp = 2.0 ** (np.floor(np.log2(magnitude)) - FRACTION_BITS[dtype])
        assert diff <= ULPS[dtype] * ulp, (key, diff, ulp)
    assert all(part["moved_from_init"].values()), part["moved_from_init"]


@pytest.mark.slow  # the report of a subprocess
@pytest.mark.parametrize("name, dtype", [("fit_float16", "float16"),
                                         ("ctl_float16", "float16"),
                                         ("fit_bfloat16", "bfloat16"),
                                         ("ctl_reverse_bfloat16", "bfloat16")])
def test_mirrored_training_keeps_replicas_identical_and_matches_one_device(report, name, dtype):
    part = _check(report, name)
    assert part["kinds"] == ["MirroredVariable"]  # masters and copies alike
    # every replica's master and copy bit-identical; copy == cast(master) on every replica
    assert part["mismatches"] == []
    assert part["slot_mismatches"] == []
    assert part["losses"][-1] < 0.5 * part["losses"][0], part["losses"]
    np.testing.assert_allclose(part["losses"], part["single_losses"], rtol=0.05)
    _assert_close_to_one_device(part, dtype)
    assert part["copy_dtype"] == dtype


@pytest.mark.slow  # the report of a subprocess
def test_optimizer_built_lazily_inside_strategy_run(report):
    part = _check(report, "ctl_float16")  # its optimizer is first built by apply_gradients
    assert part["optimizer_kinds"] == ["MirroredVariable"]


@pytest.mark.slow  # the report of a subprocess
def test_seeded_fill_gives_every_replica_the_one_device_values(report):
    part = _check(report, "seeded_fills")
    assert part["kinds"] == ["MirroredVariable"]
    assert len(set(part["replica_devices"])) == 2
    assert part["mismatches"] == []  # includes the unseeded GaussianFill bias
    assert part["seeded_equal_fill"] and all(part["seeded_equal_fill"].values())
    assert all(part["seeded_equal_one_device"].values())
    # the consistency check is live: one replica's master nudged by 1e-3 is reported
    found = part["perturbed_mismatches"]
    assert [m.split(": ", 1)[1] for m in found] == [
        "master differs between replicas", "copy != cast(master) on replica 1"], found
    assert found[0].split(": ")[0] == found[1].split(": ")[0]
    assert found[0].split(": ")[0].endswith("kernel")


@pytest.mark.slow  # the report of a subprocess
def test_bad_input_raises_clear_errors(report):
    part = _check(report, "bad_input")
    outside = part["tfinit_scope_outside_strategy_scope"]
    assert outside["type"] == "ValueError"
    assert "inside the strategy's scope" in outside["message"]
    for case in ("mixing_strategies", "model_of_one_strategy_compiled_under_another"):
        assert part[case]["type"] == "RuntimeError"
        assert "Mixing different tf.distribute.Strategy" in part[case]["message"]
    for case in ("model_without_strategy_fit_under_strategy",
                 "model_without_strategy_in_strategy_run"):
        assert part[case]["type"] == "ValueError", part[case]
        assert "was not created under the MirroredStrategy" in part[case]["message"]
        assert "strategy.scope(), tfinit.mixed_precision.scope" in part[case]["message"]


@pytest.mark.slow  # the report of a subprocess
def test_train_steps_have_nothing_tpu_strategy_forbids(report):
    part = _check(report, "tpu_readiness")
    for key in ("ctl pseudo_fp16 float16", "ctl pseudo_fp16 bfloat16", "ctl reverse bfloat16",
                "fit train_step pseudo_fp16 bfloat16"):
        assert part[key] == [], (key, part[key])
    # the check is live: a step with tf.numpy_function is flagged on both replicas
    flagged = part["negative control"]
    assert len(flagged) == 2 and {op for op, _, _ in flagged} == {"PyFuncStateless"}
    # XLA (what TPUs compile with) accepts the whole master-weight step and it trains
    assert part["xla_hlo_chars"] > 1000
    assert part["xla_losses"][-1] < part["xla_losses"][0]
    assert part["xla_mismatches"] == []


def _backup_run(backup_dir, out, *kill):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE)),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, os.path.join(HERE, "_distribute_backup.py"),
                           str(backup_dir), str(out), *map(str, kill)],
                          capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.slow  # three subprocesses
def test_fit_killed_mid_epoch_resumes_with_backup_and_restore_bit_exact(tmp_path):
    """Keras fit under MirroredStrategy, BackupAndRestore, SIGKILL in epoch 2 (of 0..3)."""
    reference = _backup_run(tmp_path / "a", tmp_path / "a.npz")
    assert reference.returncode == 0, reference.stderr[-3000:]
    killed = _backup_run(tmp_path / "b", tmp_path / "b.npz", 2, 1)
    assert killed.returncode == -9 and not (tmp_path / "b.npz").exists()
    resumed = _backup_run(tmp_path / "b", tmp_path / "b.npz")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = np.load(tmp_path / "a.npz", allow_pickle=False)
    got = np.load(tmp_path / "b.npz", allow_pickle=False)
    assert list(want["epochs_run"]) == [0, 1, 2, 3]
    assert list(got["epochs_run"]) == [2, 3]  # resumed from the end of epoch 1's backup
    assert sorted(want.files) == sorted(got.files) and len(want.files) > 5
    for key in want.files:
        if key != "epochs_run":  # fp32 masters and optimizer state (slots, loss scale)
            assert want[key].tobytes() == got[key].tobytes(), key


# -- tfinit.distribute helpers, in this process (one device) ----------------------------
def test_forbidden_ops_flags_float64_variable_creation_and_rejects_plain_functions():
    import tensorflow as tf
    from tfinit import distribute as tfd

    holder = []

    @tf.function
    def bad(x):
        if not holder:
            holder.append(tf.Variable(1.0))  # created inside the step
        return tf.cast(x, tf.float64) * 2.0 + tf.cast(holder[0], tf.float64)

    reasons = {(op, reason) for op, _, reason in tfd.forbidden_ops(bad, tf.ones((2,)))}
    assert ("VarHandleOp", "variable created inside the step") in reasons
    assert any(r == "float64 (unsupported on TPU)" for _, r in reasons)
    with pytest.raises(TypeError, match=r"forbidden_ops: argument `function` must be a "
                                        r"tf.function.*Received: function=function"):
        tfd.forbidden_ops(lambda x: x, tf.ones((2,)))


def test_replica_mismatches_on_one_device_sees_a_stale_copy():
    import keras
    import tensorflow as tf
    from tfinit import distribute as tfd
    from tfinit import mixed_precision as mp

    with mp.scope("pseudo_fp16", "float16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert tfd.replica_mismatches(model) == []
    master = mp.parameter_info(model.layers[0].kernel).blob_copy[tf.float32]
    master.assign(master + 0.125)  # a manual assign without sync_copies
    found = tfd.replica_mismatches(model)
    assert len(found) == 1 and found[0].endswith("kernel: copy != cast(master) on replica 0")
    mp.sync_copies(model)
    assert tfd.replica_mismatches(model) == []

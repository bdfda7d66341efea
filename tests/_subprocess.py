"""One runner for the tests that launch Python in a fresh process.

A fresh interpreter is needed where a setting must come before an import (``XLA_FLAGS``'s
host devices before JAX, logical CPUs before TensorFlow, another ``KERAS_BACKEND``). The child
imports the checkout's tfinit (the repository first on ``PYTHONPATH``) and runs in the
repository root; a failure shows the end of its output.
"""

import os
import subprocess
import sys

from conftest import REPO


def environment(backend=None, *, devices=None, needs_tensorflow=True):
    """``os.environ`` for a child: the repository first on ``PYTHONPATH``; ``backend`` as
    ``KERAS_BACKEND`` (JAX on the CPU); ``devices`` host devices for JAX (``XLA_FLAGS``).
    ``needs_tensorflow`` drops ``TFINIT_TEST_WITHOUT_TENSORFLOW`` (the child imports
    TensorFlow); otherwise the child gets the variable as this process has it (the scripts
    that read it block TensorFlow as conftest.py does)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if backend is not None:
        env.update(KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if needs_tensorflow:
        env.pop("TFINIT_TEST_WITHOUT_TENSORFLOW", None)
    return env


def run_python(*args, backend=None, devices=None, needs_tensorflow=True, timeout=300,
               ends_with=None):
    """Run ``python *args`` (a script path and its arguments, or ``"-c", code, ...``) in
    ``environment(backend, devices=devices, needs_tensorflow=needs_tensorflow)``; assert it
    exits 0 and, given ``ends_with``, that its output ends with it. Returns its stdout."""
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=environment(
                              backend, devices=devices, needs_tensorflow=needs_tensorflow))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if ends_with is not None:
        assert proc.stdout.strip().endswith(ends_with), proc.stdout[-3000:]
    return proc.stdout

"""The stack of active mixed-precision scopes, per thread."""

import dataclasses
import threading

from tfinit import _precision
from tfinit._precision import PairSpec

_local = threading.local()
_compute_dtypes_used = set()  # every thread's: a model built in one thread may train in another


@dataclasses.dataclass(frozen=True, eq=False)
class ScopeState:
    """One entered scope: its pair rules, the strategy it was entered in, its dtype policy."""

    spec: PairSpec
    strategy: object
    policy: object


def _stack():
    # Kept in tfinit._precision, where the PseudoFP16 initializers read the active scope.
    return _precision.scope_stack()


def active():
    """The innermost active scope in this thread, or None."""
    stack = _stack()
    return stack[-1] if stack else None


def push(state):
    _compute_dtypes_used.add(state.spec.compute_dtype)
    _stack().append(state)


def note_read(compute_dtype):
    """Record the compute dtype of the paired variable a layer call just read (this thread)."""
    _local.last_read = compute_dtype


def last_read():
    """The compute dtype of the last paired variable a layer call read in this thread, or
    None: the model whose loss is being scaled when an optimizer is not built yet."""
    return getattr(_local, "last_read", None)


def compute_dtypes_used():
    """The compute dtypes of every scope this process has entered."""
    return set(_compute_dtypes_used)


def pop(state):
    stack = _stack()
    if not stack or stack[-1] is not state:
        raise RuntimeError("tfinit.mixed_precision scopes were exited out of order.")
    stack.pop()

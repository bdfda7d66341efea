"""The stack of active mixed-precision scopes, per thread."""

import dataclasses
import threading

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
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def active():
    """The innermost active scope in this thread, or None."""
    stack = _stack()
    return stack[-1] if stack else None


def push(state):
    _compute_dtypes_used.add(state.spec.compute_dtype)
    _stack().append(state)


def compute_dtypes_used():
    """The compute dtypes of every scope this process has entered."""
    return set(_compute_dtypes_used)


def pop(state):
    stack = _stack()
    if not stack or stack[-1] is not state:
        raise RuntimeError("tfinit.mixed_precision scopes were exited out of order.")
    stack.pop()

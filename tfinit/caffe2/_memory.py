"""The memory a Caffe2 file may make tfinit allocate: :class:`Limit`, :func:`available_bytes`.

A model file is input from elsewhere: a fill's ``shape`` or a predict net's pads can ask
for any size. The init-net replay and the conversion check each size against a limit
before anything is allocated: the caller's ``max_bytes``, else the memory available when
the work starts. Available memory is read without extra packages: on Linux
``MemAvailable`` of ``/proc/meminfo``, lowered to what a cgroup (v2 or v1) memory limit
leaves; elsewhere the free physical pages (``os.sysconf``), on Windows
``GlobalMemoryStatusEx``. Where none of them can be read there is no limit.
"""

import math
import numbers
import os
import sys

_CGROUPS = (  # (limit file, usage file, stat file, reclaimable page-cache key)
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
     "/sys/fs/cgroup/memory.stat", "inactive_file"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
     "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"),
)
_NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def _meminfo():
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (Linux >= 3.14), or None."""
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * (1024 if fields[-1] == "kB" else 1)
    return None


def _cgroup():
    """What the cgroup's memory limit leaves: limit - (usage - reclaimable page cache)."""
    for limit_path, usage_path, stat_path, cache_key in _CGROUPS:
        limit, usage = (_read(limit_path) or "").strip(), (_read(usage_path) or "").strip()
        if not (limit.isdigit() and usage.isdigit()):
            continue
        if int(limit) >= _NO_LIMIT:
            return None
        cache = 0
        for line in (_read(stat_path) or "").splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key and value.strip().isdigit():
                cache = int(value)
        return max(int(limit) - max(int(usage) - cache, 0), 0)
    return None


def _sysconf():
    """Free (else total) physical memory from ``os.sysconf``, or None."""
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            value = os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            continue
        if value > 0:
            return value
    return None


def _windows():
    if sys.platform != "win32":
        return None
    import ctypes

    class _Status(ctypes.Structure):
        _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong)] + [
            (name, ctypes.c_ulonglong) for name in (
                "total_phys", "avail_phys", "total_page", "avail_page", "total_virtual",
                "avail_virtual", "avail_extended")]

    status = _Status()
    status.length = ctypes.sizeof(_Status)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        return None
    return int(status.avail_phys)


def available_bytes():
    """The memory this process can allocate now, in bytes; None where it cannot be read."""
    found = [v for v in (_meminfo(), _cgroup()) if v is not None]
    if found:
        return min(found)
    return _windows() or _sysconf()


def size_text(nbytes):
    """``"4000000000000 bytes (4.0 TB)"``: the exact count and a decimal unit."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes} bytes ({nbytes / scale:.1f} {unit})"
    return f"{nbytes} bytes"


def check_max_bytes(max_bytes, where):
    """``max_bytes`` validated: None or a positive int."""
    if max_bytes is None:
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, numbers.Integral):
        raise TypeError(f"{where}: Argument `max_bytes` must be a positive int (bytes) or "
                        f"None (the memory available). Received: max_bytes={max_bytes!r}.")
    if int(max_bytes) <= 0:
        raise ValueError(f"{where}: Argument `max_bytes` must be positive. Received: "
                         f"max_bytes={max_bytes!r}.")
    return int(max_bytes)


class Limit:
    """The bytes a piece of work may allocate: ``max_bytes``, else the memory available
    when it is first checked (measured once).

    ``check`` raises ``ValueError`` for a size over it, before anything is allocated;
    ``claim`` also counts the size in ``held``, what the work holds from then on.
    """

    _unmeasured = object()

    def __init__(self, max_bytes=None, where="tfinit"):
        self.given = check_max_bytes(max_bytes, where)
        self._bytes = self.given if self.given is not None else self._unmeasured
        self.held = 0

    @property
    def bytes(self):
        if self._bytes is self._unmeasured:
            self._bytes = available_bytes()
        return self._bytes

    def claim(self, nbytes, what, received):
        """:meth:`check` with what the work already holds, then hold ``nbytes`` too."""
        self.check(nbytes, what, received, self.held)
        self.held += nbytes

    def check(self, nbytes, what, received, held=0):
        """Raise for ``held + nbytes`` over the limit: ``what`` (e.g. "a float32 blob of
        shape [...]") needs ``nbytes``; ``held`` is what the same work holds already."""
        if self.bytes is None or held + nbytes <= self.bytes:
            return
        before = f"; with the {size_text(held)} of the blobs before it, that is" if held else ","
        if self.given is not None:
            limit = f"the limit max_bytes={self.given}"
        else:
            limit = f"the {size_text(self.bytes)} of memory available"
        raise ValueError(f"{what} needs {size_text(nbytes)}{before} more than {limit}; pass "
                         f"a larger max_bytes (tfinit: --max-bytes) to allow it. Received: "
                         f"{received}.")


def blob_bytes(shape, itemsize):
    """Bytes of a blob of ``shape`` (None dims skipped) with ``itemsize``-byte elements."""
    return math.prod(int(d) for d in shape if d is not None) * int(itemsize)

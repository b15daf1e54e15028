"""FlexTensor's control API from Python (docs/control.md, shim/flextensor.h).

Pure Python over ctypes. The functions are looked up in the process itself: the
library they call, libflextensor.so, is preloaded (``ft-run python ...``, or
``LD_PRELOAD=.../libflextensor.so FT_ENABLED=1``), never loaded by this module.

Without it (not preloaded, or preloaded with FT_ENABLED off), nothing raises:
``enabled()`` is False, ``memory_usage()`` is None, ``suspend_profiling()`` is a
context manager that does nothing, ``iteration_mark()`` does nothing, and
``set_gpu_mem_limit()``, ``request_replan()``, ``release()`` and ``resume()`` return
False. With FlexTensor on, those four return True when done or accepted, and raise
FlexTensorError when FlexTensor refuses (the reason is on stderr, in its log).

``offload_timing()`` returns the offload timing report (ft_offload_timing_collect:
per unit the bytes moved, copy time, overlapped compute, stall, hits and misses; per
pass the step), or None when FlexTensor is not enabled or the library predates it;
the first call turns timing on when FT_OFFLOAD_TIMING is off. ``reset_offload_timing()``
starts its counts again.
"""

import contextlib
import ctypes
import dataclasses
import re
from typing import Iterator, Optional, Union

__all__ = [
    "FlexTensorError",
    "MemoryUsage",
    "loaded",
    "enabled",
    "memory_usage",
    "suspend_profiling",
    "iteration_mark",
    "set_gpu_mem_limit",
    "request_replan",
    "release",
    "resume",
    "OffloadTimingReport",
    "UnitTiming",
    "offload_timing",
    "reset_offload_timing",
    "parse_size",
]


class FlexTensorError(RuntimeError):
    """FlexTensor refused a call; ``code`` is the C call's return value (-1 refused,
    -2 a budget below the smallest that works)."""

    def __init__(self, call: str, code: int):
        why = "a budget below the smallest that works" if code == -2 else "refused"
        super().__init__(f"{call}: {why} (returned {code}; FlexTensor's log on stderr says why)")
        self.code = code


@dataclasses.dataclass(frozen=True)
class MemoryUsage:
    """Device memory the process holds through FlexTensor, in bytes
    (ft_gpu_memory_usage_t)."""

    total_bytes: int      # the sum of the next four
    resident_bytes: int   # weights of the units kept resident
    slots_bytes: int      # streamed units loaded now
    other_bytes: int      # everything else: activations, caches, ...
    unmapped_bytes: int   # not counted above: streamed weights in host memory now
    budget_bytes: int     # the plan's budget; 0: none
    planned: bool         # False before the plan: every byte is other_bytes then


class _Usage(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_ulonglong)
        for name in ("total_bytes", "resident_bytes", "slots_bytes", "other_bytes",
                     "unmapped_bytes", "budget_bytes")
    ]


# The C functions, looked up once: None when the library is not in the process.
_api = None
_looked_up = False


def _lib():
    global _api, _looked_up
    if _looked_up:
        return _api
    _looked_up = True
    try:
        process = ctypes.CDLL(None)
        signatures = {
            "ft_enabled": (ctypes.c_int, []),
            "ft_iteration_mark": (None, []),
            "ft_profiling_suspend": (None, []),
            "ft_profiling_resume": (ctypes.c_int, []),
            "ft_get_gpu_memory_usage": (ctypes.c_int, [ctypes.POINTER(_Usage)]),
            "ft_set_gpu_mem_limit": (ctypes.c_int, [ctypes.c_ulonglong]),
            "ft_request_replan": (ctypes.c_int, []),
            "ft_release": (ctypes.c_int, [ctypes.c_int]),
            "ft_resume": (ctypes.c_int, []),
        }
        api = {}
        for name, (restype, argtypes) in signatures.items():
            fn = getattr(process, name)
            fn.restype = restype
            fn.argtypes = argtypes
            api[name] = fn
        _api = api
    except (OSError, AttributeError):
        _api = None  # not preloaded, or an older libflextensor.so without these calls
    return _api


def loaded() -> bool:
    """True when libflextensor.so is in the process (whether or not it is enabled)."""
    return _lib() is not None


def enabled() -> bool:
    """True when libflextensor.so is preloaded and FT_ENABLED is on."""
    api = _lib()
    return api is not None and api["ft_enabled"]() == 1


def memory_usage() -> Optional[MemoryUsage]:
    """What the process holds on the device through FlexTensor, or None when FlexTensor
    is not enabled (or made no plan it can keep). Before the plan, ``planned`` is False
    and every byte counts as other_bytes."""
    if not enabled():
        return None
    u = _Usage()
    rc = _lib()["ft_get_gpu_memory_usage"](ctypes.byref(u))
    if rc < 0:
        return None
    return MemoryUsage(u.total_bytes, u.resident_bytes, u.slots_bytes, u.other_bytes,
                       u.unmapped_bytes, u.budget_bytes, rc == 0)


@contextlib.contextmanager
def suspend_profiling() -> Iterator[None]:
    """Passes run inside are not profiled (warm-up, evaluation); nests. Does nothing
    when FlexTensor is not enabled."""
    on = enabled()
    if on:
        _lib()["ft_profiling_suspend"]()
    try:
        yield
    finally:
        if on:
            _lib()["ft_profiling_resume"]()


def iteration_mark() -> None:
    """An iteration (a forward) begins at this thread's next launch; replaces
    FlexTensor's own detection. Does nothing when FlexTensor is not enabled."""
    if enabled():
        _lib()["ft_iteration_mark"]()


_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = 1024 ** _i
    _UNITS[_p + "b"] = 1000 ** _i


def parse_size(size: Union[int, str, None]) -> int:
    """Bytes of a size as FlexTensor's options write them: an int, or a string such as
    "8GiB", "512MiB", "1.5G", "4G" (K, M, G, T alone or with iB: powers of 1024; with B:
    powers of 1000). None is 0 (no limit)."""
    if size is None:
        return 0
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(f"a size is an int or a string, not {type(size).__name__}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"a size cannot be negative ({size})")
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", size)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"not a size: {size!r} (8GiB, 512MiB, 1.5G, 64B)")
    return int(float(m.group(1)) * _UNITS[unit])


def _call(name: str, *args) -> bool:
    if not enabled():
        return False
    rc = _lib()[name](*args)
    if rc < 0:
        shown = ", ".join(repr(a) for a in args)
        raise FlexTensorError(f"{name}({shown})", rc)
    return True


def set_gpu_mem_limit(limit: Union[int, str, None]) -> bool:
    """The memory budget becomes `limit` (bytes, or "8GiB"; None or 0: no
    FT_GPU_MEM_LIMIT). After the plan it is checked at once and carried out at the next
    pass boundary (units move); before it, the plan to come is made for it. True when
    accepted; False when FlexTensor is not enabled; FlexTensorError when refused (code
    -2: below the smallest budget that works, which the log gives)."""
    return _call("ft_set_gpu_mem_limit", parse_size(limit))


def request_replan() -> bool:
    """The units are profiled again over the next passes as they stream, then the plan
    is made again. True when accepted; False when FlexTensor is not enabled."""
    return _call("ft_request_replan")


def release(keep_weights: bool = True) -> bool:
    """Sleep: every weight FlexTensor can move goes to pinned host memory and its device
    memory is freed, now; the tensors' addresses stay valid, and a kernel that touches
    a released weight gets it loaded first. keep_weights=False (drop the weights) is not
    supported: FlexTensorError. True when done; False when FlexTensor is not enabled."""
    return _call("ft_release", 1 if keep_weights else 0)


def resume() -> bool:
    """Wake: the plan in force before release() comes back (its resident weights loaded
    again now). True when done; False when FlexTensor is not enabled; FlexTensorError
    when nothing was released."""
    return _call("ft_resume")


# --- offload timing (ft_offload_timing_collect, shim/flextensor.h) -------------------

_TIMING_UNIT_FIELDS = ("streamed", "streamed_bytes", "loads", "hits", "misses", "bytes_in",
                       "bytes_out", "unloads", "copies_timed", "transfer_ns", "overlap_ns",
                       "compute_passes", "compute_ns", "stall_ns")


class _TimingUnit(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64)] + [(f, ctypes.c_ulonglong) for f in _TIMING_UNIT_FIELDS]


class _Timing(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint), ("version", ctypes.c_uint), ("unit_size", ctypes.c_uint),
        ("units_cap", ctypes.c_uint), ("units", ctypes.POINTER(_TimingUnit)),
    ] + [(f, ctypes.c_ulonglong) for f in ("n_units", "passes", "passes_lost", "step_ns_total",
                                          "last_step_ns", "predicted_step_ns", "stall_ns")]


@dataclasses.dataclass(frozen=True)
class UnitTiming:
    """One unit's offload timing (ft_offload_timing_unit_t): counts exact, times (ns)
    summed over the passes timed."""

    name: str
    streamed: bool
    streamed_bytes: int   # what one load copies in
    loads: int            # hits + misses
    hits: int             # loads ahead of use (prefetched on the side stream)
    misses: int           # loads on demand, on the stream of the call that needed it
    bytes_in: int
    bytes_out: int        # copied back at unloads
    unloads: int
    copies_timed: int
    transfer_ns: int
    overlap_ns: int       # compute that ran during its copies
    compute_passes: int
    compute_ns: int
    stall_ns: int         # its first kernel waiting for its copy


@dataclasses.dataclass(frozen=True)
class OffloadTimingReport:
    """ft_offload_timing_t: the passes timed and each unit's timing."""

    passes: int
    passes_lost: int
    step_ns_total: int    # mean step = step_ns_total / passes
    last_step_ns: int
    predicted_step_ns: int
    stall_ns: int
    units: list
    started_now: bool     # timing was off: this call turned it on (everything 0)


def _timing_api():
    api = _lib()
    if api is None:
        return None
    if "ft_offload_timing_collect" not in api:
        try:
            process = ctypes.CDLL(None)
            collect = process.ft_offload_timing_collect
            reset = process.ft_offload_timing_reset
        except (OSError, AttributeError):
            return None  # a libflextensor.so from before offload timing
        collect.restype, collect.argtypes = ctypes.c_int, [ctypes.POINTER(_Timing)]
        reset.restype, reset.argtypes = None, []
        api["ft_offload_timing_collect"] = collect
        api["ft_offload_timing_reset"] = reset
    return api


def offload_timing() -> Optional[OffloadTimingReport]:
    """The offload timing report, or None when FlexTensor is not enabled (or the
    library has no offload timing). With FT_OFFLOAD_TIMING off, the first call turns
    timing on from the next pass and returns a report of zeros (started_now True)."""
    api = _timing_api() if enabled() else None
    if api is None:
        return None
    r = _Timing(size=ctypes.sizeof(_Timing), unit_size=ctypes.sizeof(_TimingUnit))
    rc = api["ft_offload_timing_collect"](ctypes.byref(r))
    if rc < 0:
        return None
    n = r.n_units
    if n > 0:  # again, with room for every unit
        buf = (_TimingUnit * n)()
        r = _Timing(size=ctypes.sizeof(_Timing), unit_size=ctypes.sizeof(_TimingUnit), units_cap=n,
                    units=ctypes.cast(buf, ctypes.POINTER(_TimingUnit)))
        if api["ft_offload_timing_collect"](ctypes.byref(r)) < 0:
            return None
        n = min(n, r.n_units)
    units = [UnitTiming(buf[i].name.decode("utf-8", "replace"), bool(buf[i].streamed),
                        *(getattr(buf[i], f) for f in _TIMING_UNIT_FIELDS[1:])) for i in range(n)]
    return OffloadTimingReport(r.passes, r.passes_lost, r.step_ns_total, r.last_step_ns,
                               r.predicted_step_ns, r.stall_ns, units, rc == 1)


def reset_offload_timing() -> None:
    """Offload timing's counts and times start again from zero. Does nothing when
    FlexTensor is not enabled."""
    api = _timing_api() if enabled() else None
    if api is not None:
        api["ft_offload_timing_reset"]()

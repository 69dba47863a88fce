"""How the benchmarks measure: wall time (interleaved rounds, CUDA-synchronised) and peak memory.

``time_interleaved`` is ``pcgeom bench``'s timer (warm-up, interleaved rounds,
best and median, slow methods given fewer rounds); ``memory_child`` /
``measure_memory`` and ``scaling_child`` are its fresh-process probes.  The
general helpers below them serve the scripts in ``benchmarks/`` as well:
``interleaved`` (raw per-method times of interleaved rounds), ``time_pair``
(two callables within a time budget), ``timed_call``, ``median_ms`` (CUDA
events on a GPU), ``CallTimer`` (time accumulated inside wrapped calls),
``clock`` / ``sync`` and ``PeakMemory`` / ``status_kib`` / ``reset_peak_rss``.

Interleaving (one call of each method per round) makes load on a shared
machine hit every method alike; the best round compares the code, as noise
only adds time.  On CUDA every clock reading waits for the device's queued
work first, so a time covers the work, not its launch.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch

import pcgeom
from pcgeom.bench.peers import methods_for
from pcgeom.bench.workloads import make_inputs

# A method whose warm-up call alone takes longer is not called again: its
# warm-up time is reported.
GIVE_UP_S = 5.0


def time_interleaved(methods: dict, repeats: int, slow_s: float, slow_rounds: int | None = None):
    """Best and median wall time (ms) per method; one warm-up call each, then
    rounds of one call per method.  Methods slower than slow_s are timed in a
    third of the rounds (at least one), or in `slow_rounds` rounds when given
    (0: the warm-up time is reported).  Returns (best, median, runs, outputs)."""
    if slow_rounds is None:
        slow_rounds = max(1, repeats // 3)
    outs, times, warm = {}, {n: [] for n in methods}, {}
    for name, fn in methods.items():
        t = time.perf_counter()
        outs[name] = fn()
        warm[name] = time.perf_counter() - t
    for r in range(repeats):
        for name, fn in methods.items():
            if warm[name] > GIVE_UP_S or (warm[name] > slow_s and r >= slow_rounds):
                continue
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    for name in methods:
        if not times[name]:
            times[name].append(warm[name])
    return ({n: 1e3 * min(v) for n, v in times.items()}, {n: 1e3 * statistics.median(v) for n, v in times.items()},
            {n: len(v) for n, v in times.items()}, outs)



def memory_child(workload: str, dataset: str, method: str, threads: int) -> None:
    """The memory probe's fresh process (``--_memory``): prints {"mb": peak extra MB of one call}."""
    torch.set_num_threads(threads)
    small = make_inputs(workload, dataset, small=True)
    methods_for(small)[method]()  # lazy initialisation, thread pools
    inp = make_inputs(workload, dataset)
    fn = methods_for(inp)[method]
    reset_peak_rss()
    before = _rss_kb()
    fn()
    print(json.dumps({"mb": max(0, _hwm_kb() - before) / 1024}))


def measure_memory(workload: str, dataset: str, method: str, threads: int) -> float | None:
    """Peak extra resident MB of one call of `method`, measured in a fresh process (None off Linux or on failure)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    cmd = [sys.executable, "-m", "pcgeom.bench", "--_memory", workload, dataset, method, "--threads", str(threads)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return float(json.loads(res.stdout.strip().splitlines()[-1])["mb"])
    except Exception:
        return None


def scaling_child(kind: str, N: int, method: str, threads: int, repeats: int) -> None:
    """The scaling report's fresh process (``--_scaling``): prints median and first-call ms and peak extra MB."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    p = torch.rand(1, N, 3, generator=g)
    P = p[0].numpy()
    if kind == "knn":
        if method == "pcgeom":
            fn = lambda: pcgeom.knn(p, p, 16)  # noqa: E731
        else:
            from pykdtree.kdtree import KDTree

            fn = lambda: KDTree(P).query(P, k=16)  # noqa: E731
    else:
        S = N // 50
        if method == "pcgeom":
            fn = lambda: pcgeom.farthest_point_sample(p, S)  # noqa: E731
        else:
            import fpsample

            fn = lambda: fpsample.bucket_fps_kdline_sampling(P, S, h=7, start_idx=0)  # noqa: E731
    reset_peak_rss()
    before = _rss_kb()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    mem = max(0, _hwm_kb() - before) / 1024
    print(json.dumps({"ms": 1e3 * statistics.median(times), "first_ms": 1e3 * times[0], "mb": mem}))


# ---------------------------------------------------------------------------
# Memory probes (Linux /proc; CUDA allocator statistics on a GPU).


def status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` figure in KiB (``"VmRSS"``, ``"VmHWM"``), None where there is none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the resident-set high-water mark (VmHWM) to the current resident set; False where Linux cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def _rss_kb() -> int:
    return status_kib("VmRSS") or 0


def _hwm_kb() -> int:
    return status_kib("VmHWM") or 0


class PeakMemory:
    """Peak extra memory of a ``with`` block, in ``extra_bytes`` (NaN where it cannot be measured).

    On the CPU: the resident-set high-water mark during the block minus the
    resident set at its start (``/proc/self/clear_refs`` resets the mark); on
    CUDA: ``torch.cuda.max_memory_allocated`` above the allocation at its start
    (the device is synchronised on entry and exit).
    """

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.extra_bytes: float = float("nan")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            self.base = status_kib("VmRSS") if reset_peak_rss() else None
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.extra_bytes = torch.cuda.max_memory_allocated(self.device) - self.base
        elif self.base is not None:
            hwm = status_kib("VmHWM")
            if hwm is not None:
                self.extra_bytes = max(0, hwm - self.base) * 1024
        return False


# ---------------------------------------------------------------------------
# General timers (the benchmark scripts' too).


def sync(device: torch.device | str | None) -> None:
    """Wait for the work queued on a CUDA `device` (nothing for the CPU or None)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device | str | None = None) -> float:
    """``time.perf_counter()`` once the device's queued work is done (CUDA runs asynchronously)."""
    sync(device)
    return time.perf_counter()


def interleaved(methods, repeats: int, *, warmup: bool = True, device=None) -> dict[str, list[float]]:
    """Wall times in seconds, ``{name: [one per round]}``, of interleaved rounds.

    `methods` is a dict or a sequence of ``(name, callable)``.  With `warmup`
    every method is called once first, untimed, in order; then each of the
    `repeats` rounds calls every method once, in order.  Take ``min`` for the
    best round (noise only adds time) or ``statistics.median``.
    """
    items = list(methods.items()) if isinstance(methods, dict) else list(methods)
    if warmup:
        for _, fn in items:
            fn()
    times = {name: [] for name, _ in items}
    for _ in range(repeats):
        for name, fn in items:
            t = clock(device)
            fn()
            times[name].append(clock(device) - t)
    return times


def time_pair(fn_a, fn_b, budget_s: float = 1.5, min_rounds: int = 3, max_rounds: int = 15):
    """Best times (s) of two callables over interleaved alternations (a, b, a, b, ...)
    after one warm-up call each (whose times count too); the number of rounds fits
    the budget.  Returns (best_a, best_b, rounds)."""
    t = time.perf_counter()
    fn_a()
    ta = time.perf_counter() - t
    t = time.perf_counter()
    fn_b()
    tb = time.perf_counter() - t
    rounds = int(min(max_rounds, max(min_rounds, budget_s / max(ta + tb, 1e-6))))
    best_a, best_b = ta, tb
    for _ in range(rounds):
        t = time.perf_counter()
        fn_a()
        best_a = min(best_a, time.perf_counter() - t)
        t = time.perf_counter()
        fn_b()
        best_b = min(best_b, time.perf_counter() - t)
    return best_a, best_b, rounds


def timed_call(fn, device=None):
    """(result, seconds) of one call of `fn`, device-synchronised: the first (cold) call
    when nothing ran before it, or one call inside a measurement of its own."""
    t = clock(device)
    out = fn()
    return out, clock(device) - t


def median_ms(fn, repeats: int, warmup: int = 1, device=None) -> float:
    """Median wall time of `fn` in ms over `repeats` calls after `warmup` untimed ones.

    On CUDA each call is timed by CUDA events recorded around it; elsewhere by
    ``time.perf_counter``."""
    device = None if device is None else torch.device(device)
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        if device is not None and device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


class CallTimer:
    """Wraps callables and accumulates in ``t`` the wall time (s) spent inside them, device-synchronised."""

    def __init__(self, device=None):
        self.t, self.device = 0.0, device

    def wrap(self, fn):
        def call(*a, **kw):
            t0 = clock(self.device)
            out = fn(*a, **kw)
            self.t += clock(self.device) - t0
            return out
        return call

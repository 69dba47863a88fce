"""Sizes: absurd arguments name themselves, and products past 2**31 index correctly.

* A huge ``k`` / ``n_samples`` / ``n`` is an error naming the argument and the
  bytes its outputs would need -- on the native and the pure-torch path alike
  (cheap: the allocation fails at once).
* An out-of-memory inside a CPU kernel's parallel region names the op and what
  it needed (torch's stable ``parallel_for`` used to replace it with
  ``torch_parallel_for(...) API call failed``), checked in a subprocess with a
  capped address space.
* ``slow`` tests run kernels on tensors just past 2**31 elements (64-bit index
  arithmetic), each under ~5 GB and well under a minute on 2 cores.  They need
  the native kernels (the pure-torch path makes float32 copies that would
  double the memory) and skip, saying so, where the machine lacks the memory.

See docs/guides/limits.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import pcgeom
from pcgeom._backend import backend_info

pytestmark = pytest.mark.ops

HUGE = 2**40
NATIVE_CPU = "cpu" in backend_info()["native_devices"]


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def need_memory(gib: float):
    if not NATIVE_CPU:
        pytest.skip("large-input tests run the native CPU kernels (the pure-torch path copies to float32)")
    avail = _mem_available()
    if avail < gib * 2**30 * 1.25:
        pytest.skip(f"needs ~{gib:.1f} GiB free, {avail / 2**30:.1f} GiB available")


# --------------------------------------------------------------------------- absurd sizes


@pytest.mark.parametrize("fn", ["knn", "ball_query", "ball_query_index"])
def test_huge_k_names_k_and_the_size(fn):
    q = torch.rand(1, 4, 3)
    p = torch.rand(1, 6, 3)
    with pytest.raises(RuntimeError, match=rf"k={HUGE} needs dist2 and idx of shape \(1, 4, {HUGE}\), 48\.0 TiB"):
        if fn == "knn":
            pcgeom.knn(q, p, HUGE)
        else:
            pcgeom.ball_query(q, p, 0.5, HUGE, order="index" if fn.endswith("index") else "distance")


def test_huge_n_samples_names_n_samples_and_the_size():
    with pytest.raises(RuntimeError, match=rf"n_samples={HUGE} needs the indices of shape \(2, {HUGE}\), 16\.0 TiB"):
        pcgeom.farthest_point_sample(torch.rand(2, 10, 3), HUGE)


def test_huge_k_product_overflowing_int64_is_an_error():
    # B * M * k past 2**63: no allocation is even attempted.
    q = torch.rand(1, 2**24, 1).expand(2**20, -1, -1)
    with pytest.raises(RuntimeError, match=r"k=1099511627776 is too large: dist2 and idx of shape .* more than any address space"):
        torch.ops.pcgeom.knn(q, q[:, :1], HUGE, torch.zeros(2**20, dtype=torch.long), torch.ones(2**20, dtype=torch.long))


def test_huge_n_in_gather_backward_names_n():
    g = torch.rand(1, 2, 3, 4)
    idx = torch.full((1, 2, 3), -1)
    with pytest.raises(RuntimeError, match=rf"knn_gather_backward: n={HUGE} needs the gradient of shape \(1, {HUGE}, 4\)"):
        torch.ops.pcgeom.knn_gather_backward(g, idx, HUGE)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux-specific here")
def test_out_of_memory_inside_a_parallel_kernel_names_the_op():
    """The cause of issue 22's ``torch_parallel_for(...) API call failed`` on a
    cloud near 2**31/3 points: the FPS working buffers did not fit, and the
    std::bad_alloc thrown inside torch's parallel_for lost its message."""
    if not NATIVE_CPU:
        pytest.skip("native CPU kernels only")
    code = textwrap.dedent(
        """
        import resource, torch, pcgeom
        torch.set_num_threads(1)
        pts = torch.rand(1, 2**26, 3)          # 768 MiB; FPS needs >= 1 GiB more
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + 2**28, resource.RLIM_INFINITY))
        try:
            pcgeom.farthest_point_sample(pts, 32)
        except RuntimeError as e:
            print("ERR", e)
        else:
            print("OK")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert "ERR" in res.stdout, out
    assert "API call failed" not in res.stdout, out
    assert "farthest_point_sample: out of host memory for the working buffers of cloud 0" in res.stdout, out
    assert "lengths[0]=67108864 points, D=3" in res.stdout and "1.0 GiB" in res.stdout, out


# --------------------------------------------------------------------------- just past 2**31 elements


@pytest.mark.slow
def test_knn_gather_output_past_2_31_elements():
    need_memory(4.6)
    M, K, C = 2**16, 2**8, 129  # M*K*C = 2_164_260_864 > 2**31
    x = torch.arange(3 * C, dtype=torch.float16).reshape(1, 3, C) / 8
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(-1, 3, (1, M, K), generator=g)
    idx[0, -1, -3:] = torch.tensor([2, -1, 1])
    out = pcgeom.knn_gather(x, idx)
    assert out.shape == (1, M, K, C) and out.numel() > 2**31
    # the last slots start past element 2**31
    assert torch.equal(out[0, -1, -3], x[0, 2]) and torch.equal(out[0, -1, -1], x[0, 1])
    assert not out[0, -1, -2].any()
    rows = torch.randint(0, M, (2000,), generator=g)
    cols = torch.randint(0, K, (2000,), generator=g)
    sel = idx[0, rows, cols]
    want = torch.where((sel >= 0)[:, None], x[0, sel.clamp_min(0)], torch.zeros((), dtype=x.dtype))
    assert torch.equal(out[0, rows, cols], want)


@pytest.mark.slow
def test_knn_gather_backward_reads_past_2_31_elements():
    need_memory(4.6)
    M, K, C = 2**16, 2**8, 129
    grad = torch.ones(1, M, K, C, dtype=torch.float16)
    grad[0, -1, -1] = 3.0  # the last slot, past element 2**31
    idx = torch.full((1, M, K), -1)
    idx[0, -1, -4:] = torch.tensor([0, 2, 2, 1])
    out = torch.ops.pcgeom.knn_gather_backward(grad, idx, 3)
    want = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float16)[:, None].expand(3, C)
    assert torch.equal(out[0], want)


@pytest.mark.slow
def test_farthest_point_sample_past_2_31_coordinates():
    # N * D = 2**21 * 1025 = 2_149_580_800 > 2**31: float16 input (4.0 GiB),
    # read in place (no float32 copy); a NaN point keeps the kernel on the
    # generic loop, whose working memory is one distance per point.
    need_memory(4.4)
    N, D = 2**21, 1025
    pts = torch.zeros(1, N, D, dtype=torch.float16)
    pts[0, N - 1] = 1.0         # farthest from point 0: dist2 = 1025
    pts[0, N - 2, 0] = -1.0     # then this one: min(1, 4 + 1024) = 1
    pts[0, 5, 3] = float("nan")  # chosen last
    out = pcgeom.farthest_point_sample(pts, 4)
    # after those, every remaining point has mind 0: the lowest index, 1
    assert out.tolist() == [[0, N - 1, N - 2, 1]]

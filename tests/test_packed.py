"""The packed (N_total, D) + cumulative offsets layout of knn / ball_query / FPS, and pack / unpack."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from conftest import lattice_cloud
from oracle import fps_oracle, knn_oracle

pytestmark = pytest.mark.ops

LENGTHS = [0, 1, 7, 30, 2, 0, 19]


def ragged(lengths, D=3, dtype=torch.float32, seed=0, lattice=False):
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    if lattice:
        x = lattice_cloud(1, 4, D, seed=seed)[0].repeat(4, 1)[:n].to(dtype)  # many exact ties
        x = x[torch.randperm(n, generator=g)]
    else:
        x = torch.rand(n, D, generator=g, dtype=torch.float64).to(dtype)
    return x, torch.tensor(np.cumsum(lengths), dtype=torch.int64)


def clouds(x, off):
    s = 0
    for e in off.tolist():
        yield s, x[s:e]
        s = e


def packed_knn_oracle(q, qo, p, po, k, radius=None):
    dist, idx = [], []
    for (_, qc), (ps, pc) in zip(clouds(q, qo), clouds(p, po)):
        d, i = knn_oracle(qc[None], pc[None], k, radius=radius)
        dist.append(d[0])
        idx.append(np.where(i[0] >= 0, i[0] + ps, -1))
    return np.concatenate(dist).reshape(-1, k), np.concatenate(idx).reshape(-1, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lattice", [False, True])
def test_knn_packed_matches_oracle_and_padded(dtype, lattice):
    q, qo = ragged([3, 0, 5, 1, 8, 4, 2], dtype=dtype, seed=1, lattice=lattice)
    p, po = ragged(LENGTHS, dtype=dtype, seed=2, lattice=lattice)
    k = 4
    d, i = pcgeom.knn(q, p, k, query_offsets=qo, points_offsets=po)
    assert d.shape == (q.shape[0], k) and i.dtype == torch.int64 and d.dtype == dtype
    od, oi = packed_knn_oracle(q, qo, p, po, k)
    np.testing.assert_array_equal(i.numpy(), oi)  # exact, ties to the lower index
    np.testing.assert_allclose(d.double().numpy(), od, rtol=1e-6)
    # The same data in the padded layout gives the same answer.
    qp, ql = pcgeom.unpack(q, qo)
    pp, pl = pcgeom.unpack(p, po)
    dp, ip = pcgeom.knn(qp, pp, k, query_lengths=ql, points_lengths=pl)
    starts = (po - pl)[:, None, None]
    ip = torch.where(ip >= 0, ip + starts, ip)
    assert torch.equal(pcgeom.pack(ip, ql)[0], i)
    assert torch.equal(pcgeom.pack(dp, ql)[0], d)


def test_ball_query_packed_matches_oracle():
    q, qo = ragged([3, 0, 5, 1, 8, 4, 2], seed=3)
    p, po = ragged(LENGTHS, seed=4)
    d, i = pcgeom.ball_query(q, p, 0.45, 5, query_offsets=qo, points_offsets=po)
    od, oi = packed_knn_oracle(q, qo, p, po, 5, radius=0.45)
    np.testing.assert_array_equal(i.numpy(), oi)
    np.testing.assert_allclose(d.double().numpy(), od, rtol=1e-6)
    assert (i == -1).any() and (i >= 0).any()


def test_knn_packed_default_offsets_is_one_cloud():
    x = torch.rand(20, 2, dtype=torch.float64)
    d, i = pcgeom.knn(x, x, 3)
    dp, ip = pcgeom.knn(x[None], x[None], 3)
    assert torch.equal(i, ip[0]) and torch.equal(d, dp[0])


def test_knn_packed_gradient_equals_padded():
    q, qo = ragged([3, 0, 5, 1, 8, 4, 2], dtype=torch.float64, seed=5)
    p, po = ragged(LENGTHS, dtype=torch.float64, seed=6)
    q.requires_grad_(True)
    p.requires_grad_(True)
    w = torch.rand(q.shape[0], 3, dtype=torch.float64)
    d, _ = pcgeom.knn(q, p, 3, query_offsets=qo, points_offsets=po)
    (torch.nan_to_num(d, posinf=0.0) * w).sum().backward()
    # Reference gradient: float64 closed form 2 (q - p_j) per valid neighbour.
    gq = torch.zeros_like(q)
    gp = torch.zeros_like(p)
    _, oi = packed_knn_oracle(q.detach(), qo, p.detach(), po, 3)
    for m in range(q.shape[0]):
        for j in range(3):
            n = oi[m, j]
            if n >= 0:
                g = 2 * (q.detach()[m] - p.detach()[n]) * w[m, j]
                gq[m] += g
                gp[n] -= g
    torch.testing.assert_close(q.grad, gq)
    torch.testing.assert_close(p.grad, gp)


def test_fps_packed_matches_oracle_and_counts():
    p, po = ragged(LENGTHS, seed=7)
    idx = pcgeom.farthest_point_sample(p, 4, offsets=po)
    assert idx.shape == (4 * len(LENGTHS),)
    want = []
    for s, c in clouds(p, po):
        o = fps_oracle(c[None], 4)[0] if len(c) else np.full(4, -1)
        want.append(np.where(o >= 0, o + s, -1))
    np.testing.assert_array_equal(idx.numpy(), np.concatenate(want))
    counts = torch.tensor([2, 1, 3, 5, 0, 1, 19])
    starts = torch.tensor([0, 0, 6, 29, 1, 0, 18])
    idx = pcgeom.farthest_point_sample(p, counts, offsets=po, start_index=starts)
    assert idx.shape == (int(counts.sum()),)
    want = []
    for (s, c), n, st in zip(clouds(p, po), counts.tolist(), starts.tolist()):
        o = fps_oracle(c[None], n, start=st)[0] if len(c) else np.full(n, -1)
        want.append(np.where(o >= 0, o + s, -1))
    np.testing.assert_array_equal(idx.numpy(), np.concatenate(want))


def test_pack_unpack_round_trip():
    x = torch.rand(4, 6, 2, 3)
    lengths = torch.tensor([0, 6, 1, 3])
    packed, off = pcgeom.pack(x, lengths)
    assert packed.shape == (10, 2, 3)
    assert off.tolist() == [0, 6, 7, 10]
    assert torch.equal(packed, torch.cat([x[b, : lengths[b]] for b in range(4)]))
    back, n = pcgeom.unpack(packed, off)
    assert back.shape == (4, 6, 2, 3) and torch.equal(n, lengths)
    mask = torch.arange(6)[None] < lengths[:, None]
    assert torch.equal(back[mask], x[mask]) and (back[~mask] == 0).all()
    empty, n = pcgeom.unpack(torch.zeros(0, 3), torch.tensor([0, 0]))
    assert empty.shape == (2, 0, 3) and n.tolist() == [0, 0]


def test_knn_packed_under_torch_compile():
    q, qo = ragged([3, 0, 5], seed=8)
    f = torch.compile(lambda a, b: pcgeom.knn(a, b, 2, query_offsets=b_off, points_offsets=b_off), backend="eager")
    b_off = qo
    d, i = f(q, q)
    d2, i2 = pcgeom.knn(q, q, 2, query_offsets=qo, points_offsets=qo)
    assert torch.equal(i, i2) and torch.equal(d, d2)


def test_knn_packed_fullgraph_forward_and_backward():
    # The padded shapes depend on the offsets' values: with dynamo capturing
    # scalar outputs they become unbacked sizes and the whole call is one graph.
    import torch._dynamo

    q, qo = ragged([3, 0, 5, 1], seed=9)
    q = q.double().requires_grad_()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        f = torch.compile(lambda a, o: pcgeom.knn(a, a, 3, query_offsets=o, points_offsets=o).dist2.sum(),
                          fullgraph=True, backend="aot_eager")
        out = f(q, qo)
        (g,) = torch.autograd.grad(out, q)
    ref = pcgeom.knn(q, q, 3, query_offsets=qo, points_offsets=qo).dist2.sum()
    (g_ref,) = torch.autograd.grad(ref, q)
    assert torch.equal(out, ref) and torch.equal(g, g_ref)


@pytest.mark.parametrize(
    "qo, po, match",
    [
        (torch.tensor([3, 2, 5]), torch.tensor([2, 4, 6]), r"query_offsets must be non-decreasing.*query_offsets\[1\]=2 after 3"),
        (torch.tensor([2, 5]), torch.tensor([2, 4, 6]), r"same number of clouds, got 2 and 3"),
        (torch.tensor([2, 3, 4]), torch.tensor([2, 4, 6]), r"query_offsets\[-1\] must equal the number of packed rows 5, got 4"),
        (torch.tensor([-1, 3, 5]), torch.tensor([2, 4, 6]), r"query_offsets\[0\]=-1 after 0"),
        (torch.tensor([2.0, 3, 5]), torch.tensor([2, 4, 6]), r"query_offsets must be an integer tensor"),
    ],
)
def test_packed_offset_errors(qo, po, match):
    q, p = torch.rand(5, 3), torch.rand(6, 3)
    with pytest.raises((ValueError, TypeError), match=match):
        pcgeom.knn(q, p, 2, query_offsets=qo, points_offsets=po)


def test_packed_layout_errors():
    q, p = torch.rand(5, 3), torch.rand(6, 3)
    with pytest.raises(ValueError, match="not \\*_lengths"):
        pcgeom.knn(q, p, 2, query_lengths=torch.tensor([5]))
    with pytest.raises(ValueError, match="offsets= are for packed"):
        pcgeom.knn(q[None], p[None], 2, query_offsets=torch.tensor([5]))
    with pytest.raises(ValueError, match="the D of query"):
        pcgeom.knn(q, torch.rand(6, 2), 2)
    with pytest.raises(ValueError, match=r"query must have shape \(B, M, D\), got \(5, 3\)"):
        pcgeom.knn(q, p[None], 2)  # layouts cannot be mixed
    with pytest.raises(ValueError, match=r"offsets\[-1\] must equal the number of packed rows 6, got 5"):
        pcgeom.farthest_point_sample(p, 2, offsets=torch.tensor([2, 5]))
    with pytest.raises(ValueError, match=r"n_samples must be an int or have shape \(2,\)"):
        pcgeom.farthest_point_sample(p, torch.tensor([1, 2, 3]), offsets=torch.tensor([2, 6]))
    with pytest.raises(ValueError, match=r"start_index\[1\]=4 is outside \[0, 4\)"):
        pcgeom.farthest_point_sample(p, 2, offsets=torch.tensor([2, 6]), start_index=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="lengths values must be in"):
        pcgeom.pack(torch.rand(2, 3, 1), torch.tensor([1, 4]))

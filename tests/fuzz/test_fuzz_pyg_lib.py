"""Fuzz: the pyg_lib stand-in's ops and samplers against float64 / pure-python oracles.

knn, radius, nearest and fps on packed clouds with CSR ``ptr`` (empty clouds included), grid_cluster's
voxel ids, graclus' matching (valid and maximal), random_walk's p = q = 1 CPU walk step by step from pyg-lib's
random engine, and the samplers' documented ImportError
when torch_sparse is missing (their properties when it is installed).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pcgeom.compat.pyg_lib import ops, sampler  # noqa: E402
from tests.fuzz.strategies import fuzz, packed_clouds  # noqa: E402
from tests.oracle import acc_np_dtype, fps_oracle_acc, knn_oracle_acc, sq_dist_acc  # noqa: E402

KINDS = ["lattice", "repeated", "few_distinct", "collinear", "planar"]
HAS_TORCH_SPARSE = importlib.util.find_spec("torch_sparse") is not None


def _ptr(lens):
    return torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int64)


@fuzz(c=packed_clouds(kinds=KINDS, d_choices=(1, 2, 3), min_len=0, n_max=8), k=st.integers(1, 5),
      r=st.sampled_from([0.5, 1.0, 2.0, 3.5]), max_nb=st.integers(1, 6), ignore_same=st.booleans())
def test_pyg_lib_knn_radius_nearest(c, k, r, max_nb, ignore_same):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    ptr = _ptr(c["lens"])
    acc = acc_np_dtype(c["dtype"])
    xa = c["x"].astype(acc)
    ek = ops.knn(x, x, k, ptr, ptr)
    er = ops.radius(x, x, r, ptr, ptr, max_num_neighbors=max_nb, ignore_same_index=ignore_same)
    want_k, want_r = [], []
    r2 = torch.tensor(r * r, dtype=torch.float64).to(c["dtype"]).double().numpy().astype(acc)  # r*r in the input dtype
    for b, (lo, hi) in enumerate(zip(ptr[:-1].tolist(), ptr[1:].tolist())):
        seg = xa[lo:hi]
        if hi > lo:
            _, oi = knn_oracle_acc(seg, seg, k)
        for i in range(hi - lo):
            want_k += [(lo + i, lo + j) for j in oi[i] if j >= 0]
            with np.errstate(invalid="ignore"):
                hits = [j for j in np.flatnonzero(sq_dist_acc(seg, seg[i]) < r2) if not (ignore_same and j == i)]
            want_r += [(lo + i, lo + j) for j in hits[:max_nb]]
    assert ek.dtype == torch.int64 and ek.shape[0] == 2
    assert list(map(tuple, ek.t().tolist())) == want_k
    assert list(map(tuple, er.t().tolist())) == want_r
    # nearest: queries from the non-empty clouds only (an empty candidate cloud is an error)
    keep = [b for b, n in enumerate(c["lens"]) if n > 0]
    if not keep:
        return
    p = ptr.tolist()
    rows = np.concatenate([np.arange(p[b], p[b + 1]) for b in keep])
    rev = np.concatenate([np.arange(p[b + 1] - 1, p[b] - 1, -1) for b in keep])  # each cloud's rows reversed
    pk = _ptr([c["lens"][b] for b in keep])
    near = ops.nearest(x[torch.from_numpy(rows)], x[torch.from_numpy(rev)], pk, pk).tolist()
    for lo, hi in zip(pk[:-1].tolist(), pk[1:].tolist()):
        _, oi = knn_oracle_acc(xa[rows[lo:hi]], xa[rev[lo:hi]], 1)
        assert near[lo:hi] == (oi[:, 0] + lo).tolist()


@fuzz(c=packed_clouds(kinds=["uniform"], d_choices=(1, 2, 3), min_len=1, n_max=10, dtypes=[torch.float32, torch.float64]),
      ratio=st.floats(0.05, 1.0))
def test_pyg_lib_fps(c, ratio):
    # uniform random points: no distance ties; random_start=False starts every cloud at its first point
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    ptr = _ptr(c["lens"])
    got = ops.fps(x, ptr, ratio, False).tolist()
    acc = acc_np_dtype(c["dtype"])
    want = []
    for lo, hi in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        n_s = int(np.ceil(np.float32(ratio) * (hi - lo))) if c["dtype"] != torch.float64 else int(np.ceil(ratio * (hi - lo)))
        want += (fps_oracle_acc(c["x"][lo:hi].astype(acc), n_s, 0) + lo).tolist()
    assert got == want


@fuzz(c=packed_clouds(kinds=["lattice", "uniform", "repeated"], d_choices=(1, 2, 3), min_len=1, n_max=12,
                      dtypes=[torch.float32, torch.float64], b_max=1), size=st.sampled_from([0.5, 1.0, 1.5, 3.0]))
def test_pyg_lib_grid_cluster(c, size):
    pos = torch.from_numpy(c["x"]).to(c["dtype"])
    D = pos.shape[1]
    got = ops.grid_cluster(pos, torch.full((D,), size, dtype=c["dtype"])).tolist()
    p = pos.double().numpy()
    start, end = p.min(0), p.max(0)
    # torch_cluster's formula, in the input dtype: trunc((pos - start) / size), first axis fastest
    t = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64)).to(c["dtype"])  # noqa: E731
    num = (torch.trunc((t(end) - t(start)) / size) + 1).long().numpy()
    cell = torch.trunc((pos - t(start)) / size).long().numpy()
    stride = np.concatenate([[1], np.cumprod(num)[:-1]])
    assert got == (cell * stride).sum(1).tolist()


@fuzz(N=st.integers(1, 9), E=st.integers(0, 20), weighted=st.booleans(), seed=st.integers(0, 2**31))
def test_pyg_lib_graclus(N, E, weighted, seed):
    # a symmetric graph without self loops; the answer is a matching: each node alone or paired with a neighbour
    rng = np.random.default_rng(seed)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, N, (E, 2)) if a != b}
    pairs |= {(b, a) for a, b in pairs}
    edges = sorted(pairs)
    w = {e: float(rng.integers(1, 5)) for e in edges if e[0] < e[1]}
    row = np.array([a for a, _ in edges], dtype=np.int64)
    col = torch.tensor([b for _, b in edges], dtype=torch.int64)
    rowptr = torch.from_numpy(np.searchsorted(row, np.arange(N + 1)).astype(np.int64))
    weight = torch.tensor([w[(min(a, b), max(a, b))] for a, b in edges], dtype=torch.float64) if weighted else None
    torch.manual_seed(seed)
    cl = ops.graclus_cluster(rowptr, col, weight).tolist()
    assert len(cl) == N
    for v in range(N):
        mates = [u for u in range(N) if cl[u] == cl[v]]
        assert len(mates) in (1, 2) and cl[v] == min(mates)
        if len(mates) == 2:
            u = mates[0] if mates[1] == v else mates[1]
            assert (u, v) in pairs
    # maximal: two unmatched neighbours would have been matched
    alone = {v for v in range(N) if cl.count(cl[v]) == 1}
    assert not any(a in alone and b in alone for a, b in pairs)


@fuzz(N=st.integers(1, 8), E=st.integers(0, 16), S=st.integers(0, 6), L=st.integers(0, 5),
      idx_dtype=st.sampled_from([torch.int32, torch.int64]), seed=st.integers(0, 2**31))
def test_pyg_lib_random_walk_and_samplers(N, E, S, L, idx_dtype, seed):
    rng = np.random.default_rng(seed)
    edges = sorted({(int(a), int(b)) for a, b in rng.integers(0, N, (E, 2))})
    row = np.array([a for a, _ in edges], dtype=np.int64)
    colnp = np.array([b for _, b in edges], dtype=np.int64)
    rowptr_np = np.searchsorted(row, np.arange(N + 1))
    rowptr = torch.from_numpy(rowptr_np).to(idx_dtype)
    col = torch.from_numpy(colnp).to(idx_dtype)
    seeds = torch.from_numpy(rng.integers(0, N, S)).to(idx_dtype)
    torch.manual_seed(seed)
    walks = sampler.random_walk(rowptr, col, seeds, L)
    assert walks.shape == (S, L + 1) and walks.dtype == idx_dtype
    # pyg-lib's CPU engine (pcgeom/compat/pyg_lib/_cpu_walk.py): blocks of 128 torch.randint 64-bit words, read
    # last to first, each cut into 16-bit chunks low bits first (every degree here is below 2**16); a step from
    # a node of out-degree d > 0 takes chunk % d, a node without out-edges repeats itself and draws nothing
    torch.manual_seed(seed)
    words, chunks = [], []

    def draw():
        if not chunks:
            if not words:
                words.extend(torch.randint(-(2**63), 2**63 - 1, (128,)).tolist())
            w = words.pop() & (2**64 - 1)
            chunks.extend(((w >> (16 * i)) & 0xFFFF) for i in reversed(range(4)))
        return chunks.pop()

    for i in range(S):
        cur = int(seeds[i])
        want = [cur]
        for _ in range(L):
            deg = int(rowptr_np[cur + 1] - rowptr_np[cur])
            if deg > 0:
                cur = int(colnp[rowptr_np[cur] + draw() % deg])
            want.append(cur)
        assert walks[i].tolist() == want
    # the samplers: torch_sparse does the work; without it the documented ImportError names it
    rp64, c64 = rowptr.long(), col.long()
    if not HAS_TORCH_SPARSE:
        with pytest.raises(ImportError, match="torch-sparse"):
            sampler.neighbor_sample(rp64, c64, seeds.long(), [2])
        with pytest.raises(ImportError, match="torch-sparse"):
            sampler.hetero_neighbor_sample({("a", "to", "a"): rp64}, {("a", "to", "a"): c64}, {"a": seeds.long()},
                                           {("a", "to", "a"): [2]})
        return
    out_row, out_col, node, _ = sampler.neighbor_sample(rp64, c64, seeds.long(), [2])
    node = node.tolist()
    assert node[:len(set(seeds.tolist()))] == list(dict.fromkeys(seeds.tolist()))
    for a, b in zip(out_row.tolist(), out_col.tolist()):
        assert (node[a], node[b]) in set(edges) or (node[b], node[a]) in set(edges)

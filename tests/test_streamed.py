"""pcgeom.knn_streamed / ball_query_streamed and their block iterators: the in-memory answers, bit for bit.

Every comparison is ``torch.equal`` against the in-memory :func:`pcgeom.knn` /
:func:`pcgeom.ball_query` on the same cloud (itself tested against float64
brute force in test_knn.py / test_ball_query.py): indices, distances, ties and
padding.  Small ``block_points`` force many tiles, so tile edges, halos and the
redo path are crossed on clouds of a few thousand points.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import streamed as S

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _uniform(n, d=3, dtype=torch.float32, seed=0):
    return torch.rand(n, d, generator=_gen(seed), dtype=torch.float64).to(dtype)


def _clustered(n, dtype=torch.float32, seed=0):
    """Dense blobs far apart, a sparse background and two far outliers: halos cross empty space."""
    g = _gen(seed)
    centres = torch.tensor([[0.0, 0, 0], [5, 0, 0], [0, 7, 3], [40, 40, 40]], dtype=torch.float64)
    which = torch.randint(0, 4, (n,), generator=g)
    pts = centres[which] + 0.05 * torch.randn(n, 3, generator=g, dtype=torch.float64)
    pts[: n // 10] = torch.rand(n // 10, 3, generator=g, dtype=torch.float64) * 50  # sparse background
    pts[-1] = torch.tensor([1e3, -1e3, 5e2])
    pts[-2] = torch.tensor([-2e3, 0, 0])
    return pts.to(dtype)


def _lattice(side, dtype=torch.float32):
    """An integer grid: every neighbourhood is full of exact ties, and the median splits fall on points."""
    r = torch.arange(side, dtype=torch.float64)
    return torch.cartesian_prod(r, r, r).to(dtype)


def _assert_same(got, ref, index_dtype=torch.int64):
    assert got.idx.dtype == index_dtype
    assert got.dist2.dtype == ref.dist2.dtype
    assert got.idx.shape == ref.idx.shape
    assert torch.equal(got.idx.long(), ref.idx)
    assert torch.equal(got.dist2, ref.dist2)


def _knn_both(q, p, k, block, **kw):
    ref = pcgeom.knn(q, p, k)
    _assert_same(pcgeom.knn_streamed(q, p, k, block_points=block, **kw), ref, kw.get("index_dtype", torch.int64))
    return ref


# --- the tiles ------------------------------------------------------------------------------------


def _tiles_by_index(x, block, acc):
    t = S.SpatialTiles.__new__(S.SpatialTiles)
    t._build_by_index(x, block, acc)
    t.starts = torch.cat([torch.zeros(1, dtype=torch.int64), t.counts.cumsum(0)])
    return t


_TILE_CLOUDS = {
    "uniform": lambda: _uniform(3000, seed=11),
    "clustered": lambda: _clustered(2500, seed=12),
    "lattice": lambda: _lattice(9),  # medians fall on points: the "<" rule when the median is the maximum
    "coincident": lambda: torch.zeros(300, 3),  # cut by position
    "flat": lambda: torch.cat([_uniform(400, d=2, seed=13), torch.zeros(400, 1)], 1),  # one axis of zero extent
    "float16": lambda: _uniform(1500, dtype=torch.float16, seed=14),
    "bfloat16": lambda: _uniform(1500, dtype=torch.bfloat16, seed=15),
    "float64_d7": lambda: _uniform(1200, d=7, dtype=torch.float64, seed=16),
    "strided": lambda: _uniform(2000, d=5, seed=17)[:, 1:4],  # a non-contiguous view
    "empty": lambda: torch.empty(0, 3),
}


@pytest.mark.parametrize("cloud", sorted(_TILE_CLOUDS))
@pytest.mark.parametrize("block", [1, 7, 100, 10**6])
def test_tiles_built_with_numpy_are_the_median_split_tiles(cloud, block):
    """The CPU build (per-axis copies split level by level) gives exactly the tiles of the
    index-segment build, and both hold the invariants the search's proof needs."""
    x = _TILE_CLOUDS[cloud]()
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    got, spec = S.SpatialTiles(x, block, acc), _tiles_by_index(x, block, acc)
    for name in ("perm", "counts", "starts", "lo", "hi"):
        a, b = getattr(got, name), getattr(spec, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert got.paths == spec.paths
    n = x.shape[0]
    assert got.perm.dtype == torch.int32 and torch.equal(got.perm.sort().values, torch.arange(n, dtype=torch.int32))
    assert got.lo.dtype == acc and got.lo.shape == (len(got), x.shape[1])
    assert int(got.counts.sum()) == n and bool((got.counts >= 1).all()) and bool((got.counts <= block).all())
    xa = x.to(acc)
    for t in range(len(got)):
        rows = got.tile(t)
        assert bool((rows[1:] > rows[:-1]).all())  # ascending within the tile
        pts = xa[rows]
        assert torch.equal(got.lo[t], pts.amin(0)) and torch.equal(got.hi[t], pts.amax(0))  # tight boxes


def test_tile_permutation_is_int32_while_row_numbers_fit():
    """int32 holds row numbers up to 2**31 - 1, so clouds of up to 2**31 points; beyond, int64."""
    assert S._perm_dtype(0) == np.int32 and S._perm_dtype(2**31) == np.int32
    assert S._perm_dtype(2**31 + 1) == np.int64
    x = _uniform(500, seed=3)
    assert S.SpatialTiles(x, 50, torch.float32).perm.dtype == torch.int32
    assert _tiles_by_index(x, 50, torch.float32).perm.dtype == torch.int32
    rows = [b.rows for b in pcgeom.knn_blocks(x, x, 4, block_points=64)]
    assert all(r.dtype == torch.int64 for r in rows)  # the blocks' rows stay int64, as documented


def test_tile_split_is_the_lower_median_of_the_widest_axis():
    """One split by hand: the widest axis is y, its lower median 2 goes left with everything <= it."""
    x = torch.tensor([[0.0, 5, 0], [0.5, 1, 0], [0.2, 2, 0], [0.1, 9, 0], [0.3, 2, 0]])
    t = S.SpatialTiles(x, 3, torch.float32)
    assert [t.tile(i).tolist() for i in range(len(t))] == [[1, 2, 4], [0, 3]]
    assert torch.equal(t.lo, torch.stack([x[[1, 2, 4]].amin(0), x[[0, 3]].amin(0)]))
    assert torch.equal(t.hi, torch.stack([x[[1, 2, 4]].amax(0), x[[0, 3]].amax(0)]))


def test_tile_paths_and_subtree_runs():
    """Paths name each tile's way down the split tree; the runs are the largest subtrees within the
    limit, consecutive, covering every tile once, and every block of a self-KNN is one such subtree."""
    x = _clustered(5000, seed=19)
    t = S.SpatialTiles(x, 40, torch.float32)
    assert len(set(t.paths)) == len(t) and all(set(p) <= {"0", "1"} for p in t.paths)
    assert t.paths == sorted(t.paths)  # depth first, left ("0") before right
    for a, b in zip(t.paths, t.paths[1:]):
        assert not b.startswith(a)  # leaves: no path is another's prefix
    counts = t.counts.tolist()
    for limit in (1, 40, 333, 10**6):
        runs = S.subtree_runs(t.paths, counts, limit)
        assert runs[0][0] == 0 and runs[-1][1] == len(t)
        assert all(r[1] == q[0] for r, q in zip(runs, runs[1:]))
        for lo, hi in runs:
            assert hi - lo == 1 or sum(counts[lo:hi]) <= limit
            pre = os.path.commonprefix(t.paths[lo:hi])
            # exactly the tiles under one node: none outside [lo, hi) shares the node's prefix
            assert all(not t.paths[i].startswith(pre) for i in range(len(t)) if not lo <= i < hi) or hi - lo == 1
            if pre:  # the largest such: the parent subtree would be over the limit
                parent = pre[:-1]
                under = [i for i in range(len(t)) if t.paths[i].startswith(parent)]
                assert len(pre) == 0 or sum(counts[i] for i in under) > limit
    assert S.subtree_runs([], [], 10) == []
    assert S.subtree_runs([""], [5], 1) == [(0, 1)]


def test_scan_like_cloud_with_outliers_in_the_air():
    """A dense ground with a few isolated points high above it: the sampled first halo ignores
    them and the redo searches them apart from the block's edge rows -- the answer is unchanged."""
    g = _gen(20)
    ground = torch.rand(6000, 3, generator=g, dtype=torch.float64) * torch.tensor([10.0, 10.0, 0.05])
    air = torch.rand(40, 3, generator=g, dtype=torch.float64) * torch.tensor([10.0, 10.0, 8.0]) + torch.tensor(
        [0, 0, 2.0])
    x = torch.cat([ground, air])[torch.randperm(6040, generator=g)].float()
    for block in (256, 1024):
        _knn_both(x, x, 16, block)


def test_where_and_take_match_boolean_indexing():
    g = _gen(18)
    mask = torch.rand(1000, generator=g) < 0.3
    a, b = torch.randn(1000, 4, generator=g), torch.arange(1000)
    ta, tb = S._take(mask, a, b)
    assert torch.equal(ta, a[mask]) and torch.equal(tb, b[mask])
    assert torch.equal(S._where(mask), mask.nonzero().flatten())
    assert S._where(torch.zeros(5, dtype=torch.bool)).numel() == 0


# --- KNN ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block", [7, 64, 500, 10**6])  # 10**6: one tile
def test_self_knn_random(dtype, block):
    x = _uniform(3000, dtype=dtype, seed=1)
    _knn_both(x, x, 16, block)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_other_queries(dtype):
    p = _uniform(2500, dtype=dtype, seed=2)
    q = (_uniform(700, dtype=dtype, seed=3) * 1.4 - 0.2).to(dtype)  # some queries outside the cloud's box
    _knn_both(q, p, 9, 50)


@pytest.mark.parametrize("block", [16, 300])
def test_clustered_with_outliers(block):
    x = _clustered(4000, seed=4)
    _knn_both(x, x, 12, block)
    q = torch.cat([x[:300], torch.tensor([[1e4, 1e4, 1e4], [20.0, 20, 20]])])  # far queries: empty tiles around
    _knn_both(q, x, 5, block)


@pytest.mark.parametrize("block", [8, 27, 100])
def test_lattice_ties_and_tile_edges(block):
    x = _lattice(11)  # 1331 points; tiles split at lattice planes, so points lie exactly on tile edges
    ref = _knn_both(x, x, 19, block)
    assert (ref.dist2[:, 1:] == ref.dist2[:, :-1]).any()  # the cloud really has ties inside the k
    _knn_both(x + 0.5, x, 8, block)  # queries equidistant from 8 lattice points


def test_duplicates():
    x = _uniform(300, seed=5).repeat(7, 1)  # each point 7 times: ties broken by index across tiles
    _knn_both(x, x, 10, 40)
    same = torch.zeros(500, 3)  # one point 500 times: tiles split by position, boxes coincide
    _knn_both(same, same, 17, 16)
    _knn_both(same[:3] + 1, same, 600, 16)  # k > N on identical points


@pytest.mark.parametrize("n,k", [(1, 1), (1, 4), (37, 37), (37, 50), (200, 200)])
def test_small_clouds_k_equal_and_above_n(n, k):
    x = _uniform(n, seed=6)
    ref = _knn_both(x, x, k, 5)
    if k > n:
        assert (ref.idx[:, n:] == -1).all() and torch.isinf(ref.dist2[:, n:]).all()


def test_empty_query_and_empty_points():
    x = _uniform(50, seed=7)
    got = pcgeom.knn_streamed(x[:0], x, 4)
    assert got.idx.shape == (0, 4) and got.dist2.shape == (0, 4)
    assert list(pcgeom.knn_blocks(x[:0], x, 4)) == []
    _knn_both(x, x[:0], 3, 8)  # no points: all padding, as pcgeom.knn


def test_redo_path_when_the_halo_is_too_small(monkeypatch):
    """A first halo of 0 proves no row: every row is searched again, and the answer is unchanged."""
    x = _clustered(2000, seed=8)
    calls = []
    real = S._Search.search

    def spy(self, q, sel, h, box=None):
        calls.append(float(h))
        return real(self, q, sel, h, box)

    monkeypatch.setattr(S._Search, "first_halo", lambda self, qc, lo, hi: torch.zeros((), dtype=self.acc))
    monkeypatch.setattr(S._Search, "search", spy)
    _knn_both(x, x, 8, 100)
    assert 0.0 in calls and any(h > 0 for h in calls)


def test_halo_smaller_than_sparse_neighbourhoods(monkeypatch):
    """A dense query sets the first halo; the sparse queries of the same block need the second search."""
    monkeypatch.setattr(S, "HALO_SAMPLES", 1)  # the first halo from row 0 alone, a dense one
    g = _gen(9)
    dense = torch.rand(3000, 3, generator=g) * 0.1
    sparse = torch.rand(40, 3, generator=g) * 3
    far = torch.rand(500, 3, generator=g) + 100  # outside every query box: the search is never "everything"
    p = torch.cat([dense, sparse, far])
    q = torch.cat([dense[:500], sparse])
    yielded = list(pcgeom.knn_blocks(q, p, 6, block_points=4096))  # one query block
    assert len(yielded) > 1  # the sparse rows came back from a second search
    _knn_both(q, p, 6, 4096)


def test_large_k_searched_in_slices():
    """k above the candidate budget (8 * block_points): candidates are searched in slices and merged."""
    x = _lattice(6)  # 216 points, ties everywhere
    _knn_both(x, x, 100, 4)
    _knn_both(x[:10] + 0.25, x, 216, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    x = _uniform(1500, dtype=dtype, seed=10)
    _knn_both(x, x, 8, 64)


def test_high_dimensional():
    x = _uniform(800, d=7, seed=11)
    _knn_both(x, x, 5, 32)
    y = _uniform(400, d=1, seed=12)
    _knn_both(y, y, 5, 16)


def test_int32_indices_and_memmap_outputs(tmp_path):
    x = _uniform(4000, seed=13)
    M, k = 4000, 16
    ref = pcgeom.knn(x, x, k)
    idx = torch.from_file(str(tmp_path / "idx.bin"), shared=True, size=M * k, dtype=torch.int32).view(M, k)
    dist = torch.from_file(str(tmp_path / "dist.bin"), shared=True, size=M * k, dtype=torch.float32).view(M, k)
    got = pcgeom.knn_streamed(x, x, k, out_dist2=dist, out_idx=idx, index_dtype=torch.int32, block_points=256)
    assert got.idx is idx and got.dist2 is dist
    del got, idx, dist
    on_disk = np.fromfile(tmp_path / "idx.bin", dtype=np.int32).reshape(M, k)
    assert np.array_equal(on_disk, ref.idx.numpy())
    assert np.array_equal(np.fromfile(tmp_path / "dist.bin", dtype=np.float32).reshape(M, k), ref.dist2.numpy())
    mm_i = np.lib.format.open_memmap(tmp_path / "idx.npy", mode="w+", dtype=np.int64, shape=(M, k))
    mm_d = np.lib.format.open_memmap(tmp_path / "dist.npy", mode="w+", dtype=np.float32, shape=(M, k))
    pcgeom.knn_streamed(x, x, k, out_dist2=torch.from_numpy(mm_d), out_idx=torch.from_numpy(mm_i), block_points=300)
    mm_i.flush(), mm_d.flush()
    del mm_i, mm_d
    assert np.array_equal(np.load(tmp_path / "idx.npy"), ref.idx.numpy())
    assert np.array_equal(np.load(tmp_path / "dist.npy"), ref.dist2.numpy())


def test_blocks_cover_each_row_once():
    x = _clustered(3000, seed=14)
    ref = pcgeom.knn(x, x, 7)
    seen = torch.zeros(3000, dtype=torch.int64)
    for b in pcgeom.knn_blocks(x, x, 7, block_points=128):
        assert b.rows.dtype == torch.int64 and (b.rows[1:] > b.rows[:-1]).all()
        assert b.rows.numel() <= 128
        seen[b.rows] += 1
        assert torch.equal(b.idx, ref.idx[b.rows]) and torch.equal(b.dist2, ref.dist2[b.rows])
    assert (seen == 1).all()


# --- ball query -----------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["distance", "index"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("radius,k", [(0.0, 3), (0.05, 8), (0.2, 40), (5.0, 30)])
def test_ball_query(order, dtype, radius, k):
    x = _uniform(2000, dtype=dtype, seed=15)
    q = _uniform(300, dtype=dtype, seed=16)
    for qq in (x, q):
        ref = pcgeom.ball_query(qq, x, radius, k, order=order)
        got = pcgeom.ball_query_streamed(qq, x, radius, k, order=order, block_points=40)
        _assert_same(got, ref)


@pytest.mark.parametrize("order", ["distance", "index"])
def test_ball_query_lattice_inclusive_and_duplicates(order):
    x = _lattice(9)
    for r in (1.0, 2.0 ** 0.5, 3.0 ** 0.5):  # the ball's edge falls exactly on lattice points
        ref = pcgeom.ball_query(x, x, r, 27, order=order)
        _assert_same(pcgeom.ball_query_streamed(x, x, r, 27, order=order, block_points=10), ref)
    d = _uniform(100, seed=17).repeat(5, 1)
    ref = pcgeom.ball_query(d, d, 0.1, 12, order=order)
    _assert_same(pcgeom.ball_query_streamed(d, d, 0.1, 12, order=order, block_points=8), ref)


def test_ball_query_huge_radius_uses_slices_and_int32(tmp_path):
    x = _clustered(600, seed=18)
    ref = pcgeom.ball_query(x, x, 1e4, 50)
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=600 * 50, dtype=torch.int32).view(600, 50)
    got = pcgeom.ball_query_streamed(x, x, 1e4, 50, out_idx=idx, index_dtype=torch.int32, block_points=4)
    _assert_same(got, ref, torch.int32)


# --- errors and progress --------------------------------------------------------------------------


def test_errors_name_the_argument():
    x = _uniform(10)
    with pytest.raises(ValueError, match=r"query must have shape \(M, D\)"):
        pcgeom.knn_streamed(x[None], x, 2)
    with pytest.raises(TypeError, match="index_dtype must be torch.int32 or torch.int64"):
        pcgeom.knn_streamed(x, x, 2, index_dtype=torch.int16)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pcgeom.knn_blocks(x, x, 0)
    with pytest.raises(ValueError, match="block_points must be >= 1"):
        pcgeom.knn_streamed(x, x, 2, block_points=0)
    with pytest.raises(TypeError, match="same dtype"):
        pcgeom.knn_streamed(x, x.double(), 2)
    with pytest.raises(ValueError, match=r"out_idx must have shape \(10, 2\), got \(10, 3\)"):
        pcgeom.knn_streamed(x, x, 2, out_idx=torch.empty(10, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="out_dist2 must have dtype torch.float32, got torch.float64"):
        pcgeom.knn_streamed(x, x, 2, out_dist2=torch.empty(10, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="out_idx must have dtype torch.int32"):
        pcgeom.knn_streamed(x, x, 2, index_dtype=torch.int32, out_idx=torch.empty(10, 2, dtype=torch.int64))
    bad = x.clone()
    bad[4, 1] = float("nan")
    with pytest.raises(ValueError, match=r"points must be finite.*points\[4\]"):
        pcgeom.knn_streamed(x, bad, 2)
    with pytest.raises(ValueError, match="radius must be >= 0"):
        pcgeom.ball_query_streamed(x, x, -1.0, 2)
    with pytest.raises(ValueError, match="order must be one of"):
        pcgeom.ball_query_blocks(x, x, 1.0, 2, order="random")
    huge = torch.zeros(1, 3).expand(2**31 + 1, 3)  # a view: no memory behind the 2^31 + 1 rows
    with pytest.raises(ValueError, match=r"index_dtype=torch.int32 .* N=2147483649; use torch.int64"):
        pcgeom.knn_streamed(x, huge, 2, index_dtype=torch.int32)


def test_progress_bar(capsys, monkeypatch):
    pytest.importorskip("tqdm")
    x = _uniform(500, seed=19)
    pcgeom.knn_streamed(x, x, 4, block_points=64, progress=True)
    err = capsys.readouterr().err
    assert "knn_streamed" in err and "500" in err
    pcgeom.knn_streamed(x, x, 4, block_points=64)  # auto: small runs stay silent
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm not installed: silent, same answer
    got = pcgeom.knn_streamed(x, x, 4, block_points=64, progress=True)
    assert capsys.readouterr().err == ""
    _assert_same(got, pcgeom.knn(x, x, 4))


# --- bounded memory -------------------------------------------------------------------------------

_BUDGET_SCRIPT = textwrap.dedent("""
    import os, resource, sys
    import numpy as np, torch, pcgeom
    mode, n, budget, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)  # one malloc arena: the address space counted is the work's, not idle threads'
    x = torch.rand(n, 3, generator=torch.Generator().manual_seed(0))
    list(pcgeom.knn_blocks(x[:2000], x[:2000], 16, block_points=256))  # first-call setup outside the budget
    pcgeom.knn(x[:2000], x[:2000], 16)
    size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + budget, resource.RLIM_INFINITY))
    try:
        if mode == "memory":
            pcgeom.knn(x, x, 16)
        else:
            with open(out, "wb") as f:  # plain writes: a memory map would count against the limit
                for b in pcgeom.knn_blocks(x, x, 16, index_dtype=torch.int32, block_points=1 << 16):
                    f.write(np.int64(b.rows.numel()).tobytes())
                    f.write(b.rows.numpy().tobytes()); f.write(b.idx.numpy().tobytes())
                    f.write(b.dist2.numpy().tobytes())
    except (MemoryError, RuntimeError) as e:
        print("OUT OF MEMORY", type(e).__name__, str(e)[:200]); sys.exit(3)
    print("DONE")
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux-specific here")
@pytest.mark.skipif(os.environ.get("PCGEOM_DISABLE_EXT") == "1",
                    reason="the pure-torch reference is O(M * N): 10^6 points take hours there")
def test_streamed_knn_fits_a_budget_the_in_memory_call_exceeds(tmp_path):
    """Self-KNN k=16 on 10^6 points under RLIMIT_AS: 180 MiB above the warmed-up interpreter.

    Measured growth of the address space: in memory about 355 MiB (the (10^6, 16)
    int64 + float32 output alone is 183 MiB), streamed with 2^16-point blocks
    about 75 MiB; 180 MiB leaves more than 2x on each side.
    """
    n, budget = 10**6, 180 << 20
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    out = tmp_path / "blocks.bin"

    def run(mode):
        return subprocess.run([sys.executable, "-c", _BUDGET_SCRIPT, mode, str(n), str(budget), str(out)],
                              capture_output=True, text=True, env=env, timeout=900)

    mem = run("memory")
    assert mem.returncode == 3 and "OUT OF MEMORY" in mem.stdout, (mem.stdout, mem.stderr[-2000:])
    st = run("streamed")
    assert st.returncode == 0 and "DONE" in st.stdout, (st.stdout, st.stderr[-2000:])
    x = torch.rand(n, 3, generator=torch.Generator().manual_seed(0))
    ref = pcgeom.knn(x, x, 16)
    raw = out.read_bytes()
    pos, seen = 0, 0
    idx = np.empty((n, 16), dtype=np.int32)
    dist = np.empty((n, 16), dtype=np.float32)
    while pos < len(raw):
        m = int(np.frombuffer(raw, np.int64, 1, pos)[0])
        pos += 8
        rows = np.frombuffer(raw, np.int64, m, pos)
        pos += 8 * m
        idx[rows] = np.frombuffer(raw, np.int32, m * 16, pos).reshape(m, 16)
        pos += 4 * m * 16
        dist[rows] = np.frombuffer(raw, np.float32, m * 16, pos).reshape(m, 16)
        pos += 4 * m * 16
        seen += m
    assert seen == n
    assert np.array_equal(idx, ref.idx.numpy()) and np.array_equal(dist, ref.dist2.numpy())


# --- memory-mapped outputs through staging files ---------------------------------------------------


def test_shared_file_mapping_detects_only_shared_file_maps(tmp_path):
    t = torch.from_file(str(tmp_path / "a.bin"), shared=True, size=4096, dtype=torch.float32)
    assert S.shared_file_mapping(t) == str(tmp_path / "a.bin")
    assert S.shared_file_mapping(t.view(64, 64)[10:20]) == str(tmp_path / "a.bin")
    assert S.shared_file_mapping(t.view(64, 64)[:, 3]) == str(tmp_path / "a.bin")
    assert S.shared_file_mapping(torch.zeros(4096)) is None  # anonymous memory
    w = np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=np.int64, shape=(100, 4))
    assert S.shared_file_mapping(torch.from_numpy(w)) == str(tmp_path / "b.npy")
    w.flush()
    del w
    c = np.load(tmp_path / "b.npy", mmap_mode="c")  # copy-on-write: writes never reach the file
    assert S.shared_file_mapping(torch.from_numpy(c)) is None
    (tmp_path / "c.bin").write_bytes(bytes(4 * 4096))
    p = torch.from_file(str(tmp_path / "c.bin"), shared=False, size=4096, dtype=torch.float32)
    assert S.shared_file_mapping(p) is None


def _staging(monkeypatch, bucket_bytes):
    monkeypatch.setattr(S, "STAGE_MIN_BYTES", 0)
    monkeypatch.setattr(S, "STAGE_BUCKET_BYTES", bucket_bytes)


@pytest.mark.parametrize("bucket_bytes, max_buckets", [(1 << 12, 128), (1 << 12, 3), (1 << 30, 128)])
def test_staged_memmap_outputs_equal_the_in_memory_answer(tmp_path, monkeypatch, bucket_bytes, max_buckets):
    """Many buckets (rows of one block spread over several), few large buckets, one bucket."""
    _staging(monkeypatch, bucket_bytes)
    monkeypatch.setattr(S, "STAGE_MAX_BUCKETS", max_buckets)
    x = _clustered(5000, seed=3)
    M, k = 5000, 12
    ref = pcgeom.knn(x, x, k)
    idx = torch.from_file(str(tmp_path / "idx.bin"), shared=True, size=M * k, dtype=torch.int32).view(M, k)
    dist = torch.from_file(str(tmp_path / "dist.bin"), shared=True, size=M * k, dtype=torch.float32).view(M, k)
    staged = []
    real = S._Staged
    monkeypatch.setattr(S, "_Staged", lambda *a: staged.append(real(*a)) or staged[-1])
    got = pcgeom.knn_streamed(x, x, k, out_dist2=dist, out_idx=idx, index_dtype=torch.int32, block_points=512)
    assert len(staged) == 1 and (staged[0].n_buckets > 1) == (bucket_bytes < 1 << 20)
    assert got.idx is idx and got.dist2 is dist
    _assert_same(got, ref, torch.int32)
    assert sorted(os.listdir(tmp_path)) == ["dist.bin", "idx.bin"]  # the staging directory is gone
    del got, idx, dist
    assert np.array_equal(np.fromfile(tmp_path / "idx.bin", dtype=np.int32).reshape(M, k), ref.idx.numpy())
    assert np.array_equal(np.fromfile(tmp_path / "dist.bin", dtype=np.float32).reshape(M, k), ref.dist2.numpy())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_staged_outputs_of_every_dtype_and_mixed_memory(tmp_path, monkeypatch, dtype):
    """Half-precision distances are staged as bytes; an in-memory output beside a mapped one is
    written by the same pass (and never has its pages dropped)."""
    _staging(monkeypatch, 1 << 12)
    x = _uniform(3000, dtype=dtype, seed=5)
    ref = pcgeom.knn(x, x, 8)
    idx = torch.from_file(str(tmp_path / "idx.bin"), shared=True, size=3000 * 8, dtype=torch.int64).view(3000, 8)
    got = pcgeom.knn_streamed(x, x, 8, out_idx=idx, block_points=256)
    _assert_same(got, ref)
    if dtype == torch.float64:  # numpy has no bfloat16 memmap; torch.from_file covers the halves
        dist = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", dtype=np.float64, shape=(3000, 8))
        _assert_same(pcgeom.knn_streamed(x, x, 8, out_dist2=torch.from_numpy(dist), block_points=256), ref)
        assert np.array_equal(dist, ref.dist2.numpy())
    else:
        dist = torch.from_file(str(tmp_path / "d.bin"), shared=True, size=3000 * 8, dtype=dtype).view(3000, 8)
        _assert_same(pcgeom.knn_streamed(x, x, 8, out_dist2=dist, block_points=256), ref)


@pytest.mark.parametrize("order", ["distance", "index"])
def test_staged_ball_query_and_other_queries(tmp_path, monkeypatch, order):
    _staging(monkeypatch, 1 << 12)
    pts, q = _clustered(4000, seed=8), _uniform(2500, seed=9) * 6
    ref = pcgeom.ball_query(q, pts, 0.3, 10, order=order)
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=2500 * 10, dtype=torch.int32).view(2500, 10)
    got = pcgeom.ball_query_streamed(q, pts, 0.3, 10, order=order, out_idx=idx, index_dtype=torch.int32,
                                     block_points=256)
    _assert_same(got, ref, torch.int32)
    ref = pcgeom.knn(q, pts, 5)
    d = torch.from_file(str(tmp_path / "d.bin"), shared=True, size=2500 * 5, dtype=torch.float32).view(2500, 5)
    _assert_same(pcgeom.knn_streamed(q, pts, 5, out_dist2=d, block_points=256), ref)


def test_staging_is_removed_on_an_interruption(tmp_path, monkeypatch):
    _staging(monkeypatch, 1 << 12)
    x = _uniform(3000, seed=2)
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=3000 * 8, dtype=torch.int64).view(3000, 8)
    calls = []
    real = S._Staged.add

    def add(self, rows, parts):
        calls.append(rows.numel())
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, rows, parts)

    monkeypatch.setattr(S._Staged, "add", add)
    with pytest.raises(KeyboardInterrupt):
        pcgeom.knn_streamed(x, x, 8, out_idx=idx, block_points=256)
    assert os.listdir(tmp_path) == ["i.bin"]


def test_small_or_in_memory_outputs_are_not_staged(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "_Staged", None)  # any use would raise
    x = _uniform(2000, seed=4)
    ref = pcgeom.knn(x, x, 8)
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=2000 * 8, dtype=torch.int64).view(2000, 8)
    _assert_same(pcgeom.knn_streamed(x, x, 8, out_idx=idx, block_points=256), ref)  # below STAGE_MIN_BYTES
    monkeypatch.setattr(S, "STAGE_MIN_BYTES", 0)
    _assert_same(pcgeom.knn_streamed(x, x, 8, block_points=256), ref)  # nothing mapped


def test_dropped_pages_keep_their_data(tmp_path):
    n = 1 << 16
    t = torch.from_file(str(tmp_path / "a.bin"), shared=True, size=n, dtype=torch.int64)
    t.copy_(torch.arange(n))
    S._drop_pages(t[1000:60000])
    assert torch.equal(t, torch.arange(n))
    del t
    assert np.array_equal(np.fromfile(tmp_path / "a.bin", dtype=np.int64), np.arange(n))


def test_a_full_disk_while_staging_is_a_clear_error(tmp_path, monkeypatch):
    _staging(monkeypatch, 1 << 12)
    x = _uniform(2000, seed=6)
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=2000 * 8, dtype=torch.int64).view(2000, 8)

    class Full:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    monkeypatch.setattr(S._Staged, "_file", lambda self, b, j: Full())
    with pytest.raises(OSError, match=r"knn_streamed: staging the memory-mapped output in .*No space left on device"):
        pcgeom.knn_streamed(x, x, 8, out_idx=idx, block_points=256)
    assert os.listdir(tmp_path) == ["i.bin"]


def test_staged_rows_in_any_order(tmp_path, monkeypatch):
    """The staging files sort a block whose rows are not ascending (blocks come ascending today)."""
    _staging(monkeypatch, 1 << 10)
    M, k = 500, 4
    idx = torch.from_file(str(tmp_path / "i.bin"), shared=True, size=M * k, dtype=torch.int64).view(M, k)
    dist = torch.from_file(str(tmp_path / "d.bin"), shared=True, size=M * k, dtype=torch.float32).view(M, k)
    want_i = torch.arange(M * k).view(M, k)
    want_d = torch.rand(M, k, generator=_gen(1))
    perm = torch.randperm(M, generator=_gen(2))
    blocks = [S.StreamedBlock(r, want_d[r], want_i[r]) for r in perm.split(64)]
    S._write("knn_streamed", iter(blocks), M, k, torch.float32, torch.int64, torch.device("cpu"), dist, idx)
    assert torch.equal(idx, want_i) and torch.equal(dist, want_d)


def test_stage_threshold_follows_the_kernels_writeback_threshold(monkeypatch):
    assert S.STAGE_MIN_BYTES is None
    got = S.stage_min_bytes()
    assert got >= S.STAGE_FALLBACK_BYTES
    if sys.platform.startswith("linux"):
        fixed = int(open("/proc/sys/vm/dirty_background_bytes").read())
        if fixed == 0:
            ratio = int(open("/proc/sys/vm/dirty_background_ratio").read())
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            assert got <= max(S.STAGE_FALLBACK_BYTES, total * ratio // 100)
        else:
            assert got == fixed
    monkeypatch.setattr(S, "STAGE_MIN_BYTES", 12345)
    assert S.stage_min_bytes() == 12345

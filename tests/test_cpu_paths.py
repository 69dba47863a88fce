"""Every code path of the native CPU kernels against the pure-torch reference, exactly.

The CPU kernels pick a path per call and per cloud (KNN: the one plan of
csrc/knn/knn_dispatch_cpu.h; FPS: csrc/farthest_point_sample/farthest_point_sample_cpu.cpp):

* KNN, D <= 8: a KD-tree when the cloud is large against k and has enough
  queries (self queries walk the leaves; other queries are grouped by the leaf a
  descent reaches; a single large cloud builds its subtrees in parallel), else the
  tile path; queries or points with NaN/inf coordinates take the tile path / merge;
* KNN, D > 8: blocked GEMM candidate selection with exact re-ranking (symmetric
  tiles for self queries) for large enough clouds, else the tile path;
* KNN, the tile path (csrc/knn/knn_tile_cpu.cpp): vectorised exact distance
  tiles, a first threshold from group minima of a bootstrap window, a partial
  selection and a rank-count or radix sort of the survivors, for small clouds,
  few queries per cloud, k a large share of N, small high-D batches and
  NaN/inf queries;
* KNN, the brute path: the scalar scan of every point, for clouds or query
  sets of 2^31 - 1 rows or more;
* ``PCGEOM_CPU_KNN_PATH=tree|blocked|tile|brute`` forces one KNN kernel: the
  cases at the end run every input through every kernel, and through the
  dispatcher at its boundaries; ``torch.ops.pcgeom._knn_cpu_plan`` reports
  which kernel the plan picks, so the plan's boundaries are asserted directly;
* FPS: the bucket (KD-tree) variant for large finite clouds with D <= 8, the
  vectorised vanilla loop otherwise, the literal reference loop when a cloud has
  NaN/inf coordinates.

The cases below are sized to force each path.  Every answer must equal
``pcgeom.ops.reference`` bit for bit: the same indices and the same distance
bits (NaN included), in every dtype.
"""

import os
import subprocess
import sys

import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import clustered_cloud, lattice_cloud, random_cloud, surface_cloud

pytestmark = [pytest.mark.ops, pytest.mark.skipif(
    not pcgeom.backend_info()["extension_loaded"], reason="tests the native CPU kernels"
)]


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _lengths(x, lengths):
    return torch.full((x.shape[0],), x.shape[1]) if lengths is None else torch.as_tensor(lengths)


def assert_knn_exact(query, points, k, ql=None, pl=None, radius=None):
    qlt, plt = _lengths(query, ql), _lengths(points, pl)
    if radius is None:
        got = torch.ops.pcgeom.knn(query, points, k, qlt, plt)
        want = reference.knn_reference(query, points, k, qlt, plt)
    else:
        got = torch.ops.pcgeom.ball_query(query, points, radius, k, qlt, plt)
        want = reference.ball_query_reference(query, points, radius, k, qlt, plt)
    assert torch.equal(got[1], want[1]), "indices differ from the reference"
    assert torch.equal(_bits(got[0]), _bits(want[0])), "distances differ from the reference"
    return got


def assert_fps_exact(points, n_samples, lengths=None, start=None):
    L = _lengths(points, lengths)
    st = torch.zeros(points.shape[0], dtype=torch.int64) if start is None else torch.as_tensor(start)
    got = torch.ops.pcgeom.farthest_point_sample(points, n_samples, L, st)
    want = reference.farthest_point_sample_reference(points, n_samples, L, st)
    assert torch.equal(got, want)
    return got


# ---------------------------------------------------------------------------
# KNN, low dimensions


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_tree_self_query_dtypes(dtype):
    p = random_cloud(2, 3000, 3, dtype=dtype, seed=1)
    assert_knn_exact(p, p, 16)


@pytest.mark.parametrize("D", [1, 2, 3, 5, 8])
def test_tree_dimensions(D):
    p = random_cloud(2, 2500, D, seed=D)
    assert_knn_exact(p, p, 12)
    q = random_cloud(2, 400, D, seed=10 + D) * 1.2 - 0.1  # some queries outside the cloud
    assert_knn_exact(q, p, 7)


@pytest.mark.parametrize("k", [1, 16, 100])
def test_tree_k(k):
    p = random_cloud(1, 4000, 3, seed=2)
    q = random_cloud(1, 500, 3, seed=3)
    assert_knn_exact(q, p, k)


def test_scan_when_k_is_close_to_n():
    p = random_cloud(2, 300, 3, seed=4)
    for k in (60, 299, 300, 310):  # 8k > N: direct scan; k > N: padded
        assert_knn_exact(p, p, k)


def test_scan_for_tiny_clouds_and_few_queries():
    p = random_cloud(3, 100, 3, seed=5)
    assert_knn_exact(p, p, 4)
    big = random_cloud(1, 5000, 3, seed=6)
    assert_knn_exact(big[:, :3], big, 5)  # 3 queries: no tree


def test_surfaces_and_clusters():
    s = surface_cloud(2, 6000, seed=7)
    assert_knn_exact(s, s, 16)
    c = clustered_cloud(2, 6000, seed=8)  # densities differ by 100x
    assert_knn_exact(c, c, 16)
    assert_knn_exact(c[:, :700].flip(1).contiguous(), c, 24)


def test_lattice_ties_and_duplicates():
    g = lattice_cloud(1, 14, 3)  # 2744 points, many equal distances
    for k in (1, 7, 27, 33):
        assert_knn_exact(g, g, k)
    g2 = lattice_cloud(1, 60, 2, seed=1)
    assert_knn_exact(g2, g2, 9)
    base = random_cloud(1, 700, 3, seed=9)
    dup = torch.cat([base] * 4, 1)[:, torch.randperm(2800, generator=torch.Generator().manual_seed(0))]
    assert_knn_exact(dup, dup, 16)
    same = torch.zeros(1, 2000, 3)  # every point identical: ties everywhere
    assert_knn_exact(same, same, 10)


def test_ragged_lengths_self_and_cross():
    p = random_cloud(4, 3000, 3, seed=10)
    ql, pl = [3000, 700, 0, 2000], [1200, 3000, 500, 0]
    assert_knn_exact(p, p, 16, ql, pl)  # self query with query rows past the points' length
    q = random_cloud(4, 900, 3, seed=11)
    assert_knn_exact(q, p, 16, [900, 100, 900, 0], [3000, 2999, 0, 17])


def test_non_finite_points_and_queries():
    p = random_cloud(2, 3000, 3, seed=12)
    p[0, 5, 1] = float("nan")
    p[0, 17] = float("inf")
    p[0, 2999, 2] = float("-inf")
    p[1, 0, 0] = float("nan")
    assert_knn_exact(p, p, 16)  # tree + merged non-finite points; NaN/inf queries scanned
    q = random_cloud(2, 300, 3, seed=13)
    q[1, 7, 2] = float("inf")
    assert_knn_exact(q, p, 3000)  # every point, NaN after +inf
    huge = random_cloud(1, 2000, 3, seed=14) * 3e19  # squares overflow to +inf
    assert_knn_exact(huge, huge, 8)


def test_large_single_cloud_builds_in_parallel():
    # One cloud above the parallel-build cut: top split serially, subtrees in parallel.
    p = random_cloud(1, 20000, 3, seed=15)
    q = random_cloud(1, 2000, 3, seed=16)
    assert_knn_exact(q, p, 8)
    torch.manual_seed(0)
    sel = torch.randperm(20000)[:1500]
    d, i = torch.ops.pcgeom.knn(p, p, 8, torch.tensor([20000]), torch.tensor([20000]))
    rd, ri = reference.knn_reference(p[:, sel], p, 8, torch.tensor([1500]), torch.tensor([20000]))
    assert torch.equal(i[:, sel], ri) and torch.equal(d[:, sel], rd)


def test_ball_query_through_the_tree():
    p = random_cloud(2, 4000, 3, seed=17)
    assert_knn_exact(p, p, 16, radius=0.05)
    assert_knn_exact(p[:, :500].contiguous(), p, 40, radius=0.1)
    g = lattice_cloud(1, 12, 3)
    assert_knn_exact(g, g, 32, radius=1.0)  # radius exactly at lattice distances


def test_same_answer_for_any_thread_count():
    p = clustered_cloud(4, 3000, seed=18)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = pcgeom.knn(p, p, 16)
        torch.set_num_threads(max(2, before))
        many = pcgeom.knn(p, p, 16)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one.idx, many.idx) and torch.equal(one.dist2, many.dist2)


# ---------------------------------------------------------------------------
# KNN, high dimensions (blocked GEMM + exact re-ranking)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_blocked_self_query_dtypes(dtype):
    f = random_cloud(2, 1100, 64, dtype=dtype, seed=20)  # 5 blocks: diagonal + circle rounds
    assert_knn_exact(f, f, 20)


def test_blocked_cross_query_and_d16():
    f = random_cloud(2, 1500, 16, seed=21)
    q = random_cloud(2, 600, 16, seed=22)
    assert_knn_exact(q, f, 10)
    assert_knn_exact(f, f, 1)


def test_blocked_near_ties_within_the_margin():
    # Integer lattice in 9-D: thousands of exactly equal distances, all inside the
    # GEMM error margin, so the exact re-ranking decides every tie.
    g = lattice_cloud(1, 3, 9)[:, :2000].contiguous()
    assert_knn_exact(g, g, 30)
    dup = torch.cat([random_cloud(1, 300, 32, seed=23)] * 4, 1)
    assert_knn_exact(dup, dup, 7)


def test_blocked_offset_features_and_ragged():
    # A large common offset makes |q|^2 >> distances: the margin must still hold.
    f = random_cloud(3, 900, 24, seed=24) + 1000.0
    assert_knn_exact(f, f, 12, [900, 300, 0], [900, 900, 450])


def test_blocked_fallbacks():
    f = random_cloud(2, 200, 40, seed=25)
    assert_knn_exact(f, f, 100)  # 4k > N: direct scan
    f[0, 3, 5] = float("nan")
    f[1, 10] = float("inf")
    assert_knn_exact(f, f, 8)  # non-finite rows: scanned; non-finite points: merged
    big = random_cloud(1, 300, 12, seed=26) * 1e19  # norms overflow float32: scan
    assert_knn_exact(big, big, 5)


def test_blocked_ball_query():
    f = random_cloud(2, 800, 32, seed=27)
    assert_knn_exact(f, f, 16, radius=1.4)


# ---------------------------------------------------------------------------
# Every KNN kernel, forced (PCGEOM_CPU_KNN_PATH), and the dispatcher's boundaries

PATHS = ["tree", "blocked", "tile", "brute"]
PATH_ENV = "PCGEOM_CPU_KNN_PATH"
OLD_PATH_ENV = "PCGEOM_KNN_CPU_PATH"  # the variable's old name, still read


@pytest.fixture
def knn_path(monkeypatch, request):
    monkeypatch.delenv(OLD_PATH_ENV, raising=False)
    monkeypatch.setenv(PATH_ENV, request.param)
    return request.param


def _nonfinite(x):
    x = x.clone()
    x[0, 3, 1] = float("nan")
    x[0, 7] = float("inf")
    x[-1, -1, 0] = float("-inf")
    return x


@pytest.mark.parametrize("knn_path", PATHS, indirect=True)
@pytest.mark.parametrize("D", [3, 5, 40])
def test_every_path_every_k(knn_path, D):
    p = random_cloud(2, 300, D, seed=50 + D)
    for k in (1, 20, 299, 300, 310):  # k = N: a full sort; k > N: padded
        assert_knn_exact(p, p, k)
    q = random_cloud(2, 37, D, seed=60 + D)  # 37 rows: groups of 32, blocks of 4, a remainder
    assert_knn_exact(q, p, 9)
    assert_knn_exact(q, p, 250)


@pytest.mark.parametrize("knn_path", PATHS, indirect=True)
def test_every_path_non_finite_ragged_radius(knn_path):
    p = _nonfinite(random_cloud(2, 400, 3, seed=70))
    assert_knn_exact(p, p, 12)
    assert_knn_exact(p, p, 400)  # every point: NaN after +inf, computed NaN bits kept
    assert_knn_exact(p, p, 16, [400, 130], [250, 400])
    assert_knn_exact(p, p, 16, [0, 400], [400, 0])
    f = _nonfinite(random_cloud(2, 300, 24, seed=71))
    assert_knn_exact(f, f, 10, [300, 200], [300, 299])
    assert_knn_exact(random_cloud(2, 500, 3, seed=72), random_cloud(2, 500, 3, seed=73), 40, radius=0.1)
    assert_knn_exact(f, f, 200, radius=1.3)


@pytest.mark.parametrize("knn_path", PATHS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_every_path_dtypes(knn_path, dtype):
    p = random_cloud(2, 300, 6, dtype=dtype, seed=74)
    assert_knn_exact(p, p, 17)
    assert_knn_exact(p, p, 300)
    f = _nonfinite(random_cloud(1, 200, 33, dtype=dtype, seed=75))
    assert_knn_exact(f, f, 150)


@pytest.mark.parametrize("knn_path", PATHS, indirect=True)
def test_every_path_ties(knn_path):
    g = lattice_cloud(1, 9, 3)  # 729 points, runs of equal distances across tiles
    for k in (1, 27, 400, 729):
        assert_knn_exact(g, g, k)
    same = torch.zeros(1, 600, 9)  # all distances 0: ties to the lower index only
    assert_knn_exact(same, same, 300)


@pytest.mark.parametrize("knn_path", ["tile"], indirect=True)
def test_tile_sizes_and_large_k(knn_path):
    # Tile edges (256 points), compaction thresholds (2k + 64), the radix sort
    # (>= 384 survivors), few rows per thread and one query against many points.
    for N in (255, 256, 257, 513):
        p = random_cloud(1, N, 3, seed=N)
        assert_knn_exact(p, p, 1)
        assert_knn_exact(p[:, :5].contiguous(), p, N - 1)
    p = random_cloud(1, 20000, 3, seed=76)
    assert_knn_exact(p[:, :3].contiguous(), p, 1)
    assert_knn_exact(p[:, :3].contiguous(), p, 4000)  # buffer cut back many times
    assert_knn_exact(p[:, :2].contiguous(), p, 20000)  # k = N: one radix sort
    assert_knn_exact(p[:, :2].contiguous().double(), p.double(), 9000)
    h = random_cloud(1, 300, 700, seed=77)  # D = 700, no compile-time D
    assert_knn_exact(h[:, :9].contiguous(), h, 11)


@pytest.mark.parametrize("knn_path", ["tree"], indirect=True)
def test_tree_sorted_list_every_k(knn_path):
    # The tree's sorted top-k list (k <= 48; a heap above): filled, ordered
    # once by rank counting, then insertions by blend -- any k, not only
    # multiples of the vector width, with ties on a lattice and duplicates.
    p = random_cloud(2, 1200, 3, seed=97)
    g = lattice_cloud(1, 10, 3)
    dup = torch.cat([g, g], 1)  # every point twice: equal keys but for the index
    for k in (1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 47, 48, 49):
        assert_knn_exact(p, p, k)
        assert_knn_exact(g, g, k)
        assert_knn_exact(dup[:, ::3].contiguous(), dup, k)


@pytest.mark.parametrize("knn_path", ["tile"], indirect=True)
def test_tile_bootstrap_window(knn_path):
    # The first threshold comes from 2k group minima of the first
    # min(N, 1024) distances when that window holds >= 4k points: both sides
    # of 4k, a window that is the whole cloud, one that is followed by more
    # points, NaN/inf inside it, all-equal distances, radius and float64.
    for N, k in ((128, 32), (127, 32), (1024, 32), (1025, 32), (1024, 256), (3000, 20), (4096, 1)):
        p = random_cloud(1, N, 3, seed=90 + k)
        assert_knn_exact(p[:, :37].contiguous(), p, k)
    p = _nonfinite(random_cloud(2, 1500, 3, seed=91))
    assert_knn_exact(p, p, 24)
    nan_row = random_cloud(1, 1100, 3, seed=92)
    nan_row[0, :600] = float("nan")  # most groups hold only NaN: their minimum stays +inf
    assert_knn_exact(nan_row[:, 590:620].contiguous(), nan_row, 40)
    assert_knn_exact(torch.zeros(1, 40, 3), torch.zeros(1, 1200, 3), 50)
    g = lattice_cloud(1, 11, 3)  # 1331 points: ties at the bound
    assert_knn_exact(g[:, ::7].contiguous(), g, 27)
    q = random_cloud(1, 33, 3, seed=93)
    assert_knn_exact(q, random_cloud(1, 2000, 3, seed=94), 30, radius=0.05)
    assert_knn_exact(q.double(), random_cloud(1, 2000, 3, seed=95).double(), 30)
    f = random_cloud(1, 900, 64, seed=96)
    assert_knn_exact(f[:, :50].contiguous(), f, 20)


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("PCGEOM_CPU_NO_AVX2")), reason="already the baseline run")
def test_baseline_simd_copies_are_exact_too():
    # The tile, tree and FPS kernels' hot loops exist twice, baseline SSE2 and AVX2
    # (picked at run time, csrc/common/simd_cpu.h).  This machine runs the AVX2
    # copies in every other test; here the path tests run again on the
    # baseline copies, in a child process (the choice is made once per process).
    env = dict(os.environ, PCGEOM_CPU_NO_AVX2="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
           "-k", "every_path or tile or tree or dispatcher or fps"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout


def test_tile_same_answer_for_any_thread_count(monkeypatch):
    monkeypatch.delenv(OLD_PATH_ENV, raising=False)
    monkeypatch.setenv(PATH_ENV, "tile")
    p = clustered_cloud(3, 700, seed=78)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = pcgeom.knn(p, p, 300)
        torch.set_num_threads(max(2, before))
        many = pcgeom.knn(p, p, 300)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one.idx, many.idx) and torch.equal(one.dist2, many.dist2)


def test_dispatcher_boundaries(monkeypatch):
    # Unforced calls on either side of each rule of the plan (knn_dispatch_cpu.h):
    # the answers; test_plan_* below assert the kernel the plan picks.
    monkeypatch.delenv(PATH_ENV, raising=False)
    monkeypatch.delenv(OLD_PATH_ENV, raising=False)
    p = random_cloud(1, 256, 3, seed=80)  # tree needs >= 256 points, 8k <= n, 192 queries
    assert_knn_exact(p, p, 32)
    assert_knn_exact(p, p, 33)
    assert_knn_exact(p[:, :192].contiguous(), p, 8)
    assert_knn_exact(p[:, :191].contiguous(), p, 8)
    assert_knn_exact(p[:, :255].contiguous(), p[:, :255].contiguous(), 8)
    h = random_cloud(1, 2048, 5, seed=84)  # D = 5: >= 2048 points and queries
    assert_knn_exact(h, h, 16)
    assert_knn_exact(h[:, :2047].contiguous(), h, 16)
    assert_knn_exact(h[:, :2047].contiguous(), h[:, :2047].contiguous(), 16)
    f = random_cloud(1, 4096, 64, seed=81)  # blocked from N * D = 2^18, 4k <= N, M >= 32
    assert_knn_exact(f[:, :32].contiguous(), f, 64)  # and k <= 64 below N * D = 2^19
    assert_knn_exact(f[:, :31].contiguous(), f, 64)
    assert_knn_exact(f[:, :32].contiguous(), f, 65)
    assert_knn_exact(f[:, :32].contiguous(), f, 256)
    assert_knn_exact(f[:, :31].contiguous(), f, 256)
    assert_knn_exact(f[:, :40].contiguous(), f, 1024)
    assert_knn_exact(f[:, :40].contiguous(), f, 1025)
    g = random_cloud(1, 4095, 64, seed=82)
    assert_knn_exact(g[:, :40].contiguous(), g, 256)


def test_the_old_names_still_force_a_path(monkeypatch):
    # "scan" is the brute path's old name, PCGEOM_KNN_CPU_PATH the variable's.
    p = random_cloud(1, 500, 3, seed=83)
    monkeypatch.delenv(PATH_ENV, raising=False)
    monkeypatch.setenv(OLD_PATH_ENV, "scan")
    assert_knn_exact(p, p, 10)
    monkeypatch.setenv(PATH_ENV, "scan")
    assert_knn_exact(p, p, 10)


@pytest.mark.parametrize("knn_path", PATHS + [""], indirect=True)
def test_every_path_zero_dimensions(knn_path):
    # D = 0: every distance is 0, ties go to the lower index.  (The tree kernel
    # exists for D = 1 .. 8 only; D = 0 once reached it and returned garbage.)
    q = torch.zeros(2, 300, 0)
    L = torch.tensor([300, 300])
    d, i = torch.ops.pcgeom.knn(q, q, 4, L, L)
    assert torch.equal(i, torch.arange(4).expand(2, 300, 4)) and torch.equal(d, torch.zeros(2, 300, 4))


# ---------------------------------------------------------------------------
# The plan itself: which kernel serves each cloud (torch.ops.pcgeom._knn_cpu_plan)

PLAN_NAMES = ["none", "tree", "blocked", "tile", "brute"]  # the op's codes (KnnPath)


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv(PATH_ENV, raising=False)
    monkeypatch.delenv(OLD_PATH_ENV, raising=False)
    return monkeypatch


def plan(M, N, D, k, ql=None, pl=None, *, B=1, dtype=torch.float32, points=None):
    """The plan's kernel name per cloud for (B, M, D) queries against (B, N, D) points."""
    query = torch.zeros(B, M, D, dtype=dtype)
    points = torch.zeros(B, N, D, dtype=dtype) if points is None else points
    codes = torch.ops.pcgeom._knn_cpu_plan(query, points, k, _lengths(query, ql), _lengths(points, pl))
    assert codes.dtype == torch.int64 and codes.shape == (B,)
    return [PLAN_NAMES[c] for c in codes.tolist()]


def test_plan_low_dimensions_per_call(no_override):
    # D <= 4: >= 256 points, 8k <= n, >= 192 queries.
    assert plan(192, 256, 3, 32) == ["tree"]
    assert plan(192, 255, 3, 31) == ["tile"]  # points
    assert plan(192, 256, 3, 33) == ["tile"]  # 8k > n
    assert plan(191, 256, 3, 32) == ["tile"]  # queries
    assert plan(192, 256, 1, 1) == ["tree"] and plan(191, 256, 4, 1) == ["tile"]
    # D = 5 .. 8: at least tree_min(D) points and queries.
    for D, need in ((5, 2048), (6, 4096), (7, 6144), (8, 12288)):
        assert plan(need, need, D, 16) == ["tree"], D
        assert plan(need - 1, need, D, 16) == ["tile"], D
        assert plan(need, need - 1, D, 16) == ["tile"], D
    # No compiled tree for D = 0: tile (the tree kernel used to return garbage there).
    assert plan(300, 300, 0, 4) == ["tile"]


def test_plan_high_dimensions_per_call(no_override):
    # D > 8: N * D >= 2^18, 4k <= N, M >= 32, and k <= 64 or N * D >= 2^19.
    assert plan(32, 4096, 64, 64) == ["blocked"]
    assert plan(31, 4096, 64, 64) == ["tile"]  # queries
    assert plan(32, 4095, 64, 16) == ["tile"]  # N * D just below 2^18
    assert plan(32, 4096, 64, 65) == ["tile"]  # k > 64 below 2^19
    assert plan(32, 8192, 64, 65) == ["blocked"]  # k > 64 from 2^19 on
    assert plan(32, 8192, 64, 2048) == ["blocked"]  # 4k = N
    assert plan(32, 8192, 64, 2049) == ["tile"]  # 4k > N
    assert plan(32, 2 ** 18 // 9 + 1, 9, 16) == ["blocked"]  # the first D above the tree's
    assert plan(32, 2 ** 18 // 9, 9, 16) == ["tile"]


def test_plan_per_cloud(no_override):
    # The tree kernel plans each cloud from its own queries and finite points.
    assert plan(192, 256, 3, 32, ql=[192, 191], B=2) == ["tree", "tile"]
    assert plan(192, 256, 3, 32, pl=[256, 255], B=2) == ["tree", "tile"]
    assert plan(192, 256, 3, 8, ql=[192, 0], pl=[0, 256], B=2) == ["none", "none"]
    pts = torch.zeros(2, 256, 3)
    pts[1, 7, 2] = float("nan")  # 255 finite points left
    assert plan(192, 256, 3, 32, B=2, points=pts) == ["tree", "tile"]
    pts[1, 7, 2] = float("inf")
    assert plan(192, 256, 3, 32, B=2, dtype=torch.float64, points=pts.double()) == ["tree", "tile"]
    # The blocked kernel: >= 64 finite points, 4k <= n, >= 16 queries per cloud.
    assert plan(40, 4096, 64, 16, ql=[40, 16], pl=[4096, 64], B=2) == ["blocked", "blocked"]
    assert plan(40, 4096, 64, 16, ql=[40, 15], B=2) == ["blocked", "tile"]
    assert plan(40, 4096, 64, 16, pl=[4096, 63], B=2) == ["blocked", "tile"]
    assert plan(40, 4096, 64, 26, pl=[104, 103], B=2) == ["blocked", "tile"]  # 4k vs n
    # A call the padded sizes rule out is planned whole: no cloud gets a tree.
    assert plan(191, 5000, 3, 8, B=3) == ["tile"] * 3


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_plan_is_the_same_for_every_dtype(no_override, dtype):
    # Half precision runs on float32 copies: the plan never looks at the dtype.
    assert plan(192, 256, 3, 32, dtype=dtype) == ["tree"]
    assert plan(191, 256, 3, 32, dtype=dtype) == ["tile"]
    assert plan(32, 4096, 64, 64, dtype=dtype) == ["blocked"]
    assert plan(31, 4096, 64, 64, dtype=dtype) == ["tile"]
    pts = torch.zeros(1, 256, 3, dtype=dtype)
    pts[0, 0, 0] = float("nan")
    assert plan(192, 256, 3, 32, dtype=dtype, points=pts) == ["tile"]


def test_plan_int32_fallback(no_override):
    # 2^31 - 1 queries or points: brute, the only kernel with int64 row indices,
    # whatever the override says.  Expanded tensors: nothing is allocated.
    big = 2 ** 31 - 1
    one = torch.zeros(1, 1, 1)

    def call(M, N, k=1):
        q, p = one.expand(1, M, 1), one.expand(1, N, 1)
        codes = torch.ops.pcgeom._knn_cpu_plan(q, p, k, torch.tensor([M]), torch.tensor([N]))
        return PLAN_NAMES[codes.item()]

    assert call(big, 4) == "brute"
    assert call(big - 1, 4) == "tile"
    assert call(4, big) == "brute"
    assert call(4, big - 1) == "tile"
    for forced in PATHS:
        no_override.setenv(PATH_ENV, forced)
        assert call(big, 4) == "brute", forced


def test_plan_overrides(no_override):
    mp = no_override
    nan_cloud = torch.full((1, 300, 3), float("nan"))
    for value, low_d, high_d in (("tree", "tree", "blocked"), ("blocked", "blocked", "blocked"),
                                 ("tile", "tile", "tile"), ("brute", "brute", "brute"),
                                 ("scan", "brute", "brute"), ("auto", "tile", "blocked"),
                                 ("", "tile", "blocked")):
        mp.setenv(PATH_ENV, value)
        assert plan(20, 300, 3, 8) == [low_d], value  # unforced: tile (20 queries)
        assert plan(32, 4096, 64, 16) == [high_d], value  # unforced: blocked
    # Forced tree applies where the tree kernel exists (1 <= D <= 8): else the plan decides.
    mp.setenv(PATH_ENV, "tree")
    assert plan(31, 4096, 64, 16) == ["tile"]
    assert plan(300, 300, 0, 4) == ["tile"]
    # Forced tree / blocked still need a finite point per cloud.
    assert plan(20, 300, 3, 8, points=nan_cloud) == ["tile"]
    mp.setenv(PATH_ENV, "blocked")
    assert plan(20, 300, 3, 8, points=nan_cloud) == ["tile"]
    assert plan(20, 300, 3, 8) == ["blocked"]
    # The old variable name is read when the new one is unset or empty; the new one wins.
    mp.delenv(PATH_ENV)
    mp.setenv(OLD_PATH_ENV, "tile")
    assert plan(32, 4096, 64, 16) == ["tile"]
    mp.setenv(PATH_ENV, "")
    assert plan(32, 4096, 64, 16) == ["tile"]
    mp.setenv(PATH_ENV, "brute")
    assert plan(32, 4096, 64, 16) == ["brute"]


@pytest.mark.parametrize("env", [PATH_ENV, OLD_PATH_ENV])
def test_unknown_path_value_is_rejected(no_override, env):
    no_override.setenv(env, "no-such-path")
    p = random_cloud(1, 50, 3, seed=83)
    L = torch.tensor([50])
    for op, args in (("knn", (p, p, 4, L, L)), ("ball_query", (p, p, 0.5, 4, L, L)),
                     ("_knn_cpu_plan", (p, p, 4, L, L))):
        with pytest.raises(RuntimeError) as info:
            getattr(torch.ops.pcgeom, op)(*args)
        assert (f"{op}: environment variable {env}=no-such-path is not one of: "
                "auto, tree, blocked, tile, brute (scan: the old name of brute)") in str(info.value)
    with pytest.raises(RuntimeError, match="environment variable"):
        pcgeom.knn(p, p, 4)
    no_override.setenv(env, "Tree")  # case matters, as on CUDA
    with pytest.raises(RuntimeError, match="is not one of"):
        torch.ops.pcgeom.knn(p, p, 4, L, L)


# ---------------------------------------------------------------------------
# FPS


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_fps_bucket_dtypes(dtype):
    assert_fps_exact(random_cloud(2, 4000, 3, dtype=dtype, seed=30), 300)


def test_fps_vanilla_small_and_high_d():
    assert_fps_exact(random_cloud(4, 1000, 3, seed=31), 64)  # below the bucket size
    assert_fps_exact(random_cloud(2, 3000, 16, seed=32), 100)  # D > 8
    assert_fps_exact(random_cloud(2, 3000, 3, seed=33), 10)  # few samples


@pytest.mark.parametrize("D", [1, 2, 5, 8])
def test_fps_bucket_dimensions(D):
    assert_fps_exact(random_cloud(1, 3000, D, seed=40 + D), 400)


def test_fps_surfaces_clusters_lattices_duplicates():
    assert_fps_exact(surface_cloud(2, 6000, seed=34), 500)
    assert_fps_exact(clustered_cloud(2, 6000, seed=35), 500)
    assert_fps_exact(lattice_cloud(1, 15, 3), 1000)  # ties at every step
    assert_fps_exact(lattice_cloud(1, 60, 2), 3600)  # every point, to the end
    base = random_cloud(1, 800, 3, seed=36)
    assert_fps_exact(torch.cat([base] * 4, 1), 1200)  # duplicates: distance 0 after 800 samples


def test_fps_ragged_starts_and_more_samples_than_points():
    p = random_cloud(3, 5000, 3, seed=37)
    assert_fps_exact(p, 300, [5000, 2500, 0], [17, 2499, 0])
    assert_fps_exact(p, 2100, [5000, 2100, 2048], [4999, 0, 5])  # S beyond some lengths


def test_fps_non_finite_clouds():
    p = random_cloud(2, 3000, 3, seed=38)
    p[0, 11, 2] = float("nan")
    p[1, 5] = float("inf")
    assert_fps_exact(p, 3000)  # NaN/inf points are taken last


def test_fps_scene_size():
    assert_fps_exact(random_cloud(1, 30000, 3, seed=39), 600)

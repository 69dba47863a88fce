"""pcgeom.compat.pyg_lib: pyg-lib 0.8.0's ``torch.ops.pyg.*`` and Python faces, checked against float64 brute force."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import pcgeom.compat.pyg_lib as pl
from pcgeom.compat import shims
from pcgeom.compat.pyg_lib import _ops


def _clouds(sizes, d=3, seed=0, grid=False, dtype=torch.float64):
    """Ragged clouds as one ``(N, d)`` tensor and its CSR ``ptr``; ``grid``: integer points (many exact ties)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randint(0, 3, (n, d), generator=g).to(dtype) if grid else torch.randn(n, d, generator=g, dtype=dtype)
    ptr = torch.tensor([0] + list(np.cumsum(sizes)), dtype=torch.int64)
    return x, ptr


def _cloud_of(ptr, i):
    return int(np.searchsorted(ptr.numpy(), i, side="right") - 1)


def _knn_oracle(x, y, px, py, k, cosine=False):
    xn, yn = x.double().numpy(), y.double().numpy()
    rows, cols = [], []
    for i in range(len(yn)):
        b = _cloud_of(py, i)
        lo, hi = int(px[b]), int(px[b + 1])
        cand = np.arange(lo, hi)
        if cosine:
            d = 1 - (xn[cand] @ yn[i]) / (np.linalg.norm(xn[cand], axis=1) * np.linalg.norm(yn[i]))
        else:
            d = ((xn[cand] - yn[i]) ** 2).sum(1)
        order = np.lexsort((cand, d))[:k]  # nearest first, ties to the lower index
        rows += [i] * len(order)
        cols += cand[order].tolist()
    return [rows, cols]


@pytest.mark.parametrize("sizes,k", [([5, 0, 7, 1], 3), ([4, 9], 12), ([0, 0, 6], 1), ([11], 4)])
@pytest.mark.parametrize("grid", [False, True])
def test_knn_matches_float64_brute_force_on_ragged_ptr(sizes, k, grid):
    x, px = _clouds(sizes, grid=grid)
    y, py = _clouds([s // 2 + (1 if s else 0) for s in sizes], grid=grid, seed=1)
    got = pl.ops.knn(x, y, k, px, py)
    assert got.dtype == torch.int64
    assert got.tolist() == _knn_oracle(x, y, px, py, k)
    # the operator PyG calls, with pyg-lib's argument order
    assert torch.equal(torch.ops.pyg.knn(x, y, px, py, k, False, 1), got)


@pytest.mark.parametrize("sizes,k", [([6, 6, 6], 4), ([7, 9, 8], 3), ([10, 12], 10), ([5, 8], 6)])
@pytest.mark.parametrize("self_search", [True, False])
def test_knn_self_and_cross_search_edges_equal_brute_force(sizes, k, self_search):
    # Every cloud of x holds k points (no -1 slot: the edges are read without a mask) or not ([5, 8] with
    # k = 6); equal clouds pad as a view, ragged ones are gathered; x is y (PyG's knn_graph) or not.
    x, px = _clouds(sizes, grid=True)
    if self_search:
        y, py = x, px
    else:
        y, py = _clouds([s + 2 for s in sizes], grid=True, seed=2)
    got = torch.ops.pyg.knn(x, y, px, py, k, False, 1)
    assert got.is_contiguous()
    assert got.tolist() == _knn_oracle(x, y, px, py, k)
    assert torch.equal(torch.ops.pyg.knn(x, y.clone(), px, py.clone(), k, False, 1), got)


def test_knn_query_cloud_without_rows():
    # every x cloud holds k points (no -1 slot) but the middle y cloud is empty: its padded rows are dropped
    x, px = _clouds([6, 5, 7], grid=True)
    y, py = _clouds([3, 0, 4], grid=True, seed=5)
    assert torch.ops.pyg.knn(x, y, px, py, 5, False, 1).tolist() == _knn_oracle(x, y, px, py, 5)


def test_knn_cosine_and_without_ptr():
    x, _ = _clouds([20], seed=3)
    y, _ = _clouds([6], seed=4)
    one = torch.tensor([0, 20]), torch.tensor([0, 6])
    assert pl.ops.knn(x, y, 5, cosine=True).tolist() == _knn_oracle(x, y, *one, 5, cosine=True)
    assert pl.ops.knn(x, y, 5).tolist() == _knn_oracle(x, y, *one, 5)


def _radius_oracle(x, y, px, py, r, cap, ignore_same_index=False):
    """The first ``cap`` points in index order with ``dist2 < r*r`` (pyg-lib's CUDA kernel), float64."""
    xn, yn = x.numpy(), y.numpy()
    rows, cols = [], []
    for i in range(len(yn)):
        b = _cloud_of(py, i)
        got = []
        for j in range(int(px[b]), int(px[b + 1])):
            if ((xn[j] - yn[i]) ** 2).sum() < r * r and not (ignore_same_index and i == j) and len(got) < cap:
                got.append(j)
        rows += [i] * len(got)
        cols += got
    return [rows, cols]


@pytest.mark.parametrize("cap", [1, 3, 50])
@pytest.mark.parametrize("grid", [False, True])
def test_radius_keeps_the_first_in_index_order_under_the_cap(cap, grid):
    x, px = _clouds([30, 0, 12, 25], grid=grid, seed=5)
    r = 1.0 if grid else 1.2  # grid: distances 1 exactly on the boundary (open ball: excluded)
    got = pl.ops.radius(x, x, r, px, px, max_num_neighbors=cap)
    assert got.tolist() == _radius_oracle(x, x, px, px, r, cap)
    got = torch.ops.pyg.radius(x, x, px, px, r, cap, 1, True)
    assert got.tolist() == _radius_oracle(x, x, px, px, r, cap, ignore_same_index=True)


def test_nearest_matches_brute_force_ties_to_lower_index():
    x, px = _clouds([7, 0, 9], grid=True, seed=6)
    y, py = _clouds([3, 2, 4], grid=True, seed=7)
    want = []
    for i in range(len(x)):
        b = _cloud_of(px, i)
        cand = np.arange(int(py[b]), int(py[b + 1]))
        d = ((y.numpy()[cand] - x.numpy()[i]) ** 2).sum(1)
        want.append(int(cand[np.lexsort((cand, d))[0]]))
    assert pl.ops.nearest(x, y, px, py).tolist() == want


def _fps_oracle(x, ptr, ratio, starts):
    out = []
    for b in range(len(ptr) - 1):
        lo, hi = int(ptr[b]), int(ptr[b + 1])
        n = hi - lo
        m = int(np.ceil(np.float32(n) * np.float32(ratio)))
        if m == 0:
            continue
        pts = x[lo:hi].double().numpy()
        sel = [int(starts[b])]
        dist = ((pts - pts[sel[0]]) ** 2).sum(1)
        while len(sel) < m:
            dist[sel] = -1
            j = int(np.argmax(dist))  # farthest, ties to the lowest index
            sel.append(j)
            dist = np.minimum(dist, ((pts - pts[j]) ** 2).sum(1))
        out += [lo + s for s in sel]
    return out


@pytest.mark.parametrize("ratio", [0.25, 0.5, 1.0])
def test_fps_matches_brute_force_and_random_start_follows_torch_generator(ratio):
    x, ptr = _clouds([10, 0, 17, 1], seed=8)
    assert pl.ops.fps(x, ptr, ratio, False).tolist() == _fps_oracle(x, ptr, ratio, [0, 0, 0, 0])
    torch.manual_seed(3)
    got = pl.ops.fps(x, ptr, ratio, True)
    torch.manual_seed(3)
    deg = torch.diff(ptr)
    starts = (torch.rand(4, dtype=x.dtype) * deg.float()).long()  # pyg-lib's CUDA draw
    assert got.tolist() == _fps_oracle(x, ptr, ratio, starts.tolist())


def test_grid_cluster_is_trunc_voxel_first_axis_fastest():
    pos = torch.tensor([[0.0, 0.0], [2.9, 0.1], [0.5, 1.9], [3.0, 3.0]])
    size = torch.tensor([1.0, 2.0])
    # cells per axis: trunc(3/1)+1 = 4, trunc(3/2)+1 = 2
    want = [0 + 4 * 0, 2 + 4 * 0, 0 + 4 * 0, 3 + 4 * 1]
    assert pl.ops.grid_cluster(pos, size).tolist() == want
    assert pl.ops.grid_cluster(pos, size, torch.tensor([-1.0, -1.0]), torch.tensor([4.0, 4.0])).tolist() == [
        1 + 6 * 0, 3 + 6 * 0, 1 + 6 * 1, 4 + 6 * 2]


def test_graclus_is_a_maximal_matching_with_min_ids():
    g = torch.Generator().manual_seed(0)
    n = 40
    row, col = torch.randint(0, n, (2, 200), generator=g)
    keep = row != col
    row, col = torch.cat([row[keep], col[keep]]), torch.cat([col[keep], row[keep]])  # symmetric
    perm = torch.argsort(row * n + col)
    row, col = row[perm], col[perm]
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
    edges = set(zip(row.tolist(), col.tolist()))
    for weight in (None, torch.rand(row.numel(), generator=g)):
        cl = pl.ops.graclus_cluster(rowptr, col, weight).tolist()
        groups = {}
        for u, c in enumerate(cl):
            groups.setdefault(c, []).append(u)
        for c, members in groups.items():
            assert len(members) <= 2 and c == min(members)
            if len(members) == 2:
                assert tuple(members) in edges
        single = {m[0] for m in groups.values() if len(m) == 1}
        assert not any(u in single and v in single for u, v in edges)  # greedy matching is maximal


def _pyg_lib_cpu_walk_oracle(rowptr, col, seed, L):
    """pyg-lib 0.8's CPU walk as its C++ reads (one engine): 128-word int64 prefetches read last to first,
    16 / 32 / 64-bit chunks low bits first, ``chunk % deg``."""
    rp, cl = rowptr.tolist(), col.tolist()
    st = {"words": [], "size": 0, "bits": 0}

    def refill():
        st["words"] = [w % 2**64 for w in torch.randint(-(2**63), 2**63 - 1, (128,)).tolist()]
        st["size"], st["bits"] = 127, 64

    refill()
    out = []
    for v in seed.tolist():
        walk = [v]
        for _ in range(L):
            d = rp[v + 1] - rp[v]
            if d:
                need = 16 if d < 2**16 else 32
                if st["bits"] < need:
                    if st["size"]:
                        st["size"], st["bits"] = st["size"] - 1, 64
                    else:
                        refill()
                w = st["words"][st["size"]]
                v = cl[rp[v] + (w & ((1 << need) - 1)) % d]
                st["words"][st["size"]] = w >> need
                st["bits"] -= need
            walk.append(v)
        out.append(walk)
    return out


@pytest.mark.parametrize("n_seeds,sinks", [(5, False), (300, True), (700, False), (2500, True)])
def test_cpu_random_walk_is_pyg_lib_cpu_walk_draw_for_draw(n_seeds, sinks):
    g = torch.Generator().manual_seed(n_seeds)
    n = 50
    deg = torch.randint(0 if sinks else 1, 6, (n,), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(deg, 0)])
    col = torch.randint(0, n, (int(deg.sum()),), generator=g)
    seed = torch.randint(0, n, (n_seeds,), generator=g)
    torch.manual_seed(5)
    got = pl.sampler.random_walk(rowptr, col, seed, 7)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert got.tolist() == _pyg_lib_cpu_walk_oracle(rowptr, col, seed, 7)
    assert torch.equal(torch.rand(3), after)  # the generator advanced exactly as pyg-lib advances it
    assert pl.sampler.random_walk(rowptr.int(), col.int(), seed.int(), 2).dtype == torch.int32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_random_walk_is_pyg_lib_cuda_walk():
    rowptr = torch.tensor([0, 2, 3, 3, 5], device="cuda")
    col = torch.tensor([1, 3, 0, 0, 1], device="cuda")  # node 2 has no out-edges
    seed = torch.tensor([0, 1, 2, 3, 0], device="cuda")
    torch.manual_seed(11)
    got = pl.sampler.random_walk(rowptr, col, seed, 6).cpu()
    torch.manual_seed(11)
    u = torch.rand(6, 5, device="cuda").cpu()  # pyg-lib's draw: (walk_length, num_seeds), float32
    rowptr, col = rowptr.cpu(), col.cpu()
    want = []
    for i, v in enumerate(seed.tolist()):
        walk = [v]
        for j in range(6):
            deg = int(rowptr[v + 1] - rowptr[v])
            if deg:
                v = int(col[int(rowptr[v]) + int(u[j, i] * np.float32(deg))])
            walk.append(v)
        want.append(walk)
    assert got.tolist() == want


@pytest.mark.parametrize("p", [1.0, 0.5])  # pyg-lib's CPU walk, and node2vec's
@pytest.mark.parametrize("walk_length", [2**40, 2**62])
def test_random_walk_too_long_is_named_before_allocating(p, walk_length):
    rowptr, col, seed = torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0, 1, 1])
    want = rf"random_walk: walk_length must be at most \d+ for 3 start node\(s\) .* got {walk_length}$"
    with pytest.raises(RuntimeError, match=want):
        torch.ops.pyg.random_walk(rowptr, col, seed, walk_length, p, 1.0)
    with pytest.raises(RuntimeError, match=want):
        pl.sampler.random_walk(rowptr, col, seed, walk_length, p, 1.0)


def test_grid_cluster_names_non_finite_points():
    pos = torch.rand(5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pos[2, 0] = float("nan")
    want = r"grid_cluster: pos must be finite, got 1 of 5 points with NaN or inf coordinates \(the first: pos\[2\]"
    with pytest.raises(ValueError, match=want):
        torch.ops.pyg.grid_cluster(pos, torch.full((2,), 0.1, dtype=torch.float64), None, None)
    with pytest.raises(ValueError, match=want):
        pl.ops.grid_cluster(pos, torch.full((2,), 0.1, dtype=torch.float64))


def test_random_walk_node2vec_steps_along_edges():
    rowptr = torch.tensor([0, 2, 4, 6])
    col = torch.tensor([1, 2, 0, 2, 0, 1])
    walks = torch.ops.pyg.random_walk(rowptr, col, torch.arange(3).repeat(20), 8, 0.5, 4.0)
    edges = {(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    assert all((a, b) in edges for w in walks.tolist() for a, b in zip(w, w[1:]))


X = torch.randn(6, 3)
P = torch.tensor([0, 3, 6])


@pytest.mark.parametrize("call,exc,name", [
    (lambda: torch.ops.pyg.knn(X, X, P, P, 0, False, 1), ValueError, "k"),
    (lambda: torch.ops.pyg.knn(X, X[:, :2], None, None, 2, False, 1), ValueError, "feature dimension"),
    (lambda: torch.ops.pyg.knn(X, X, torch.tensor([0, 3, 5]), P, 2, False, 1), ValueError, "ptr_x"),
    (lambda: torch.ops.pyg.knn(X, X, torch.tensor([1, 6]), torch.tensor([0, 6]), 2, False, 1), ValueError, "ptr_x"),
    (lambda: torch.ops.pyg.knn(X, X, torch.tensor([0, 4, 3, 6]), torch.tensor([0, 2, 4, 6]), 2, False, 1),
     ValueError, "ptr_x"),
    (lambda: torch.ops.pyg.knn(X, X, P, None, 2, False, 1), ValueError, "ptr_x and ptr_y"),
    (lambda: torch.ops.pyg.knn(X, X, P.float(), P, 2, False, 1), ValueError, "ptr_x"),
    (lambda: torch.ops.pyg.knn(X[0], X, None, None, 2, False, 1), ValueError, "x"),
    (lambda: torch.ops.pyg.knn(X.long(), X.long(), None, None, 2, False, 1), TypeError, "x"),
    (lambda: torch.ops.pyg.radius(X, X, P, P, 0.0, 4, 1, False), ValueError, "r"),
    (lambda: torch.ops.pyg.radius(X, X, P, P, -1.0, 4, 1, False), ValueError, "r"),
    (lambda: torch.ops.pyg.radius(X, X, P, P, float("nan"), 4, 1, False), ValueError, "r"),
    (lambda: torch.ops.pyg.radius(X, X, P, P, 1.0, 0, 1, False), ValueError, "max_num_neighbors"),
    (lambda: torch.ops.pyg.radius(X, X[:, :1], P, P, 1.0, 4, 1, False), ValueError, "feature dimension"),
    (lambda: torch.ops.pyg.nearest(X, X[:, :2], None, None), ValueError, "feature dimension"),
    (lambda: torch.ops.pyg.nearest(X, X, P, torch.tensor([0, 6])), ValueError, "ptr_x and ptr_y"),
    (lambda: torch.ops.pyg.fps(X, P, 0.0, False), ValueError, "ratio"),
    (lambda: torch.ops.pyg.fps(X, P, float("nan"), False), ValueError, "ratio"),
    (lambda: torch.ops.pyg.fps(X, torch.tensor([0, 7]), 0.5, False), ValueError, "ptr"),
    (lambda: torch.ops.pyg.grid_cluster(X, torch.tensor([1.0, 1.0]), None, None), ValueError, "size"),
    (lambda: torch.ops.pyg.grid_cluster(X, torch.ones(3), torch.zeros(2), None), ValueError, "start"),
    (lambda: torch.ops.pyg.grid_cluster(X, torch.zeros(3), None, None), ValueError, "size"),
    (lambda: torch.ops.pyg.graclus_cluster(torch.tensor([0, 1, 5]), torch.tensor([1, 0]), None), ValueError,
     "rowptr"),
    (lambda: torch.ops.pyg.graclus_cluster(torch.tensor([0, 1, 2]), torch.tensor([1, 7]), None), ValueError, "col"),
    (lambda: torch.ops.pyg.random_walk(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([5]), 3, 1.0,
                                       1.0), ValueError, "start"),
    (lambda: torch.ops.pyg.random_walk(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0]), -1, 1.0,
                                       1.0), ValueError, "walk_length"),
    (lambda: torch.ops.pyg.random_walk(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0]).int(), 2,
                                       1.0, 1.0), TypeError, "same dtype"),
    (lambda: torch.ops.pyg.random_walk(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0]), 2, 0.0,
                                       1.0), ValueError, "p and q"),
])
def test_bad_input_gets_named_errors(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_empty_inputs_give_empty_outputs():
    e = torch.empty(0, 3)
    assert torch.ops.pyg.knn(e, X, None, None, 2, False, 1).shape == (2, 0)
    assert torch.ops.pyg.radius(X, e, None, None, 1.0, 4, 1, False).shape == (2, 0)
    assert torch.ops.pyg.nearest(e, X, None, None).shape == (0,)
    assert torch.ops.pyg.fps(e, torch.tensor([0, 0]), 0.5, True).shape == (0,)


def test_torch_compile_traces_the_ops_through_their_fake_kernels():
    from torch._dynamo.testing import CompileCounter

    def f(x, ptr):
        ei = torch.ops.pyg.knn(x, x, ptr, ptr, 3, False, 1)
        return x[ei[1]].sum() + torch.ops.pyg.nearest(x, x, ptr, ptr).sum()

    x, ptr = _clouds([8, 5], dtype=torch.float32)
    cnt = CompileCounter()
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend=cnt)(x, ptr), f(x, ptr))
    assert cnt.frame_count >= 1
    for op, args in ((torch.ops.pyg.nearest.default, (x, x, ptr, ptr)),
                     (torch.ops.pyg.grid_cluster.default, (x, torch.ones(3), None, None)),
                     (torch.ops.pyg.random_walk.default, (torch.tensor([0, 1, 2]), torch.tensor([1, 0]),
                                                           torch.tensor([0, 1]), 3, 1.0, 1.0))):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))


@pytest.fixture
def served():
    shims.enable_shims()
    try:
        import pyg_lib

        if not getattr(pyg_lib, "__pcgeom_shim__", None):
            pytest.skip("a real pyg-lib is installed")
        yield pyg_lib
    finally:
        shims.disable_shims()


def test_pyg_probe_sees_exactly_what_is_served(served):
    pyg_lib = served
    assert pyg_lib.__version__ == "0.8.0" and pyg_lib.cuda_version() == -1
    probed = ["grouped_matmul", "segment_matmul", "sampled_add", "spline_basis", "grid_cluster", "graclus_cluster",
              "fps", "knn", "radius", "nearest", "softmax_csr", "index_sort"]
    assert [n for n in probed if hasattr(pyg_lib.ops, n)] == ["grid_cluster", "graclus_cluster", "fps", "knn",
                                                               "radius", "nearest"]
    assert pl.ops.SERVED_OPTIONAL == ()
    assert not hasattr(pyg_lib, "partition")
    params = inspect.signature(pyg_lib.sampler.neighbor_sample).parameters
    assert list(params)[:4] == ["rowptr", "col", "seed", "num_neighbors"]
    assert "edge_time" in params and "edge_weight" in params
    for cls in ("CPUHashMap", "CUDAHashMap"):
        with pytest.raises(Exception):
            getattr(torch.classes.pyg, cls)
    assert shims.shim_status()["pyg_lib"]["served_by"] == "shim"


def test_neighbor_sample_without_torch_sparse_raises_pygs_import_error(served):
    try:
        import torch_sparse  # noqa: F401

        pytest.skip("torch_sparse is installed: the call is handed to it")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="requires either 'pyg-lib' or 'torch-sparse'"):
        served.sampler.neighbor_sample(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0]), [1])
    with pytest.raises(ImportError, match="torch-sparse"):
        torch.ops.pyg.hetero_neighbor_sample(["a"], [("a", "to", "a")], {"a__to__a": torch.tensor([0, 0])},
                                             {"a__to__a": torch.tensor([], dtype=torch.int64)},
                                             {"a": torch.tensor([0])}, {"a__to__a": [1]})


def test_ops_are_defined_once_and_not_where_a_real_pyg_lib_is_installed(tmp_path, monkeypatch):
    assert set(_ops.registered_ops()) == set(_ops.SCHEMAS)
    assert _ops.register_ops() == []  # already defined in this process
    (tmp_path / "pyg_lib").mkdir()
    (tmp_path / "pyg_lib" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not _ops.real_pyg_lib_installed()  # a folder with the name only is no install
    (tmp_path / "pyg_lib" / "libpyg.so").write_bytes(b"")
    assert _ops.real_pyg_lib_installed()
    monkeypatch.setattr(_ops, "_has_op", lambda name: False)  # as in a fresh process
    assert _ops.register_ops() == []  # the real one defines them when it is imported


@pytest.mark.slow
def test_a_real_pyg_lib_wins_over_the_stand_in(tmp_path):
    pkg = tmp_path / "pyg_lib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    (pkg / "libpyg.so").write_bytes(b"")
    code = textwrap.dedent("""
        import torch, pcgeom.compat
        pcgeom.compat.enable_shims()
        import pyg_lib
        assert pyg_lib.REAL and not hasattr(pyg_lib, '__pcgeom_shim__')
        import pcgeom.compat.pyg_lib as pl
        assert pl._ops.registered_ops() == [], pl._ops.registered_ops()
        try:
            torch.ops.pyg.knn
        except (AttributeError, RuntimeError):
            print('ok')
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_cpu_random_walk_with_a_hub_of_degree_2_16_uses_wider_chunks():
    # node 0 has 70000 out-edges (32-bit chunks), the others 1-3 (16-bit): the kernel's loop, mixed widths
    hub = torch.arange(70000) % 5 + 1
    rowptr = torch.tensor([0, 70000, 70001, 70003, 70004, 70006, 70006])
    col = torch.cat([hub, torch.tensor([0, 0, 4, 2, 0, 5])])
    seed = torch.tensor([0, 1, 2, 3, 4, 5, 0, 3])
    torch.manual_seed(2)
    got = pl.sampler.random_walk(rowptr, col, seed, 9)
    after = torch.rand(2)
    torch.manual_seed(2)
    assert got.tolist() == _pyg_lib_cpu_walk_oracle(rowptr, col, seed, 9)
    assert torch.equal(torch.rand(2), after)


@pytest.mark.parametrize("n,sinks", [(30, 10), (400, 1), (400, 0)])
def test_cpu_random_walk_across_correction_windows(n, sinks):
    # many nodes without out-edges (walked one by one) or few (speculative passes, thousands of seeds each)
    g = torch.Generator().manual_seed(9)
    deg = torch.randint(1, 3, (n,), generator=g)
    deg[torch.randperm(n, generator=g)[:sinks]] = 0
    rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(deg, 0)])
    col = torch.randint(0, n, (int(deg.sum()),), generator=g)
    seed = torch.randint(0, n, (9000,), generator=g)
    torch.manual_seed(1)
    got = pl.sampler.random_walk(rowptr, col, seed, 3)
    torch.manual_seed(1)
    assert got.tolist() == _pyg_lib_cpu_walk_oracle(rowptr, col, seed, 3)


def test_neighbor_sample_hands_the_call_to_torch_sparse(monkeypatch):
    import types

    calls = {}

    def homo(colptr, row, seed, num_neighbors, replace, directed):
        calls["homo"] = (colptr, row, seed, num_neighbors, replace, directed)
        return "node", "row", "col", "edge"

    def hetero(node_types, edge_types, colptr, row, seed, num_neighbors, num_hops, replace, directed):
        calls["hetero"] = (node_types, edge_types, num_neighbors, num_hops, replace, directed)
        return {"a": "node"}, {"a__to__a": "row"}, {"a__to__a": "col"}, {"a__to__a": "edge"}

    monkeypatch.setitem(sys.modules, "torch_sparse", types.ModuleType("torch_sparse"))
    monkeypatch.setattr(torch.ops, "torch_sparse", types.SimpleNamespace(neighbor_sample=homo,
                                                                         hetero_neighbor_sample=hetero),
                        raising=False)
    rowptr, col, seed = torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0], dtype=torch.int32)
    # PyG's positional call (csc=True, replace, directed, disjoint, temporal_strategy, return_edge_id)
    out = _ops.op_neighbor_sample(rowptr, col, seed, [2, 1], None, None, None, None, True, False, True, False,
                                  "uniform", True)
    assert out == ("row", "col", "node", "edge")  # pyg-lib's order: row, col, node, edge_id
    assert calls["homo"][3:] == ([2, 1], False, True) and calls["homo"][2].dtype == torch.int64
    with pytest.raises(ImportError, match="disjoint"):
        _ops.op_neighbor_sample(rowptr, col, seed, [2], disjoint=True)
    with pytest.raises(ImportError, match="temporal"):
        _ops.op_neighbor_sample(rowptr, col, seed, [2], node_time=torch.zeros(2))
    with pytest.raises(ImportError, match="edge_weight"):
        _ops.op_neighbor_sample(rowptr, col, seed, [2], edge_weight=torch.ones(2))
    out = _ops.op_hetero_neighbor_sample(["a"], [("a", "to", "a")], {"a__to__a": rowptr}, {"a__to__a": col},
                                         {"a": seed}, {"a__to__a": [3, 2, 1]}, None, None, None, None, True, True,
                                         False)
    assert out == ({"a__to__a": "row"}, {"a__to__a": "col"}, {"a": "node"}, {"a__to__a": "edge"})
    assert calls["hetero"] == (["a"], [("a", "to", "a")], {"a__to__a": [3, 2, 1]}, 3, True, False)


@pytest.mark.slow
def test_pyg_2_8_probe_through_the_stand_in():
    target = os.path.join(sys.prefix, "pcgeom-test-pyg", "2.8.1")  # installed once by tests/test_pyg.py
    if not os.path.isdir(os.path.join(target, "torch_geometric")):
        pytest.skip("PyG 2.8.1 is not installed for the tests (tests/test_pyg.py installs it)")
    code = textwrap.dedent("""
        import warnings, torch, pcgeom.compat
        pcgeom.compat.enable_shims()
        import torch_geometric.typing as t
        assert t.WITH_PYG_LIB and t.WITH_KNN and t.WITH_RADIUS and t.WITH_FPS and t.WITH_NEAREST
        assert t.WITH_GRID_CLUSTER and t.WITH_GRACLUS and t.WITH_EDGE_TIME_NEIGHBOR_SAMPLE
        assert not (t.WITH_SOFTMAX or t.WITH_INDEX_SORT or t.WITH_METIS or t.WITH_SEGMM or t.WITH_GMM
                    or t.WITH_SPLINE or t.WITH_SAMPLED_OP or t.WITH_CPU_HASH_MAP)
        from torch_geometric.nn import knn_graph
        x = torch.tensor([[0.0], [1.0], [3.0]])
        print(knn_graph(x, 1).tolist())
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([target, os.getcwd()]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[[1, 0, 1], [0, 1, 2]]"

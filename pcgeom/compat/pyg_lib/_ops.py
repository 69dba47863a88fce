"""``torch.ops.pyg.*``: pyg-lib 0.8.0's operators that PyG 2.8 calls, defined when no real pyg-lib is installed.

Each operator has pyg-lib's schema (``pyg_lib/csrc/ops/*.cpp``, ``csrc/sampler/*.cpp``)
and runs on the cores of the torch_cluster stand-in (one implementation, two
faces); every one checks its arguments first and answers bad input with a
ValueError / TypeError that names the argument.  Each has a fake kernel, so
``torch.compile`` traces PyG models that call it (a data-dependent edge count
is an unbacked symbolic size).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom.compat._installed import real_package_installed
from pcgeom.compat.pyg_lib._cpu_walk import cpu_uniform_walk
from pcgeom.compat.torch_cluster._common import check_rowptr_col, check_walk_size
from pcgeom.compat.torch_cluster.graclus import graclus_op
from pcgeom.compat.torch_cluster.grid import grid_cluster as tc_grid_cluster
from pcgeom.compat.torch_cluster.knn import knn_offsets
from pcgeom.compat.torch_cluster.nearest import nearest_offsets
from pcgeom.compat.torch_cluster.radius import radius_offsets
from pcgeom.compat.torch_cluster.rw import random_walk_op
from pcgeom.ops import farthest_point_sample

__all__ = ["SCHEMAS", "register_ops", "registered_ops", "real_pyg_lib_installed"]


# ---------------------------------------------------------------------------
# Argument checks (pcgeom's named-argument errors; pyg-lib's own are TORCH_CHECKs).


def _points(fn: str, name: str, t, flatten: bool) -> Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a tensor, got {type(t).__name__}")
    if flatten:
        if t.dim() == 0:
            raise ValueError(f"{fn}: {name} must have at least 1 dimension, got a 0-d tensor")
        t = t.reshape(t.shape[0], math.prod(t.shape[1:]))  # not -1: that is ambiguous for 0 points
    elif t.dim() != 2:
        raise ValueError(f"{fn}: {name} must be a 2-D tensor (N, F), got shape {V.shape_str(t)}")
    if not t.is_floating_point():
        raise TypeError(f"{fn}: {name} must be a floating-point tensor, got {t.dtype}")
    return t


def _pair(fn: str, x: Tensor, y: Tensor) -> None:
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"{fn}: x and y must have the same feature dimension, got x {V.shape_str(x)} and "
                         f"y {V.shape_str(y)}")
    if x.device != y.device:
        raise ValueError(f"{fn}: x and y must be on the same device, got {x.device} and {y.device}")


def _ptr(fn: str, name: str, ptr, n: int, device) -> Tensor:
    """pyg-lib's CSR ``ptr (B + 1,)`` (checked: from 0 to ``n``, non-decreasing) as int64."""
    if not isinstance(ptr, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be an integer tensor of CSR boundaries [0, ..., {n}], "
                        f"got {type(ptr).__name__}")
    if ptr.dtype not in V.INT_DTYPES or ptr.dim() != 1 or ptr.shape[0] < 1:
        raise ValueError(f"{fn}: {name} must be a 1-D integer tensor of CSR boundaries [0, ..., {n}], got "
                         f"{ptr.dtype} of shape {V.shape_str(ptr)}")
    if ptr.device != device:
        raise ValueError(f"{fn}: {name} must be on the device of the points ({device}), got {ptr.device}")
    ptr = ptr.to(torch.int64)
    first, last = int(ptr[0]), int(ptr[-1])
    if first != 0 or last != n or bool((torch.diff(ptr) < 0).any()):
        raise ValueError(f"{fn}: {name} must be non-decreasing CSR boundaries from 0 to {n} (the number of "
                         f"points), got {name}[0]={first}, {name}[-1]={last}")
    return ptr


def _ptr_pair(fn: str, ptr_x, ptr_y, nx: int, ny: int, device) -> Tuple[Tensor, Tensor]:
    """Both ``ptr``s as end offsets ``(B,)``; a missing one is one cloud, as pyg-lib's kernels do."""
    px = _ptr(fn, "ptr_x", ptr_x, nx, device) if ptr_x is not None else torch.tensor([0, nx], device=device)
    py = _ptr(fn, "ptr_y", ptr_y, ny, device) if ptr_y is not None else torch.tensor([0, ny], device=device)
    if px.numel() != py.numel():
        raise ValueError(f"{fn}: ptr_x and ptr_y must describe the same number of clouds, got "
                         f"{px.numel() - 1} and {py.numel() - 1}")
    return px[1:], py[1:]


def _index(fn: str, name: str, t, device=None) -> Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a 1-D integer tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64) or t.dim() != 1:
        raise ValueError(f"{fn}: {name} must be a 1-D int32 / int64 tensor, got {t.dtype} of shape {V.shape_str(t)}")
    if device is not None and t.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {t.device}")
    return t


# ---------------------------------------------------------------------------
# The operators (Python defaults = the schema defaults: the dispatcher drops trailing arguments equal to them).


def _empty_edges(device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.int64, device=device)


def op_knn(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None, k: int = 1,
           cosine: bool = False, num_workers: int = 1) -> Tensor:
    fn = "knn"
    x, y = _points(fn, "x", x, False), _points(fn, "y", y, False)
    _pair(fn, x, y)
    k = V.check_int(fn, "k", k, 1)
    xo, yo = _ptr_pair(fn, ptr_x, ptr_y, x.shape[0], y.shape[0], x.device)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return _empty_edges(x.device)
    return knn_offsets(x, y, k, xo, yo, bool(cosine))


def op_radius(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None, r: float = 1.0,
              max_num_neighbors: int = 32, num_workers: int = 1, ignore_same_index: bool = False) -> Tensor:
    fn = "radius"
    x, y = _points(fn, "x", x, False), _points(fn, "y", y, False)
    _pair(fn, x, y)
    r = V.check_float(fn, "r", r)
    if not r > 0:
        raise ValueError(f"{fn}: r must be > 0, got {r}")
    cap = V.check_int(fn, "max_num_neighbors", max_num_neighbors, 1)
    xo, yo = _ptr_pair(fn, ptr_x, ptr_y, x.shape[0], y.shape[0], x.device)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return _empty_edges(x.device)
    # ``order="index"``: a full ball keeps its first ``cap`` points in index order, as pyg-lib's CUDA kernel.
    return radius_offsets(x, x if y is x else y, r, xo, yo, cap, bool(ignore_same_index), "index")


def op_nearest(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None) -> Tensor:
    fn = "nearest"
    x, y = _points(fn, "x", x, True), _points(fn, "y", y, True)
    _pair(fn, x, y)
    xo, yo = _ptr_pair(fn, ptr_x, ptr_y, x.shape[0], y.shape[0], x.device)
    if x.shape[0] == 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    return nearest_offsets(x, y, xo, yo)


def op_fps(src: Tensor, ptr: Tensor, ratio: float = 0.5, random_start: bool = True) -> Tensor:
    fn = "fps"
    src = _points(fn, "src", src, True)
    ratio = V.check_float(fn, "ratio", ratio)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"{fn}: ratio must be in (0, 1], got {ratio}")
    p = _ptr(fn, "ptr", ptr, src.shape[0], src.device)
    deg = torch.diff(p)
    # pyg-lib: ceil(float32(deg) * ratio) samples per cloud.
    counts = torch.ceil(deg.to(torch.float32) * ratio).to(torch.int64)
    if random_start:
        # pyg-lib's CUDA kernel: rand(B) in src's dtype on src's device, times float32(deg), truncated.
        u = torch.rand(deg.shape[0], dtype=src.dtype, device=src.device)
        start = (u * deg.to(torch.float32)).to(torch.int64).clamp_max((deg - 1).clamp_min(0))
    else:
        start = torch.zeros_like(deg)
    if src.shape[0] == 0 or deg.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=src.device)
    x = src if src.dtype not in (torch.float16, torch.bfloat16) else src.float()
    return farthest_point_sample(x.contiguous(), counts, offsets=p[1:], start_index=start)


def op_grid_cluster(pos: Tensor, size: Tensor, start: Optional[Tensor] = None,
                    end: Optional[Tensor] = None) -> Tensor:
    fn = "grid_cluster"
    pos = _points(fn, "pos", pos, True)
    D = pos.shape[1]
    for name, t in (("size", size), ("start", start), ("end", end)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a tensor of {D} entries, got {type(t).__name__}")
        if t.numel() != D:
            raise ValueError(f"{fn}: {name} must have one entry per dimension of pos ({D}), got shape "
                             f"{V.shape_str(t)}")
        if t.device != pos.device:
            raise ValueError(f"{fn}: {name} must be on the device of pos ({pos.device}), got {t.device}")
    if pos.shape[0] == 0:
        return torch.empty(0, dtype=torch.int64, device=pos.device)
    return tc_grid_cluster(pos, size.reshape(D), None if start is None else start.reshape(D),
                           None if end is None else end.reshape(D))


def op_graclus_cluster(rowptr: Tensor, col: Tensor, weight: Optional[Tensor] = None) -> Tensor:
    fn = "graclus_cluster"
    rowptr = _index(fn, "rowptr", rowptr)
    col = _index(fn, "col", col, rowptr.device)
    out = graclus_op(rowptr.to(torch.int64), col.to(torch.int64), weight)
    return out.to(rowptr.dtype)


def _check_walk_graph(fn: str, rowptr: Tensor, col: Tensor, seed: Tensor) -> int:
    """The checks random_walk_op makes (CSR graph, seeds in range); returns the number of nodes."""
    n = check_rowptr_col(fn, rowptr.to(torch.int64), col.to(torch.int64))
    if seed.numel() and (int(seed.min()) < 0 or int(seed.max()) >= n):
        raise ValueError(f"{fn}: start values must be in [0, {n}) (num_nodes), got "
                         f"[{int(seed.min())}, {int(seed.max())}]")
    return n


def op_random_walk(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int, p: float, q: float) -> Tensor:
    fn = "random_walk"
    rowptr = _index(fn, "rowptr", rowptr)
    col = _index(fn, "col", col, rowptr.device)
    seed = _index(fn, "seed", seed, rowptr.device)
    if not (rowptr.dtype == col.dtype == seed.dtype):
        raise TypeError(f"{fn}: rowptr, col and seed must have the same dtype, got {rowptr.dtype}, {col.dtype} "
                        f"and {seed.dtype}")
    walk_length = V.check_int(fn, "walk_length", walk_length, 0)
    p, q = V.check_float(fn, "p", p), V.check_float(fn, "q", q)
    check_walk_size(fn, seed.numel(), walk_length, seed.device)
    if p == 1.0 and q == 1.0 and rowptr.device.type == "cpu":
        _check_walk_graph(fn, rowptr, col, seed)
        # pyg-lib's CPU kernel, draw for draw (see _cpu_walk).
        return cpu_uniform_walk(rowptr.to(torch.int64), col.to(torch.int64), seed.to(torch.int64),
                                walk_length).to(rowptr.dtype)
    # p == q == 1 elsewhere: pyg-lib's CUDA kernel's walk (torch.rand(L, S), trunc(u * deg));
    # otherwise node2vec's biased walk on every device (pyg-lib 0.8 itself refuses p, q != 1).
    nodes, _ = random_walk_op(rowptr.to(torch.int64), col.to(torch.int64), seed.to(torch.int64), walk_length, p, q,
                              step_major=True)
    return nodes.to(rowptr.dtype)


# -- neighbour sampling: handed to torch_sparse where it is installed (see pcgeom.compat.pyg_lib.sampler).

_SAMPLING_HELP = ("install 'torch-sparse' (pip install torch-sparse) for PyG's neighbour loaders, or the real "
                  "'pyg-lib' for disjoint, temporal and weighted sampling; pcgeom's pyg_lib stand-in serves "
                  "point-cloud ops only")


def torch_sparse_sampling(fn: str) -> None:
    """Raises the ImportError PyG raises when nothing can sample, unless torch_sparse's ops are loaded."""
    try:
        import torch_sparse  # noqa: F401  (loads torch.ops.torch_sparse.*)
    except ImportError:
        raise ImportError(f"'{fn}' requires either 'pyg-lib' or 'torch-sparse': {_SAMPLING_HELP}") from None
    try:
        getattr(torch.ops.torch_sparse, fn)
    except (AttributeError, RuntimeError):
        raise ImportError(f"'{fn}' requires either 'pyg-lib' or 'torch-sparse' (this torch_sparse has no "
                          f"torch.ops.torch_sparse.{fn}): {_SAMPLING_HELP}") from None


def _unsupported(fn: str, what: str) -> None:
    raise ImportError(f"'{fn}' with {what} requires the real 'pyg-lib' (torch-sparse cannot sample it): "
                      f"{_SAMPLING_HELP}")


def op_neighbor_sample(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: List[int],
                       node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                       seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None, csc: bool = False,
                       replace: bool = False, directed: bool = True, disjoint: bool = False,
                       temporal_strategy: str = "uniform", return_edge_id: bool = True):
    fn = "neighbor_sample"
    torch_sparse_sampling(fn)
    if disjoint:
        _unsupported(fn, "disjoint=True")
    if node_time is not None or edge_time is not None or seed_time is not None:
        _unsupported(fn, "node_time / edge_time / seed_time (temporal sampling)")
    if edge_weight is not None:
        _unsupported(fn, "edge_weight")
    node, row, col_out, edge = torch.ops.torch_sparse.neighbor_sample(
        rowptr, col, seed.to(torch.int64), list(num_neighbors), bool(replace), bool(directed))
    # Four outputs (not pyg-lib's six): PyG then leaves num_sampled_nodes/edges None, as on its torch-sparse path.
    return row, col_out, node, edge if return_edge_id else None


def op_hetero_neighbor_sample(node_types: List[str], edge_types: List[Tuple[str, str, str]],
                              rowptr_dict: Dict[str, Tensor], col_dict: Dict[str, Tensor],
                              seed_dict: Dict[str, Tensor], num_neighbors_dict: Dict[str, List[int]],
                              node_time_dict=None, edge_time_dict=None, seed_time_dict=None, edge_weight_dict=None,
                              csc: bool = False, replace: bool = False, directed: bool = True,
                              disjoint: bool = False, temporal_strategy: str = "uniform",
                              return_edge_id: bool = True):
    fn = "hetero_neighbor_sample"
    torch_sparse_sampling(fn)
    if disjoint:
        _unsupported(fn, "disjoint=True")
    if node_time_dict is not None or edge_time_dict is not None or seed_time_dict is not None:
        _unsupported(fn, "node_time / edge_time / seed_time (temporal sampling)")
    if edge_weight_dict is not None:
        _unsupported(fn, "edge_weight")
    num_hops = max((len(v) for v in num_neighbors_dict.values()), default=0)
    node, row, col, edge = torch.ops.torch_sparse.hetero_neighbor_sample(
        list(node_types), list(edge_types), dict(rowptr_dict), dict(col_dict),
        {k: v.to(torch.int64) for k, v in seed_dict.items()},
        {k: list(v) for k, v in num_neighbors_dict.items()}, num_hops, bool(replace), bool(directed))
    return row, col, node, edge if return_edge_id else None


# ---------------------------------------------------------------------------
# Fake kernels (shapes only) for torch.compile.


def _fake_edges(x: Tensor, *args) -> Tensor:
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty((2, n), dtype=torch.int64)


def _fake_knn(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None, k: int = 1,
              cosine: bool = False, num_workers: int = 1) -> Tensor:
    """One cloud (no ``ptr``): exactly ``M * min(k, N)`` edges (never a ``-1`` slot in one cloud), a size known
    from the shapes, so a traced or exported model (PyG 2.8's ``DynamicEdgeConv`` with ``batch=None``) keeps
    it symbolic instead of data-dependent -- as the torch_cluster stand-in's one-cloud knn does for PyG 2.5-2.7."""
    if ptr_x is None and ptr_y is None:
        return x.new_empty((2, y.shape[0] * torch.sym_min(k, x.shape[0])), dtype=torch.int64)
    return _fake_edges(x)


def _fake_fps(src: Tensor, ptr: Tensor, ratio: float = 0.5, random_start: bool = True) -> Tensor:
    n = torch.library.get_ctx().new_dynamic_size()
    return src.new_empty((n,), dtype=torch.int64)


def _fake_nearest(x: Tensor, y: Tensor, ptr_x=None, ptr_y=None) -> Tensor:
    return x.new_empty((x.shape[0],), dtype=torch.int64)


def _fake_grid(pos: Tensor, size: Tensor, start=None, end=None) -> Tensor:
    return pos.new_empty((pos.shape[0],), dtype=torch.int64)


def _fake_graclus(rowptr: Tensor, col: Tensor, weight=None) -> Tensor:
    return rowptr.new_empty((rowptr.shape[0] - 1,))


def _fake_walk(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int, p: float, q: float) -> Tensor:
    return rowptr.new_empty((seed.shape[0], walk_length + 1))


# name -> (pyg-lib 0.8.0's schema, implementation, fake kernel or None)
SCHEMAS = {
    "fps": ("fps(Tensor src, Tensor ptr, float ratio=0.5, bool random_start=True) -> Tensor", op_fps, _fake_fps),
    "knn": ("knn(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, int k=1, bool cosine=False, "
            "int num_workers=1) -> Tensor", op_knn, _fake_knn),
    "radius": ("radius(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, float r=1.0, "
               "int max_num_neighbors=32, int num_workers=1, bool ignore_same_index=False) -> Tensor",
               op_radius, _fake_edges),
    "nearest": ("nearest(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None) -> Tensor", op_nearest,
                _fake_nearest),
    "grid_cluster": ("grid_cluster(Tensor pos, Tensor size, Tensor? start=None, Tensor? end=None) -> Tensor",
                     op_grid_cluster, _fake_grid),
    "graclus_cluster": ("graclus_cluster(Tensor rowptr, Tensor col, Tensor? weight=None) -> Tensor",
                        op_graclus_cluster, _fake_graclus),
    "random_walk": ("random_walk(Tensor rowptr, Tensor col, Tensor seed, int walk_length, float p, float q) "
                    "-> Tensor", op_random_walk, _fake_walk),
    # Sampling: pyg-lib's arguments; four outputs (see op_neighbor_sample).
    "neighbor_sample": ("neighbor_sample(Tensor rowptr, Tensor col, Tensor seed, int[] num_neighbors, "
                        "Tensor? node_time=None, Tensor? edge_time=None, Tensor? seed_time=None, "
                        "Tensor? edge_weight=None, bool csc=False, bool replace=False, bool directed=True, "
                        "bool disjoint=False, str temporal_strategy='uniform', bool return_edge_id=True) "
                        "-> (Tensor, Tensor, Tensor, Tensor?)", op_neighbor_sample, None),
    "hetero_neighbor_sample": (
        "hetero_neighbor_sample(str[] node_types, (str, str, str)[] edge_types, Dict(str, Tensor) rowptr_dict, "
        "Dict(str, Tensor) col_dict, Dict(str, Tensor) seed_dict, Dict(str, int[]) num_neighbors_dict, "
        "Dict(str, Tensor)? node_time_dict=None, Dict(str, Tensor)? edge_time_dict=None, "
        "Dict(str, Tensor)? seed_time_dict=None, Dict(str, Tensor)? edge_weight_dict=None, bool csc=False, "
        "bool replace=False, bool directed=True, bool disjoint=False, str temporal_strategy='uniform', "
        "bool return_edge_id=True) -> (Dict(str, Tensor), Dict(str, Tensor), Dict(str, Tensor), "
        "Dict(str, Tensor)?)", op_hetero_neighbor_sample, None),
}

_LIB: Optional[torch.library.Library] = None  # kept alive: dropping it would unregister the ops
_REGISTERED: List[str] = []


def real_pyg_lib_installed() -> bool:
    """Whether a compiled pyg-lib (its ``libpyg`` library beside ``__init__.py``) is on ``sys.path``."""
    return real_package_installed("pyg_lib", "libpyg")


def _has_op(name: str) -> bool:
    try:
        getattr(torch.ops.pyg, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register_ops() -> List[str]:
    """Defines the missing ``torch.ops.pyg.*`` operators of :data:`SCHEMAS`; returns the names defined now.

    Nothing is defined when a real pyg-lib is installed (its library defines
    them when it is imported), and an operator that already exists (a second
    import of this module, another library) is left alone: never twice.
    """
    global _LIB
    if real_pyg_lib_installed():
        return []
    missing = [name for name in SCHEMAS if not _has_op(name)]
    if not missing:
        return []
    if _LIB is None:
        _LIB = torch.library.Library("pyg", "FRAGMENT")
    for name in missing:
        schema, fn, fake = SCHEMAS[name]
        _LIB.define(schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        if fake is not None:
            torch.library.register_fake(f"pyg::{name}", fake, lib=_LIB)
        _REGISTERED.append(name)
    return missing


def registered_ops() -> List[str]:
    """The ``torch.ops.pyg.*`` names this process got from pcgeom (empty under a real pyg-lib)."""
    return list(_REGISTERED)


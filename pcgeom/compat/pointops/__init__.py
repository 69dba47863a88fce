"""Stand-in for Pointcept's ``pointops`` (``libs/pointops``, Pointcept d74c646).

Served under the module name ``pointops`` once the shims are on (``pcgeom
compat enable`` or :func:`pcgeom.compat.enable_shims`), so Pointcept's Point
Transformer v1/v2, its evaluator hook and the Sonata / Concerto / MSC models
import and run unchanged, on CPU and GPU, with no compiled extension.  The
names, argument orders and layouts are the original's: packed ``(n, 3)``
coordinates, int cumulative **end** offsets ``(b,)`` (int32 as the wrappers
pass them; int64 accepted), **int32 global** indices.

What each function returns (where the original kernel is well defined, the
same numbers; the differences are listed below):

* ``knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None)`` ->
  ``(idx (m, nsample) int32, dist (m, nsample))``: the ``nsample`` nearest
  points of the query's cloud, **Euclidean** distances ascending, ``idx = -1``
  and ``dist = 1e5`` (the kernel's ``sqrt(1e10)``) where the cloud has fewer
  points.  ``new_xyz`` *or* ``new_offset`` None means a self-query (both are
  replaced, as the original does).  No gradient.
* ``ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None,
  new_offset=None)``: the points with ``d2 <= 1e-5`` or ``min_radius**2 <= d2
  < max_radius**2`` (float32 like the kernel), nearest first; more than
  ``nsample`` such points are subsampled with the kernel's stride
  (``int(float(cnt) / nsample * i)``); ``-1`` / ``1e5`` padding.
* ``random_ball_query(...)``: the same ball, scanning each cloud in a random
  order (``torch``'s global generator) and keeping the first ``nsample`` hits.
* ``farthest_point_sampling(xyz, offset, new_offset)`` -> ``idx (m,)`` int32:
  per cloud ``new_offset[b] - new_offset[b-1]`` samples, starting at the
  cloud's first point; once every remaining point is at distance 0 from the
  samples (all taken, or duplicates) it repeats the cloud's first point, as
  the kernel does.
* ``grouping(idx, feat, xyz, new_xyz=None, with_xyz=False)`` ->
  ``(m, nsample, [3 +] c)``: gathered features, zeros at ``idx = -1``; with
  ``with_xyz`` the coordinates relative to ``new_xyz`` first (zeros at -1).
  Differentiable w.r.t. ``feat``, ``xyz`` and ``new_xyz`` (pure torch in the
  original too).  ``grouping2(feat, idx)`` is the autograd-Function form.
* ``interpolation(xyz, new_xyz, feat, offset, new_offset, k=3)``: weights
  ``1/(d + 1e-8)`` normalised over the k nearest; exactly the original's pure
  torch code, so an ``idx = -1`` slot (a cloud with fewer than k points) reads
  Python's ``feat[-1]`` with the ``1e5`` distance's weight.
  ``interpolation2`` (the CUDA Function) gives such slots weight x 0 instead
  (the kernel reads out of bounds there).  Gradient w.r.t. the features only.
* ``subtraction(input1, input2, idx)``, ``aggregation(input, position,
  weight, idx)``, ``attention_relation_step(query, key, weight, index_target,
  index_refer)``, ``attention_fusion_step(weight, value, index_target,
  index_refer)``: the kernels' formulas, gradients where the original's
  backward gives them (``attention_relation_step`` gives none to ``weight``).
* ``query_and_group``, ``knn_query_and_group``, ``ball_query_and_group``,
  ``offset2batch`` (int64), ``batch2offset`` (int32): the original helpers,
  ``query_and_group``'s dilation included, without its Python loop over clouds.

Differences from the original, on purpose (the original is unstable or
broken there):

* ties (equal distances) go to the **lower index** in ``knn_query``,
  ``ball_query`` and ``farthest_point_sampling`` (the CUDA kernels break them
  by heap or reduction order);
* no caps: the kernels' fixed ``best_dist[128]`` (knn) and
  ``candi_dist[2048]`` (ball query) arrays overflow silently; pcgeom takes any
  ``nsample`` and any number of ball candidates (memory grows with them);
* ``knn_query`` has no ``1e10`` squared-distance cut-off (points farther than
  1e5 are found too);
* ``ball_query`` returns true distances on its subsample path (the kernel
  writes ``sqrt(index)`` there) and orders candidates by distance (the kernel
  heap-sorts an array that was never made a heap, a scrambled order);
* ``-1`` indices passed to ``grouping2`` / ``interpolation2`` /
  ``subtraction`` / ``aggregation`` contribute zeros (the kernels read out of
  bounds); indices outside ``[-1, n)`` and malformed offsets raise errors that
  name the argument instead of crashing;
* every op also takes float16/bfloat16/float64 (computed as pcgeom computes
  them), non-contiguous tensors, and CPU tensors; results are deterministic
  on CPU.

Example:
    >>> import torch
    >>> from pcgeom.compat import pointops
    >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [3, 0, 0], [0, 0, 0], [0, 2, 0]])
    >>> offset = torch.tensor([3, 5], dtype=torch.int32)
    >>> idx, dist = pointops.knn_query(3, xyz, offset)
    >>> idx.tolist()[3], dist.tolist()[3]
    ([3, 4, -1], [0.0, 2.0, 100000.0])
    >>> pointops.farthest_point_sampling(xyz, offset, torch.tensor([2, 3], dtype=torch.int32)).tolist()
    [0, 2, 3]
"""

from __future__ import annotations

from pcgeom.compat.pointops._common import PAD_DIST  # noqa: F401  (a module attribute before the split)
from pcgeom.compat.pointops.aggregation import aggregation
from pcgeom.compat.pointops.attention import attention_fusion_step, attention_relation_step
from pcgeom.compat.pointops.grouping import grouping, grouping2
from pcgeom.compat.pointops.interpolation import interpolation, interpolation2
from pcgeom.compat.pointops.query import ball_query, knn_query, random_ball_query
from pcgeom.compat.pointops.sampling import farthest_point_sampling
from pcgeom.compat.pointops.subtraction import subtraction
from pcgeom.compat.pointops.utils import ball_query_and_group, batch2offset, knn_query_and_group, offset2batch, query_and_group

__version__ = "1.0"

__all__ = [
    "aggregation",
    "attention_fusion_step",
    "attention_relation_step",
    "ball_query",
    "ball_query_and_group",
    "batch2offset",
    "farthest_point_sampling",
    "grouping",
    "grouping2",
    "interpolation",
    "interpolation2",
    "knn_query",
    "knn_query_and_group",
    "offset2batch",
    "query_and_group",
    "random_ball_query",
    "subtraction",
]

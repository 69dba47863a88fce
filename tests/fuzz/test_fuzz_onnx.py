"""Fuzz: exported ONNX files at the sizes outside their export example (issue #39, D2 / D3).

Every exportable op and composite is exported once, from an ordinary example
(B = 2, N >= 16), and then run in onnxruntime on the edges the example never
showed: N = 0, N = 1, N < k, B = 0, M = 0, ragged lengths down to 0, NaN and
+inf coordinates.  Against eager pcgeom on the same input:

* where eager answers, the file gives the same answer -- bit for bit (the
  translations keep the kernels' summation order; chamfer sums in index order),
  except ``interpolate_features``' blended features (a division and a weighted
  sum: float32 rounding);
* where eager raises ValueError, the file fails at run time with pcgeom's named
  check ("pcgeom check failed: ..."), never a crash inside a kernel or an answer.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("hypothesis")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
import pcgeom.compat.pyg_lib  # noqa: E402,F401  (torch.ops.pyg.*, before the first export reads the table)
import pcgeom.onnx as pxo  # noqa: E402
from tests.fuzz.strategies import fuzz, make_points  # noqa: E402

pytestmark = pytest.mark.slow  # one export per target (seconds each), then onnxruntime sessions


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        out = self.fn(*xs)
        return tuple(out) if isinstance(out, (tuple, list)) else out


def _tc_knn(x, y):
    from pcgeom.compat.torch_cluster import knn

    return knn(x, y, 5)


def _pyg_knn(x, y):
    return torch.ops.pyg.knn(x, y, None, None, 5, False, 1)


def _pointnet2_fps(p):
    from pcgeom.compat import pointnet2_ops

    return pointnet2_ops.furthest_point_sample(p, 4)


# name: (fn, input roles, exact?).  Roles: "P" points (B, N, 3), "Q" queries (B, M, 3), "F" features (B, N, 4),
# "L" lengths of P (B,), "I" indices into P (B, M, 3) in [-1, N), "X" one cloud (N, 3), "Y" one cloud (M, 3),
# "O" packed points (N_total, 3) with "C" its offsets (B,).
TARGETS = {
    "knn": (lambda q, p, lp: pcgeom.knn(q, p, 5, points_lengths=lp), "QPL", True),
    "ball_query_distance": (lambda q, p: pcgeom.ball_query(q, p, 0.4, 5), "QP", True),
    "ball_query_index": (lambda q, p: pcgeom.ball_query(q, p, 0.4, 5, order="index"), "QP", True),
    "knn_gather": (lambda f, i: pcgeom.knn_gather(f, i), "FI", True),
    "farthest_point_sample": (lambda p, lp: pcgeom.farthest_point_sample(p, 5, lengths=lp), "PL", True),
    "packed_knn": (lambda o, c: pcgeom.knn(o, o, 4, query_offsets=c, points_offsets=c), "OC", True),
    "packed_fps": (lambda o, c: pcgeom.farthest_point_sample(o, 4, offsets=c), "OC", True),
    "group_patches": (lambda p: pcgeom.group_patches(p, 4, 5, return_index=True), "P", True),
    "group_patches_pointnet2": (lambda p: pcgeom.group_patches(p, 4, 5, fps="pointnet2", return_index=True), "P",
                                True),
    "group_features": (lambda p, q, f: pcgeom.group_features(p, q, pcgeom.ball_query(q, p, 0.4, 5, order="index").idx,
                                                             f), "PQF", True),
    "interpolate_features": (lambda q, p, f: pcgeom.interpolate_features(q, p, f), "QPF", False),
    "chamfer_distance": (lambda q, p: pcgeom.chamfer_distance(q, p), "QP", True),
    "chamfer_distance_lengths": (lambda p, lp: pcgeom.chamfer_distance(p, p, x_lengths=lp, y_lengths=lp), "PL", True),
    "knn_graph": (lambda x: pcgeom.knn_graph(x, 3), "X", True),
    "radius_graph": (lambda x: pcgeom.radius_graph(x, 0.4), "X", True),
    "torch_cluster_knn": (_tc_knn, "XY", True),
    "pyg_lib_knn": (_pyg_knn, "XY", True),
    "pointnet2_ops_fps": (_pointnet2_fps, "P", True),
}

_RUNS: dict = {}


def _inputs(roles, B, N, M, lengths, kind, seed, offsets):
    g = torch.Generator().manual_seed(seed)
    pts = torch.from_numpy(make_points(kind, max(B * N, 1), 3, torch.float32, seed)[: B * N]).float().view(B, N, 3)
    out = []
    for r in roles:
        if r == "P":
            out.append(pts)
        elif r == "Q":
            out.append(torch.rand(B, M, 3, generator=g))
        elif r == "F":
            out.append(torch.rand(B, N, 4, generator=g))
        elif r == "L":
            out.append(torch.tensor(lengths, dtype=torch.int64))
        elif r == "I":
            out.append(torch.randint(-1, max(N, 1), (B, M, 3), generator=g) if N else torch.full((B, M, 3), -1))
        elif r == "X":
            out.append(pts.reshape(-1, 3)[:N].contiguous() if B else torch.rand(N, 3, generator=g))
        elif r == "Y":
            out.append(torch.rand(M, 3, generator=g))
        elif r == "O":
            out.append(torch.rand(offsets[-1] if offsets else 0, 3, generator=g))
        elif r == "C":
            out.append(torch.tensor(offsets, dtype=torch.int64))
    return out


def _example(roles):
    return _inputs(roles, 2, 16, 12, [16, 9], "uniform", 0, [7, 16])


def _session(name):
    if name not in _RUNS:
        fn, roles, _ = TARGETS[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = pxo.export(_Fn(fn), _example(roles))
        _RUNS[name] = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return _RUNS[name]


@pytest.mark.parametrize("name", sorted(TARGETS))
@fuzz(weight=0.5, B=st.integers(0, 3), N=st.sampled_from([0, 1, 2, 4, 5, 6, 17]), M=st.sampled_from([0, 1, 3, 7]),
      kind=st.sampled_from(["uniform", "repeated", "lattice", "nonfinite"]), seed=st.integers(0, 2 ** 16),
      data=st.data())
def test_exported_file_at_edge_sizes_matches_eager_or_fails_by_name(name, B, N, M, kind, seed, data):
    fn, roles, exact = TARGETS[name]
    if not exact and kind == "nonfinite":
        kind = "uniform"  # blended features of NaN points: NaN either way, compared where finite
    lengths = [data.draw(st.integers(0, N)) for _ in range(B)]
    cuts = sorted(data.draw(st.integers(0, N)) for _ in range(B))
    inputs = _inputs(roles, B, N, M, lengths, kind, seed, cuts)
    sess = _session(name)
    try:
        want = fn(*inputs)
    except ValueError as exc:
        with pytest.raises(Exception) as info:
            sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)})
        assert "pcgeom check failed" in str(info.value), (name, str(exc), str(info.value)[:500])
        return
    got = sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)})
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        b = b.detach().numpy()
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
        if exact or not np.issubdtype(b.dtype, np.floating):
            assert np.array_equal(a, b, equal_nan=True), (name, B, N, M, kind)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)

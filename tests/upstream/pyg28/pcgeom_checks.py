"""pcgeom's own checks of PyG 2.8.1's point-cloud examples through the ``pyg_lib`` stand-in.

Not upstream code: run by ``tests/test_pyg.py`` after PyG 2.8.1's vendored
tests, with the shims on.  PyG 2.8.1's ``examples/pointnet2_classification.py``
and ``examples/dgcnn_classification.py`` models (``examples/``, unchanged
excerpts) run forward and backward on random batches of clouds; every
``fps`` / ``radius`` / ``knn`` answer they use is compared with a brute force
that sums squared differences coordinate by coordinate in float32 (the models'
dtype, as the kernels do), and a rerun with the same seed is bit-identical.
"""

import copy
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples"))


def _clouds(sizes, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.cat([torch.rand(n, 3, generator=g) * 2 - 1 for n in sizes])
    batch = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])
    return pos, batch


def _d2(points, q):
    """float32 squared distances from ``q (3,)`` to every row, summed coordinate by coordinate."""
    diff = (points - q[None, :]).astype(np.float32)
    d = np.zeros(len(points), np.float32)
    for c in range(points.shape[1]):
        d = (d + diff[:, c] * diff[:, c]).astype(np.float32)
    return d


def _check_fps(pos, batch, ratio, got):
    """A farthest point sequence from its own (random) start: each next index is the farthest, lowest on ties."""
    pos, batch, got = pos.detach().numpy(), batch.numpy(), got.numpy()
    at = 0
    for b in np.unique(batch):
        members = np.nonzero(batch == b)[0]
        m = int(np.ceil(ratio * len(members)))
        sel = got[at:at + m]
        at += m
        assert sel[0] in members
        p = pos[members]
        first = int(np.nonzero(members == sel[0])[0][0])
        want, dmin = [first], _d2(p, p[first])
        for _ in range(m - 1):
            want.append(int(np.argmax(dmin)))
            dmin = np.minimum(dmin, _d2(p, p[want[-1]]))
        assert sel.tolist() == members[want].tolist()
    assert at == len(got)


def _check_radius(x, y, r, bx, by, cap, got):
    """pyg-lib's radius: ``|x_j - y_i|^2 < r^2`` in float32, the first ``cap`` in index order."""
    x, y, bx, by = x.detach().numpy(), y.detach().numpy(), bx.numpy(), by.numpy()
    r2 = np.float32(r * r)
    rows, cols = [], []
    for i in range(len(y)):
        ok = np.nonzero((_d2(x, y[i]) < r2) & (bx == by[i]))[0][:cap]
        rows += [i] * len(ok)
        cols += ok.tolist()
    assert got.tolist() == [rows, cols]


def test_import_goes_through_the_pyg_lib_stand_in():
    import pyg_lib
    import torch_geometric
    import torch_geometric.typing as t

    assert torch_geometric.__version__ == os.environ["PCGEOM_PYG_DRIVE"]
    assert pyg_lib.__pcgeom_shim__ == "pcgeom.compat.pyg_lib"
    assert t.WITH_PYG_LIB


def _run(model, data, seed):
    torch.manual_seed(seed)  # fps(random_start=True) and dropout draw from torch's generator
    model.zero_grad()
    out = model(data)
    loss = torch.nn.functional.nll_loss(out, data.y)
    loss.backward()
    return out.detach().clone(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_pointnet2_classification_model_uses_exact_fps_and_radius():
    import pointnet2_classification as ex
    from torch_geometric.data import Data

    calls = []
    fps, radius = ex.fps, ex.radius

    def fps_recorded(pos, batch, ratio):
        idx = fps(pos, batch, ratio=ratio)
        calls.append(("fps", pos, batch, ratio, idx))
        return idx

    def radius_recorded(x, y, r, batch_x, batch_y, max_num_neighbors):
        ei = radius(x, y, r, batch_x, batch_y, max_num_neighbors=max_num_neighbors)
        calls.append(("radius", x, y, r, batch_x, batch_y, max_num_neighbors, ei))
        return ei

    ex.fps, ex.radius = fps_recorded, radius_recorded
    try:
        torch.manual_seed(0)
        model = ex.Net().train()
        pos, batch = _clouds((300, 220), seed=1)
        data = Data(pos=pos, batch=batch, y=torch.tensor([3, 7]))
        out, grads = _run(model, data, seed=5)
        assert out.shape == (2, 10) and all(torch.isfinite(g).all() for g in grads)
        assert [c[0] for c in calls] == ["fps", "radius", "fps", "radius"]
        for c in calls:
            if c[0] == "fps":
                _check_fps(*c[1:])
            else:
                _check_radius(*c[1:])
        out2, grads2 = _run(model, data, seed=5)
        assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))
    finally:
        ex.fps, ex.radius = fps, radius


def test_dgcnn_classification_model_uses_the_exact_knn():
    import dgcnn_classification as ex
    from torch_geometric.data import Data
    from torch_geometric.nn import EdgeConv

    torch.manual_seed(0)
    model = ex.Net(10, k=20).eval()  # eval: dropout off, so the layer-by-layer replay below is deterministic
    pos, batch = _clouds((150, 90), seed=2)
    data = Data(pos=pos, batch=batch, y=torch.tensor([1, 4]))
    seen = []
    hooks = [conv.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0], args[1], out)))
             for conv in (model.conv1, model.conv2)]
    try:
        out, grads = _run(model, data, seed=3)
    finally:
        for h in hooks:
            h.remove()
    assert out.shape == (2, 10) and all(torch.isfinite(g).all() for g in grads)
    for conv, x, b, got in seen:
        # the k nearest in float32 (ties to the lower index), then PyG's static EdgeConv over those edges:
        # the same message and max-aggregation as DynamicEdgeConv, so a wrong neighbour changes the output
        xs, bs = x.detach().numpy(), b.numpy()
        rows, cols = [], []
        for i in range(len(xs)):
            d = _d2(xs, xs[i]).astype(np.float64)
            d[bs != bs[i]] = np.inf
            nb = np.lexsort((np.arange(len(xs)), d))[: conv.k]
            rows += [i] * len(nb)
            cols += nb.tolist()
        edge_index = torch.tensor([cols, rows])  # [neighbour, centre]
        static = EdgeConv(copy.deepcopy(conv.nn), aggr="max")  # EdgeConv(nn) re-initialises nn: give it a copy
        static.nn.load_state_dict(conv.nn.state_dict())
        want = static(x, edge_index)
        assert torch.equal(got, want)
    out2, grads2 = _run(model, data, seed=3)
    assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))

"""Exports unchanged upstream models through pcgeom's shims to ONNX and runs them in onnxruntime.

    python drive_onnx.py point_mae|pointnet2_cls|pyg_dgcnn|pyg28_dgcnn [out.onnx]

Called by tests/test_onnx_upstream.py in a fresh interpreter whose working
directory is the vendored repository's root (as drive.py).  The upstream files
import ``knn_cuda`` / ``pointnet2_ops`` by name and get pcgeom's stand-ins;
:func:`pcgeom.onnx.export` exports them with one call.  Each case:

* exports on one input shape, checks the file with
  ``onnx.checker.check_model(full_check=True)`` and that it uses the default
  ONNX domain only;
* runs it in onnxruntime (CPU) on shapes **different from the export's**
  (another batch size and point count, clouds with points inside pointnet2's
  near-origin skip) and compares with the same model in eager PyTorch:
  indices (Point-MAE's centres and neighbourhoods are gathered points, so
  exact) equal, logits / tokens to float32 rounding.
"""

import os
import sys
import time
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd())
sys.path.insert(1, HERE)
sys.path.append(os.path.join(HERE, "_standins"))  # last: a real installed package wins

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pcgeom.compat  # noqa: E402

pcgeom.compat.enable_shims()

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import pcgeom.onnx  # noqa: E402


def cloud(B, N, seed, channels=0, near_origin=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, N, 3, generator=g) * 2 - 1
    x = x / x.norm(dim=-1).max()  # into the unit sphere, as the models' loaders do
    x[:, 1 : 1 + near_origin] *= 0.01  # inside pointnet2's near-origin skip
    if channels:
        x = torch.cat([x, torch.rand(B, N, channels, generator=g)], dim=-1)
    return x.contiguous()


def randomize_batchnorm(model, seed):
    """Non-trivial running statistics, so that eval-mode batch norm is not the identity."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def export_and_session(model, example, path):
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = pcgeom.onnx.export(model, (example,), path)
    seconds = time.perf_counter() - t0
    proto = onnx.load(path) if path else program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    domains = {o.domain for o in proto.opset_import}
    assert domains <= {"", "ai.onnx"}, f"non-standard domains {domains}"
    # the file and its weights (torch.onnx saves them beside it, as ``<path>.data``)
    size = len(proto.SerializeToString())
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess, seconds, size


def close(got, want, name, rtol=1e-4, atol=1e-5):
    want = want.detach().numpy()
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    if not np.allclose(got, want, rtol=rtol, atol=atol * scale):
        raise AssertionError(f"{name}: max abs diff {err:.3g} (scale {scale:.3g})")
    return err


def same(got, want, name):
    want = want.detach().numpy()
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert np.array_equal(got, want), f"{name}: {int((got != want).sum())} of {got.size} values differ"


# ---------------------------------------------------------------------------


class PointMAEGroupEncoder(torch.nn.Module):
    """Point-MAE's tokenizer as its models use it: ``Group`` (pointnet2 FPS + KNN_CUDA) then ``Encoder``."""

    def __init__(self, num_group=64, group_size=32, encoder_dims=384):
        super().__init__()
        from models.Point_MAE import Encoder, Group

        self.group_divider = Group(num_group=num_group, group_size=group_size)
        self.encoder = Encoder(encoder_channel=encoder_dims)

    def forward(self, pts):
        neighborhood, center = self.group_divider(pts)
        return self.encoder(neighborhood), neighborhood, center


def point_mae(path=None, shapes=((3, 1024), (1, 2048), (2, 700))):
    import knn_cuda
    from pointnet2_ops import pointnet2_utils
    assert knn_cuda.__pcgeom_shim__ and pointnet2_utils.__pcgeom_shim__

    torch.manual_seed(0)
    model = PointMAEGroupEncoder().eval()
    randomize_batchnorm(model, 1)
    sess, seconds, size = export_and_session(model, cloud(2, 300, 1), path)
    name = sess.get_inputs()[0].name
    worst = 0.0
    for i, (B, N) in enumerate(shapes):
        pts = cloud(B, N, 10 + i, near_origin=3)
        tokens, nb, ctr = sess.run(None, {name: pts.numpy()})
        with torch.no_grad():
            rtokens, rnb, rctr = model(pts)
        same(ctr, rctr, f"Point-MAE centres {B, N}")
        same(nb, rnb, f"Point-MAE neighbourhoods {B, N}")
        worst = max(worst, close(tokens, rtokens, f"Point-MAE tokens {B, N}"))
    return (f"point_mae: Group + Encoder exported in {seconds:.1f} s ({size / 1e6:.1f} MB); centres and "
            f"neighbourhoods exact, tokens within {worst:.2g} on {list(shapes)}")


def pointnet2_cls(path=None, shapes=((3, 1024), (1, 1500), (2, 600))):
    from pointnet2.models.pointnet2_ssg_cls import PointNet2ClassificationSSG

    from pointnet2_ops import pointnet2_modules, pointnet2_utils
    assert pointnet2_modules.__pcgeom_shim__ and pointnet2_utils.__pcgeom_shim__

    torch.manual_seed(0)
    model = PointNet2ClassificationSSG({"model.use_xyz": True}).eval()
    randomize_batchnorm(model, 2)
    sess, seconds, size = export_and_session(model, cloud(2, 800, 3, channels=3), path)
    name = sess.get_inputs()[0].name
    worst = 0.0
    for i, (B, N) in enumerate(shapes):
        pc = cloud(B, N, 20 + i, channels=3)
        (logits,) = sess.run(None, {name: pc.numpy()})
        with torch.no_grad():
            want = model(pc)
        worst = max(worst, close(logits, want, f"pointnet2 SSG logits {B, N}"))
        # The predicted classes too (an argmax is what a deployment reads).
        same(logits.argmax(-1), want.argmax(-1), f"pointnet2 SSG classes {B, N}")
    return (f"pointnet2_cls: SSG classifier exported in {seconds:.1f} s ({size / 1e6:.1f} MB); logits within "
            f"{worst:.2g} on {list(shapes)}")


def pyg_dgcnn(path=None, sizes=(1024, 700, 20, 12), pyg28=False):
    """PyG's DGCNN example (``DynamicEdgeConv`` over torch_cluster's knn) for one cloud per call.

    PyG's model reads ``data.pos`` / ``data.batch``; one cloud is a ``Data``
    without ``batch``, as PyG builds it, which the stand-in's knn serves with
    static edge counts.  A ``batch`` vector (several clouds per call) is refused
    at export time by name.  ``pyg28``: PyG 2.8.1's same model, whose
    ``DynamicEdgeConv`` calls ``torch.ops.pyg.knn`` (the pyg_lib stand-in) instead.
    """
    # tests/upstream/torch_cluster (torch_cluster's own tests, a package of that name) must not shadow the
    # shim: this folder is on sys.path twice (the script's own folder, and inserted above)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    from dgcnn_classification import Net
    import torch_geometric
    from torch_geometric.data import Data

    if pyg28:
        import pyg_lib
        assert torch_geometric.__version__ == "2.8.1", torch_geometric.__version__
        assert pyg_lib.__pcgeom_shim__ == "pcgeom.compat.pyg_lib", pyg_lib
    else:
        import torch_cluster
        assert torch_cluster.__pcgeom_shim__

    class OneCloud(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, pos):
            return self.net(Data(pos=pos))

    class Batched(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, pos, batch):
            return self.net(Data(pos=pos, batch=batch))

    torch.manual_seed(0)
    net = Net(10, k=20).eval()
    randomize_batchnorm(net, 4)
    model = OneCloud(net).eval()
    sess, seconds, size = export_and_session(model, cloud(1, 512, 5)[0], path)
    name = sess.get_inputs()[0].name
    worst = 0.0
    for i, n in enumerate(sizes):
        pos = cloud(1, n, 30 + i)[0]
        (logits,) = sess.run(None, {name: pos.numpy()})
        with torch.no_grad():
            want = model(pos)
        worst = max(worst, close(logits, want, f"DGCNN log-probabilities N={n}"))
        same(logits.argmax(-1), want.argmax(-1), f"DGCNN classes N={n}")
    pos = cloud(1, 64, 40)[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pcgeom.onnx.export(Batched(net).eval(), (pos, torch.arange(2).repeat_interleave(32)), None)
    except pcgeom.onnx.ExportError as exc:
        assert "DynamicEdgeConv" in str(exc) and "batch=None" in str(exc), str(exc)
    else:
        raise AssertionError("a DGCNN with a batch vector exported; it must be refused by name")
    return (f"pyg_dgcnn: PyG {torch_geometric.__version__}'s DGCNN exported in {seconds:.1f} s ({size / 1e6:.1f} MB); "
            f"log-probabilities within {worst:.2g} on N={list(sizes)}; a batch vector is refused by name")


def pyg28_dgcnn(path=None):
    """:func:`pyg_dgcnn` on PyG 2.8.1 (``torch.ops.pyg.knn`` through the pyg_lib stand-in)."""
    return pyg_dgcnn(path, pyg28=True).replace("pyg_dgcnn:", "pyg28_dgcnn:", 1)


CASES = {"point_mae": point_mae, "pointnet2_cls": pointnet2_cls, "pyg_dgcnn": pyg_dgcnn, "pyg28_dgcnn": pyg28_dgcnn}

if __name__ == "__main__":
    out = sys.argv[2] if len(sys.argv) > 2 else None
    print("OK", CASES[sys.argv[1]](out))

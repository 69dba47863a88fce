"""Runs POSTECH-CVLab/point-transformer's unchanged ``lib/pointops/functions/pointops.py`` and
``model/pointtransformer/pointtransformer_seg.py`` through pcgeom's ``pointops_cuda`` stand-in;
called by test_postech_upstream.py in a fresh process whose working directory is a checkout of
that repository (it has no licence file, so it is not vendored: see README.md).

    python drive_postech.py

The model (``pointtransformer_seg_repro``, the paper's S3DIS network) runs one forward +
backward on a packed batch of two clouds of different sizes (the deepest level has fewer points
than ``nsample``, so the kernel's first-point padding is exercised); then the same model, same
weights, runs again with ``pointops.pointops_cuda`` swapped for float64 transcriptions of
POSTECH's ``furthestsampling_cuda`` / ``knnquery_cuda`` kernels (the only raw calls this model's
forward makes; ``../pointcept_oracle/pointops64.py``, written without pcgeom code).  Every index
the kernels write must be equal; outputs, input gradients and parameter gradients equal to float32
rounding.
"""

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(os.path.dirname(HERE), "pointcept_oracle")
sys.path.insert(0, os.getcwd())
sys.path.insert(1, ORACLE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import drive_pointcept as D  # noqa: E402  (enables the shims; close / same / clouds)
import pointops64 as K  # noqa: E402

# Harness only (no upstream file is changed): pointops.py and TransitionDown allocate with
# torch.cuda.*Tensor, which a CPU-only torch cannot make.
if not torch.cuda.is_available():
    torch.cuda.IntTensor, torch.cuda.FloatTensor = torch.IntTensor, torch.FloatTensor


def recording(mod, log):
    """The shim module, recording the indices its kernels write."""

    def furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx):
        mod.furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx)
        log.append(("furthestsampling_cuda", idx.clone()))

    def knnquery_cuda(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2):
        mod.knnquery_cuda(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2)
        log.append(("knnquery_cuda", idx.clone()))
        log.append(("knnquery_cuda dist2", dist2.clone()))

    return types.SimpleNamespace(furthestsampling_cuda=furthestsampling_cuda, knnquery_cuda=knnquery_cuda)


def transcribed(log):
    """POSTECH's two kernels in float64 (pointops64), filling the caller's tensors."""

    def furthestsampling_cuda(b, n_max, xyz, offset, new_offset, tmp, idx):
        idx.copy_(torch.as_tensor(K.farthest_point_sampling(xyz, offset, new_offset)).int())
        log.append(("furthestsampling_cuda", idx.clone()))

    def knnquery_cuda(m, nsample, xyz, new_xyz, offset, new_offset, idx, dist2):
        i, d2 = K.knn_query(nsample, xyz, offset, new_xyz, new_offset, pad="first")
        idx.copy_(torch.as_tensor(i).int())
        dist2.copy_(torch.as_tensor(d2).float())
        log.append(("knnquery_cuda", idx.clone()))
        log.append(("knnquery_cuda dist2", dist2.clone()))

    return types.SimpleNamespace(furthestsampling_cuda=furthestsampling_cuda, knnquery_cuda=knnquery_cuda)


def step(model, p, x, o):
    torch.manual_seed(0)
    model.zero_grad()
    x = x.clone().requires_grad_(True)
    out = model([p, x, o])
    (out.square().mean() + out[:, 0].sum() * 1e-3).backward()
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None}
    return out.detach(), x.grad, grads


def main():
    from lib.pointops.functions import pointops
    from model.pointtransformer.pointtransformer_seg import pointtransformer_seg_repro

    import pointops_cuda
    assert pointops_cuda.__pcgeom_shim__, "a compiled pointops_cuda is installed: nothing to test"
    assert pointops.pointops_cuda is pointops_cuda
    torch.manual_seed(0)
    model = pointtransformer_seg_repro(c=6, k=13)
    coord, feat, _ = D.clouds([1100, 700], 1, 1.0)
    feat = feat[:, :3].contiguous()  # c=6: xyz + rgb
    offset = torch.tensor([1100, 1800], dtype=torch.int32)  # POSTECH's loader gives IntTensor offsets

    shim_log, ref_log = [], []
    pointops.pointops_cuda = recording(pointops_cuda, shim_log)
    try:
        out, gx, gp = step(model, coord, feat, offset)
        pointops.pointops_cuda = transcribed(ref_log)
        rout, rgx, rgp = step(model, coord, feat, offset)
    finally:
        pointops.pointops_cuda = pointops_cuda
    assert len(shim_log) == len(ref_log) > 0, (len(shim_log), len(ref_log))
    padded = 0
    for (n1, a), (n2, b) in zip(shim_log, ref_log):
        assert n1 == n2, (n1, n2)
        if n1.endswith("dist2"):
            D.close(a, b, n1, rel=1e-6)
            padded += int((b == 1e10).sum())
        else:
            D.same(a, b, n1)
    assert padded > 0, "the deepest level was meant to have fewer points than nsample"
    D.close(out, rout, "output")
    D.close(gx, rgx, "d/d feat", rel=1e-3)
    assert gp.keys() == rgp.keys() and len(gp) > 10
    floor = 1e-5 * torch.cat([g.flatten().double() for g in rgp.values()]).norm().item()
    for n in gp:
        D.close(gp[n], rgp[n], f"grad {n}", rel=1e-3, floor=floor)
    calls = len(shim_log) - sum(n.endswith("dist2") for n, _ in shim_log)
    print(f"OK postech: pointtransformer_seg_repro on clouds of 1100 + 700 points, {calls} kernel index outputs "
          f"exact ({padded} first-point padded slots), forward and backward match")


if __name__ == "__main__":
    main()

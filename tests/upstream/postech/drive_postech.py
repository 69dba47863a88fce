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
the kernels write must be equal, and ``dist2`` equal where the kernel pads it (1e10).

The comparison runs twice.  In float64 (a deep copy of the model cast with ``.double()``, the inputs
too, and ``pointops.py``'s float allocations made float64; the shim and the transcriptions take
float64) ``dist2``, the output, the input gradient and every parameter gradient must agree to 1e-9
of their norm: that is what says the shim's forward and backward are right, on any CPU and any
thread count.  In float32 (what users train in) indices must still be equal, ``dist2`` and the output
agree to float32 rounding and every gradient be finite; float32 gradients are not compared, because
torch's own float32 reductions (matmuls, softmax) move a whole model's gradient by ~1e-3 from one
CPU or thread count to another, which says nothing about the shim.
"""

import copy
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
# torch.cuda.*Tensor, which a CPU-only torch cannot make.  For the float64 run FloatTensor is
# aliased to the float64 constructor, so the gathered features and distances are float64 like the model.
if not torch.cuda.is_available():
    torch.cuda.IntTensor, torch.cuda.FloatTensor = torch.IntTensor, torch.FloatTensor


_FLOAT_ALLOC = {torch.float32: torch.cuda.FloatTensor,  # the CPU alias above, or CUDA's own
                torch.float64: torch.DoubleTensor if not torch.cuda.is_available() else torch.cuda.DoubleTensor}


def float_allocations(dtype):
    """pointops.py's ``torch.cuda.FloatTensor`` allocates ``dtype`` (float64 for the float64 run)."""
    torch.cuda.FloatTensor = _FLOAT_ALLOC[dtype]


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
        dist2.copy_(torch.as_tensor(d2).to(dist2.dtype))  # float32 d2 for float32 input (as the kernel forms it)
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

    model64 = copy.deepcopy(model)
    worst = [0.0, ""]
    for mdl, dt in ((model64.double(), torch.float64), (model, torch.float32)):
        calls, padded = run_pair(pointops, pointops_cuda, mdl, coord.to(dt), feat.to(dt), offset, worst)
    where = f" ({worst[1]})" if worst[0] else " (bit-identical)"
    print(f"OK postech: pointtransformer_seg_repro on clouds of 1100 + 700 points, {calls} kernel index outputs "
          f"exact ({padded} first-point padded slots), forward and backward match; worst float64 relative "
          f"difference {worst[0]:.2g}{where}")


def run_pair(pointops, pointops_cuda, model, coord, feat, offset, worst):
    """The model through the shim, then through the transcriptions; compares (see the module docstring)."""
    dt = coord.dtype
    label = str(dt).replace("torch.", "")
    shim_log, ref_log = [], []
    float_allocations(dt)
    try:
        pointops.pointops_cuda = recording(pointops_cuda, shim_log)
        out, gx, gp = step(model, coord, feat, offset)
        pointops.pointops_cuda = transcribed(ref_log)
        rout, rgx, rgp = step(model, coord, feat, offset)
    finally:
        pointops.pointops_cuda = pointops_cuda
        float_allocations(torch.float32)

    def close(a, b, name, rel, floor=0.0):
        if dt == torch.float64:
            assert a.dtype == b.dtype == torch.float64, (name, a.dtype, b.dtype)
            r = (a - b).norm().item() / max(b.norm().item(), 1e-300)
            if r > worst[0]:
                worst[:] = [r, f"{label} {name}"]
            rel = D.REL64
        D.close(a, b, f"{label} {name}", rel=rel, floor=floor)

    assert len(shim_log) == len(ref_log) > 0, (len(shim_log), len(ref_log))
    padded = 0
    for (n1, a), (n2, b) in zip(shim_log, ref_log):
        assert n1 == n2, (n1, n2)
        if n1.endswith("dist2"):
            pad = b == 1e10
            assert torch.equal(a == 1e10, pad), f"{label} {n1}: padded slots differ"
            close(a[~pad], b[~pad], n1, rel=1e-6)
            padded += int(pad.sum())
        else:
            D.same(a, b, f"{label} {n1}")
    assert padded > 0, "the deepest level was meant to have fewer points than nsample"
    assert gp.keys() == rgp.keys() and len(gp) > 10
    assert out.dtype == gx.dtype == dt and all(g.dtype == dt for g in gp.values())
    close(out, rout, "output", rel=2e-4, floor=1e-7 if dt == torch.float32 else 0.0)
    if dt == torch.float64:
        close(gx, rgx, "d/d feat", rel=D.REL64)
        # A gradient that cancels to ~0 (a bias feeding a batch norm) is rounding in both runs:
        # it is held to REL64 of the whole gradient's norm.
        floor = D.REL64 * torch.cat([g.flatten() for g in rgp.values()]).norm().item()
        for n in gp:
            close(gp[n], rgp[n], f"grad {n}", rel=D.REL64, floor=floor)
    else:
        for n, g in [("d/d feat", gx), ("d/d feat (reference)", rgx)] + sorted(gp.items()) + sorted(rgp.items()):
            if not torch.isfinite(g).all():
                raise AssertionError(f"{label} {n}: non-finite gradient")
    calls = len(shim_log) - sum(n.endswith("dist2") for n, _ in shim_log)
    return calls, padded


if __name__ == "__main__":
    main()

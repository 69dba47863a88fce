"""Runs PointWeb's unchanged segmentation model through pcgeom's shims; called by
tests/test_compat_pointops_cuda_pointweb.py in a fresh process whose working directory is this folder
(the vendored root, as PointWeb's own scripts run from its repository root).

    python drive_pointweb.py

``lib/pointops/functions/pointops.py`` does ``import pointops_cuda`` and gets
pcgeom's stand-in.  ``PointWebSeg`` runs one training-mode forward + backward
on a batch of two clouds; then the *same* model (same weights, same dropout
seed) runs again with that module's ``pointops_cuda`` swapped for
``pointweb64`` (float64 numpy transcriptions of the CUDA kernels, with the
extension's signatures).  Every index the kernels write must be equal.

The comparison runs twice.  In float64 (a deep copy of the model cast with
``.double()``, the input too, and ``pointops.py``'s float allocations made
float64; the shims and the transcriptions take float64) the output, the input
gradient and every parameter gradient must agree to 1e-9 of their norm: that
is what says the shims' forward and backward are right, on any CPU and any
thread count.  In float32 (what users train in) indices must still be equal,
the output agree to float32 rounding and every gradient be finite; float32
gradients are not compared, because torch's own float32 reductions (matmuls,
softmax, max-pool near-ties) move a whole model's gradient by ~1e-3 from one
CPU or thread count to another, which says nothing about the shims.
"""

import copy
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd())
sys.path.insert(1, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pcgeom.compat  # noqa: E402

import pointweb64 as K  # noqa: E402

pcgeom.compat.enable_shims()

# Harness only (no vendored file is changed): pointops.py allocates every output with
# torch.cuda.FloatTensor / IntTensor / LongTensor and _AFAModule moves torch.eye(M) with .cuda(),
# which a CPU-only torch cannot do; alias them to CPU when CUDA is absent.  For the float64 run
# (see the docstring) FloatTensor is aliased to the float64 constructor, so the kernels' float
# outputs (gathered features, interpolation, nearest-neighbour distances) are float64 like the model.
if not torch.cuda.is_available():
    torch.cuda.FloatTensor = torch.FloatTensor
    torch.cuda.IntTensor = torch.IntTensor
    torch.cuda.LongTensor = torch.LongTensor
    torch.Tensor.cuda = lambda self, *a, **k: self


_FLOAT_ALLOC = {torch.float32: torch.cuda.FloatTensor,  # the CPU alias above, or CUDA's own
                torch.float64: torch.DoubleTensor if not torch.cuda.is_available() else torch.cuda.DoubleTensor}


def float_allocations(dtype):
    """pointops.py's ``torch.cuda.FloatTensor`` allocates ``dtype`` (float64 for the float64 run)."""
    torch.cuda.FloatTensor = _FLOAT_ALLOC[dtype]


# float64 runs agree to summation-order rounding (measured: see the README); 1e-9 of the norm still
# catches a 1e-7 relative change of any grouped feature.
REL64 = 1e-9


def load_pointweb_seg():
    """model/pointweb/pointweb_seg.py as written, except that its model_fn_decorator's ``.cuda(async=True)``
    (a syntax error since Python 3.7; never called here) is read as ``non_blocking=True``; the file is unchanged."""
    path = os.path.join("model", "pointweb", "pointweb_seg.py")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    assert src.count("cuda(async=True)") == 4, "pointweb_seg.py is not the vendored one"
    mod = types.ModuleType("model.pointweb.pointweb_seg")
    mod.__file__ = path
    sys.modules[mod.__name__] = mod
    exec(compile(src.replace("cuda(async=True)", "cuda(non_blocking=True)"), path, "exec"), mod.__dict__)
    return mod


NPOINTS, NSAMPLE = (512, 128, 32, 8), 16
INDEX_OUTPUT = {"furthestsampling_cuda": 5, "knnquery_cuda": 6, "nearestneighbor_cuda": 6, "ballquery_cuda": 7}


class Log:
    """Wraps a ``pointops_cuda`` to record every index tensor its kernels write, and the calls made."""

    def __init__(self, mod, log):
        self._mod, self._log = mod, log

    def __getattr__(self, name):
        fn = getattr(self._mod, name)

        def call(*a):
            fn(*a)
            if name in INDEX_OUTPUT:
                self._log.append((name, a[INDEX_OUTPUT[name]].detach().clone()))
            else:
                self._log.append((name, None))

        return call


_worst64 = [0.0, ""]  # the largest relative float64 difference, printed with the summary


def close(a, b, name, rel=2e-4, floor=1e-7):
    a, b = a.detach().double(), b.detach().double()
    err = (a - b).norm().item()
    scale = b.norm().item()
    r = err / max(scale, 1e-300)
    if rel == REL64 and r > _worst64[0]:
        _worst64[:] = [r, name]
    if os.environ.get("PW_VERBOSE"):
        print(f"{name}: rel {r:.2e}")
    if not err <= rel * scale + floor:
        raise AssertionError(f"{name}: |diff| {err:.3g} vs |ref| {scale:.3g} (relative {r:.3g}, limit {rel:g})")


def step(model, pc, labels, seed=0):
    torch.manual_seed(seed)  # the same dropout mask in both runs
    model.zero_grad()
    x = pc.clone().requires_grad_(True)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, labels)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return out.detach(), x.grad.detach().clone(), grads


def main():
    import importlib

    P = importlib.import_module("lib.pointops.functions.pointops")
    import pointops_cuda

    assert getattr(pointops_cuda, "__pcgeom_shim__", None), "a compiled pointops_cuda is installed: nothing to test"
    seg = load_pointweb_seg()

    torch.manual_seed(0)
    B, N, C, NCLS = 2, 1024, 3, 13
    model = seg.PointWebSeg(c=C, k=NCLS)
    # smaller than the S3DIS configuration (npoint 1024/256/64/16, nsample 32) to keep the test fast on CPU:
    # the AFA module's cost grows with nsample**2; the layer widths are fixed by PointWebSeg
    for sa, npoint in zip(model.SA_modules, NPOINTS):
        sa.npoint, sa.grouper.nsample = npoint, NSAMPLE
    model.train()
    g = torch.Generator().manual_seed(1)
    pc = torch.cat([torch.rand(B, N, 3, generator=g) * 2, torch.rand(B, N, C, generator=g)], -1)
    pc[1, 700:710, :3] = pc[1, 0, :3]  # duplicates in the second cloud
    labels = torch.randint(0, NCLS, (B, N), generator=g)

    t0 = time.perf_counter()
    model64 = copy.deepcopy(model).double()
    n_calls, n_idx = run_pair(P, pointops_cuda, model64, pc.double(), labels, "float64")
    t1 = time.perf_counter()
    run_pair(P, pointops_cuda, model, pc, labels, "float32")
    t2 = time.perf_counter()
    where = f" ({_worst64[1]})" if _worst64[0] else " (bit-identical)"
    print(f"{n_calls} pointops_cuda calls, {n_idx} index outputs equal (each run); worst float64 relative "
          f"difference {_worst64[0]:.2g}{where}; float64 pair {t1 - t0:.1f}s, float32 pair {t2 - t1:.1f}s")
    print("OK pointweb")


def run_pair(P, pointops_cuda, model, pc, labels, label):
    """The model through the shims, then through the transcriptions; compares (see the module docstring)."""
    float_allocations(pc.dtype)
    shim_log, ref_log = [], []
    try:
        P.pointops_cuda = Log(pointops_cuda, shim_log)
        out, gx, grads = step(model, pc, labels)
        P.pointops_cuda = Log(K, ref_log)
        r_out, r_gx, r_grads = step(model, pc, labels)
    finally:
        P.pointops_cuda = pointops_cuda
        float_allocations(torch.float32)

    names = [n for n, _ in shim_log]
    assert names == [n for n, _ in ref_log], "the two runs made different calls"
    for fn in ("furthestsampling_cuda", "gathering_forward_cuda", "gathering_backward_cuda", "knnquery_cuda",
               "grouping_forward_cuda", "grouping_backward_cuda", "nearestneighbor_cuda",
               "interpolation_forward_cuda", "interpolation_backward_cuda"):
        assert fn in names, f"{fn} was never called"
    n_idx = 0
    for (name, a), (_, b) in zip(shim_log, ref_log):
        if a is not None:
            n_idx += 1
            if not torch.equal(a, b):
                raise AssertionError(f"{label} {name}: {int((a != b).sum())} indices differ")
    assert grads.keys() == r_grads.keys() and len(grads) > 10
    assert out.dtype == gx.dtype == pc.dtype and all(g.dtype == pc.dtype for g in grads.values())
    if pc.dtype == torch.float64:
        close(out, r_out, f"{label} output", rel=REL64, floor=0.0)
        close(gx, r_gx, f"{label} input gradient", rel=REL64, floor=0.0)
        # A gradient that cancels to ~0 (a bias feeding a batch norm) is rounding in both runs:
        # it is held to REL64 of the whole gradient's norm.
        floor = REL64 * torch.cat([g.flatten() for g in r_grads.values()]).norm().item()
        for k in grads:
            close(grads[k], r_grads[k], f"{label} grad {k}", rel=REL64, floor=floor)
    else:
        close(out, r_out, f"{label} output")
        for k, g in [("input gradient", gx), ("input gradient (reference)", r_gx)] + sorted(grads.items()) \
                + sorted(r_grads.items()):
            if not torch.isfinite(g).all():
                raise AssertionError(f"{label} {k}: non-finite gradient")
    return len(names), n_idx


if __name__ == "__main__":
    main()

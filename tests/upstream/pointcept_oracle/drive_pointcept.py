"""Runs Pointcept's unchanged Point Transformer v1 / v2 / v3 through pcgeom's shims; called by
test_pointcept_upstream.py in a fresh process whose working directory is ../pointcept.

    python drive_pointcept.py ptv1|ptv2|ptv3

The vendored model files import ``pointops``, ``torch_scatter`` and (PTv2)
``torch_geometric.nn.pool.voxel_grid`` -> ``torch_cluster`` by name and get
pcgeom's stand-ins (PTv3 also imports the real ``spconv``).  Each model runs one forward + backward on a packed batch
of two clouds of different sizes; then the *same* model (same weights) runs
again with those module globals swapped for references built on
pointops64.py (float64 numpy transcriptions of the CUDA kernels and of
torch_scatter / grid_cluster).  Every index the ops return must be equal.

Each comparison runs twice.  In float64 (the model and its inputs cast with
``.double()``; pcgeom's ops and the transcriptions take float64) outputs, input
gradients and every parameter gradient must agree to 1e-9 of their norm: that is
what says the shims' forward and backward are right, on any CPU and any thread
count.  In float32 (what users train in) indices must still be equal, outputs
agree to float32 rounding and every gradient be finite; float32 gradients are
not compared, because torch's own float32 reductions (matmuls, softmax and
max-pool near-ties) move a whole model's gradient by ~1e-3 from one CPU or
thread count to another, which says nothing about the shims.
"""

import copy
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd())
sys.path.insert(1, HERE)
sys.path.append(os.path.join(os.path.dirname(HERE), "_standins"))  # last: a real installed package wins

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pcgeom.compat  # noqa: E402

import pointops64 as K  # noqa: E402

pcgeom.compat.enable_shims()

# Harness only (no upstream file is changed): Pointcept imports timm.layers.DropPath (the
# test stand-in has timm.models.layers), and PTv1's TransitionDown builds its new offsets
# with torch.cuda.IntTensor, which a CPU-only torch cannot make.
try:
    import timm.layers  # noqa: F401
except ImportError:
    import timm.models.layers as _layers

    sys.modules["timm.layers"] = _layers
if not torch.cuda.is_available():
    torch.cuda.IntTensor = torch.IntTensor


# float64 runs agree to summation-order rounding (measured: bit-identical for PTv1, PTv2 and PTv3 on an
# AMD EPYC host with 2 threads); 1e-9 leaves room for a badly conditioned gradient (PTv2's interp model
# amplifies input rounding ~1e5 times) and still catches a 1e-7 relative change of any grouped feature.
REL64 = 1e-9


def close(a, b, name, rel=2e-4, floor=1e-7):
    a, b = a.detach().double(), b.detach().double()
    err = (a - b).norm().item()
    scale = b.norm().item()
    if not err <= rel * scale + floor:
        raise AssertionError(f"{name}: |diff| {err:.3g} vs |ref| {scale:.3g}")


def same(a, b, name):
    a, b = torch.as_tensor(np.asarray(a)).long(), torch.as_tensor(np.asarray(b)).long()
    if a.shape != b.shape or not torch.equal(a, b):
        raise AssertionError(f"{name}: indices differ ({int((a != b).sum()) if a.shape == b.shape else 'shape'})")


def clouds(sizes, seed, extent):
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(sum(sizes), 3, generator=g) * extent
    feat = torch.rand(sum(sizes), 6, generator=g)
    offset = torch.tensor(np.cumsum(sizes), dtype=torch.long)
    return coord.contiguous(), feat.contiguous(), offset


class Log:
    """Wraps the shim ``pointops`` to record the indices it returns (compared with the reference's)."""

    def __init__(self, mod, log):
        self._mod, self._log = mod, log

    def __getattr__(self, name):
        fn = getattr(self._mod, name)

        def call(*a, **kw):
            out = fn(*a, **kw)
            if name in ("knn_query", "farthest_point_sampling") or (name == "knn_query_and_group" and kw.get("idx") is None):
                idx = out[1] if name == "knn_query_and_group" else (out[0] if isinstance(out, tuple) else out)
                self._log.append((name, idx.detach().clone()))
            return out

        return call


def ref_pointops(log):
    """pointops from the transcriptions: indices from pointops64, values gathered in torch."""

    def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
        idx, d2 = K.knn_query(nsample, xyz, offset, new_xyz, new_offset)
        idx = torch.as_tensor(idx).int()
        log.append(("knn_query", idx))
        return idx, torch.as_tensor(np.sqrt(d2)).to(xyz.dtype)

    def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
        new_xyz = xyz if new_xyz is None else new_xyz
        i = idx.long()
        fz = torch.cat([feat, feat.new_zeros(1, feat.shape[1])])
        g = fz[i]
        if not with_xyz:
            return g
        xz = torch.cat([xyz, xyz.new_zeros(1, 3)])
        rel = (xz[i] - new_xyz[:, None]) * (i >= 0)[..., None].to(xyz.dtype)
        return torch.cat([rel, g], -1)

    def knn_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, nsample=None,
                            with_xyz=False):
        if idx is None:
            idx, _ = K.knn_query(nsample, xyz, offset, new_xyz, new_offset)
            idx = torch.as_tensor(idx).int()
            log.append(("knn_query_and_group", idx))
        return grouping(idx, feat, xyz, new_xyz, with_xyz), idx

    def farthest_point_sampling(xyz, offset, new_offset):
        idx = torch.as_tensor(K.farthest_point_sampling(xyz, offset, new_offset)).int()
        log.append(("farthest_point_sampling", idx))
        return idx

    def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
        _, idx, w = K.interpolation(xyz, new_xyz, feat.detach(), offset, new_offset, k)
        i = torch.as_tensor(idx) % feat.shape[0]  # Python's feat[-1]
        return (feat[i] * torch.as_tensor(w).to(feat.dtype)[..., None]).sum(1)

    return types.SimpleNamespace(knn_query=knn_query, grouping=grouping, knn_query_and_group=knn_query_and_group,
                                 farthest_point_sampling=farthest_point_sampling, interpolation=interpolation)


def ref_segment_csr(src, indptr, reduce="sum"):
    out, arg = K.segment_csr(src.detach(), indptr, reduce)
    if reduce in ("min", "max"):
        return torch.gather(src, 0, torch.as_tensor(arg).clamp(max=src.shape[0] - 1)).to(src.dtype)
    seg = torch.repeat_interleave(torch.arange(len(indptr) - 1), torch.diff(indptr))
    s = src.new_zeros((len(indptr) - 1,) + tuple(src.shape[1:])).index_add(0, seg, src)
    if reduce == "mean":
        s = s / torch.diff(indptr).clamp(min=1).to(src.dtype).view(-1, *([1] * (src.dim() - 1)))
    return s


def ref_voxel_grid(pos, size, batch=None, start=None, end=None):
    return torch.as_tensor(K.voxel_grid(pos, size, batch.numpy()))


def step(model, data, seed=0):
    torch.manual_seed(seed)
    model.zero_grad()
    d = {k: (v.clone().requires_grad_(True) if k == "feat" else v.clone() if torch.is_tensor(v) else v)
         for k, v in data.items()}
    out = model(d)
    if not torch.is_tensor(out):  # PTv3 returns its Point (an addict Dict)
        out = out.feat
    (out.square().mean() + out[:, 0].sum() * 1e-3).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), d["feat"].grad, grads


def as_double(model, data):
    """The same model (a deep copy: same weights) and inputs in float64."""
    return copy.deepcopy(model).double(), {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v)
                                           for k, v in data.items()}


def check(model, module, data, name, swaps):
    """float64 run (tight comparison of everything), then the float32 run (indices, outputs, finiteness)."""
    model64, data64 = as_double(model, data)
    n = run_pair(model64, module, data64, f"{name} float64", swaps)
    return n + run_pair(model, module, data, f"{name} float32", swaps)


def run_pair(model, module, data, name, swaps):
    import pointops

    shim_log, ref_log = [], []
    saved = {k: getattr(module, k) for k in swaps}
    module.pointops = Log(pointops, shim_log)
    out, gx, gp = step(model, data)
    refs = {"pointops": ref_pointops(ref_log), "segment_csr": ref_segment_csr, "voxel_grid": ref_voxel_grid}
    for k in swaps:
        setattr(module, k, refs[k])
    try:
        rout, rgx, rgp = step(model, data)
    finally:
        for k, v in saved.items():
            setattr(module, k, v)
    return compare(name, shim_log, ref_log, (out, gx, gp), (rout, rgx, rgp))


def compare(name, shim_log, ref_log, res, rres):
    """Indices equal; in float64 outputs and gradients to REL64, in float32 outputs to float32
    rounding and gradients finite (see the module docstring)."""
    (out, gx, gp), (rout, rgx, rgp) = res, rres
    assert len(shim_log) == len(ref_log) and len(shim_log) > 0, (len(shim_log), len(ref_log))
    for (n1, a), (n2, b) in zip(shim_log, ref_log):
        assert n1 == n2, (n1, n2)
        same(a, b, f"{name} {n1}")
    assert gp.keys() == rgp.keys() and len(gp) > 10
    if out.dtype == torch.float64:
        assert gx.dtype == torch.float64 and all(g.dtype == torch.float64 for g in gp.values())
        close(out, rout, f"{name} output", rel=REL64, floor=0.0)
        close(gx, rgx, f"{name} d/d feat", rel=REL64, floor=0.0)
        # A gradient that cancels to ~0 (a bias feeding a batch norm) is rounding in both runs:
        # it is held to REL64 of the whole gradient's norm.
        floor = REL64 * torch.cat([g.flatten() for g in rgp.values()]).norm().item()
        for n in gp:
            close(gp[n], rgp[n], f"{name} grad {n}", rel=REL64, floor=floor)
    else:
        close(out, rout, f"{name} output")
        for n, g in [("d/d feat", gx), ("d/d feat (reference)", rgx)] + sorted(gp.items()) + sorted(rgp.items()):
            if not torch.isfinite(g).all():
                raise AssertionError(f"{name} {n}: non-finite gradient")
    return len(shim_log)


def ptv1():
    from pointcept.models.point_transformer import point_transformer_seg as m

    import pointops
    assert pointops.__pcgeom_shim__
    torch.manual_seed(0)
    model = m.PointTransformerSeg26(in_channels=6, num_classes=13)
    coord, feat, offset = clouds([1100, 700], 1, 1.0)
    n = check(model, m, {"coord": coord, "feat": feat, "offset": offset}, "PTv1", ["pointops"])
    return f"ptv1: Seg26 on clouds of 1100 + 700 points, {n} index outputs exact, forward and backward match"


def ptv2():
    from pointcept.models.point_transformer_v2 import point_transformer_v2m2_base as m

    import pointops
    import torch_scatter
    assert pointops.__pcgeom_shim__ and getattr(torch_scatter, "__pcgeom_shim__", None)
    torch.manual_seed(0)
    model = m.PointTransformerV2(
        in_channels=6, num_classes=13, patch_embed_depth=1, patch_embed_channels=16, patch_embed_groups=2,
        patch_embed_neighbours=8, enc_depths=(1, 1, 1, 1), enc_channels=(32, 48, 64, 96), enc_groups=(4, 6, 8, 12),
        enc_neighbours=(16, 16, 16, 16), dec_depths=(1, 1, 1, 1), dec_channels=(16, 32, 48, 64),
        dec_groups=(2, 4, 6, 8), dec_neighbours=(16, 16, 16, 16), grid_sizes=(0.1, 0.2, 0.3, 0.45),
    )
    coord, feat, offset = clouds([1500, 900], 2, 2.0)
    data = {"coord": coord, "feat": feat, "offset": offset}
    n = check(model, m, data, "PTv2m2", ["pointops", "segment_csr", "voxel_grid"])
    # the "interp" unpooling backend runs pointops.interpolation
    torch.manual_seed(0)
    model_i = m.PointTransformerV2(
        in_channels=6, num_classes=5, patch_embed_channels=16, patch_embed_groups=2, enc_depths=(1, 1),
        enc_channels=(32, 48), enc_groups=(4, 6), enc_neighbours=(16, 16), dec_depths=(1, 1), dec_channels=(16, 32),
        dec_groups=(2, 4), dec_neighbours=(16, 16), grid_sizes=(0.2, 0.4), unpool_backend="interp",
    )
    n += check(model_i, m, data, "PTv2m2 interp", ["pointops", "segment_csr", "voxel_grid"])
    return f"ptv2: PT-v2m2 on clouds of 1500 + 900 points (map and interp unpooling), {n} index outputs exact, forward and backward match"


def spconv_on_cpu_torch():
    """Harness only (spconv 2.3.6 / 2.3.8 on a CPU-only torch; see README.md):

    * ``ops.indice_conv_backward`` (the backward of every ``SubMConv3d``) calls
      ``get_current_stream()`` -> ``torch.cuda.current_stream()`` before it branches to its CPU
      gather-mm-scatter path, which never uses the stream: ``AssertionError: Torch not compiled
      with CUDA enabled`` (the forward was fixed for this in spconv#366).  Without CUDA the lookup
      returns 0 instead.
    * with more than one torch thread its CPU convolutions give results that change from call to
      call and are wrong (measured against ``subm_conv_check``'s transcription); one thread is
      right and bit-reproducible.  This driver is its own process."""
    import spconv.pytorch.ops as ops

    if not torch.cuda.is_available():
        ops.get_current_stream = lambda: 0
    torch.set_num_threads(1)


def subm_conv_check(conv, feat, batch, grid):
    """spconv is not what pcgeom replaces, but both runs go through it: its ``SubMConv3d`` must be
    deterministic and equal a float64 numpy transcription of a submanifold convolution
    (``out[p] = bias + sum_o W[:, o] @ feat[p + o - r]`` over the occupied voxels)."""
    import spconv.pytorch as spconv

    def run():
        t = spconv.SparseConvTensor(feat, torch.cat([batch[:, None], grid], 1).int().contiguous(),
                                    (grid.max(0).values + 96).tolist(), int(batch.max()) + 1)
        return conv(t).features.detach()

    out, out2 = run(), run()
    assert torch.equal(out, out2), "spconv SubMConv3d is not deterministic here"
    w = conv.weight.detach().double().numpy()  # (C_out, k, k, k, C_in)
    k, r = w.shape[1], w.shape[1] // 2
    g = grid.long().numpy()
    b = batch.long().numpy()
    span = int(g.max()) + 2 * k + 1
    key = lambda q: ((b * span + q[:, 0] + k) * span + q[:, 1] + k) * span + q[:, 2] + k  # noqa: E731
    base = key(g)
    order = np.argsort(base)
    f = feat.detach().double().numpy()
    ref = np.zeros((len(g), w.shape[0]))
    for o in np.ndindex(k, k, k):
        kq = key(g + np.array(o) - r)
        j = np.clip(np.searchsorted(base, kq, sorter=order), 0, len(g) - 1)
        hit = base[order[j]] == kq
        ref[hit] += f[order[j[hit]]] @ w[:, o[0], o[1], o[2]].T
    if conv.bias is not None:
        ref += conv.bias.detach().double().numpy()
    close(out, torch.as_tensor(ref), f"spconv SubMConv3d (k={k}) vs float64 transcription", rel=1e-5)


def ptv3_clouds(sizes, seed, extent, grid_size):
    """Two packed clouds, one point per voxel of ``grid_size`` (Pointcept's GridSample does this
    in the data pipeline; spconv's submanifold conv assumes unique voxels).  Voxels are computed
    as ``Point`` does, over the whole batch: ``trunc((coord - coord.min(0)) / grid_size)``."""
    coord, feat, offset = clouds(sizes, seed, extent)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    grid = torch.div(coord - coord.min(0)[0], grid_size, rounding_mode="trunc").long()
    key = torch.cat([batch[:, None], grid], 1)
    _, inv = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((int(inv.max()) + 1,), len(inv), dtype=torch.long).scatter_reduce(
        0, inv, torch.arange(len(inv)), "amin")
    keep = torch.sort(first).values  # the first point of each voxel, in input order
    counts = torch.bincount(batch[keep], minlength=len(sizes))
    return coord[keep].contiguous(), feat[keep].contiguous(), torch.cumsum(counts, 0)


class ScatterLog:
    """Wraps the shim ``torch_scatter`` for PTv3's ``segment_csr`` calls: records the arg index
    of every min/max reduction (torch_scatter's ``segment_max_csr`` second output)."""

    def __init__(self, mod, log):
        self._mod, self._log = mod, log

    def segment_csr(self, src, indptr, out=None, reduce="sum"):
        if reduce in ("min", "max"):
            arg = getattr(self._mod, f"segment_{reduce}_csr")(src.detach(), indptr)[1]
            self._log.append((f"segment_csr {reduce} arg", arg.clone()))
        return self._mod.segment_csr(src, indptr, out=out, reduce=reduce)


def ref_scatter(log):
    def segment_csr(src, indptr, out=None, reduce="sum"):
        assert out is None
        if reduce in ("min", "max"):
            log.append((f"segment_csr {reduce} arg", torch.as_tensor(K.segment_csr(src.detach(), indptr, reduce)[1])))
        return ref_segment_csr(src, indptr, reduce)

    return types.SimpleNamespace(segment_csr=segment_csr)


def ptv3_pair(m, torch_scatter, model, data, name):
    """PT-v3m1 three times: twice through the shims (bit-identical), once on the reference scatter."""
    # Every index the model builds (per stage: serialization codes / orders / inverses, grid
    # coordinates, pooling clusters; attention padding) is logged by forward hooks and must be
    # equal between the runs; pooled coordinates (segment_csr "mean") must be close.
    def run(ts, log):
        hooks = []

        def rec(mod, args, point):
            for k in ("serialized_code", "serialized_order", "serialized_inverse", "grid_coord",
                      "pooling_inverse", "pad", "unpad"):
                if k in point.keys():
                    log.append((f"{type(mod).__name__} {k}", point[k].detach().clone()))
            log.append((f"{type(mod).__name__} coord", point.coord.detach().clone()))

        for mod in model.modules():
            if isinstance(mod, (m.SerializedPooling, m.SerializedAttention)):
                hooks.append(mod.register_forward_hook(rec))
        m.torch_scatter = ts
        try:
            res = step(model, data)
        finally:
            m.torch_scatter = torch_scatter
            for h in hooks:
                h.remove()
        return res

    def split(log):  # float logs (pooled coordinates) are compared to rounding, the rest exactly
        return ([x for x in log if not x[1].is_floating_point()], [x for x in log if x[1].is_floating_point()])

    logs = [[], [], []]
    res = run(ScatterLog(torch_scatter, logs[0]), logs[0])
    res2 = run(ScatterLog(torch_scatter, logs[1]), logs[1])
    rres = run(ref_scatter(logs[2]), logs[2])

    # two runs through the shims are bit-identical
    assert len(logs[0]) == len(logs[1])
    for (n1, a), (n2, b) in zip(logs[0], logs[1]):
        assert n1 == n2 and torch.equal(a, b), f"{name} rerun: {n1} differs"
    (o, g, gp), (o2, g2, gp2) = res, res2
    assert torch.equal(o, o2) and torch.equal(g, g2), f"{name} rerun: output or d/d feat differs"
    assert gp.keys() == gp2.keys() and all(torch.equal(gp[k], gp2[k]) for k in gp), f"{name} rerun: a parameter gradient differs"

    (ilog, flog), (rilog, rflog) = split(logs[0]), split(logs[2])
    assert len(flog) == len(rflog) > 0
    for (n1, a), (n2, b) in zip(flog, rflog):
        assert n1 == n2, (n1, n2)
        close(a, b, f"{name} {n1}", rel=REL64 if a.dtype == torch.float64 else 2e-4)
    n_arg = sum(n.startswith("segment_csr") for n, _ in ilog)
    assert n_arg == 2, n_arg  # one max pooling per SerializedPooling
    n = compare(name, ilog, rilog, res, rres)
    return n, n_arg


def ptv3():
    spconv_on_cpu_torch()
    from pointcept.models.builder import build_model
    from pointcept.models.point_transformer_v3 import point_transformer_v3m1_base as m

    import torch_scatter
    assert getattr(torch_scatter, "__pcgeom_shim__", None) and m.torch_scatter is torch_scatter
    torch.manual_seed(0)
    model = build_model(dict(
        type="PT-v3m1", in_channels=6, order=("z", "z-trans", "hilbert", "hilbert-trans"), stride=(2, 2),
        enc_depths=(2, 2, 2), enc_channels=(16, 32, 48), enc_num_head=(2, 2, 4), enc_patch_size=(32, 32, 32),
        dec_depths=(1, 1), dec_channels=(16, 32), dec_num_head=(2, 2), dec_patch_size=(32, 32), mlp_ratio=2,
        drop_path=0.1, enable_flash=False,
    ))
    model.train()
    grid_size = 0.02
    coord, feat, offset = ptv3_clouds([1500, 900], 3, 0.4, grid_size)
    data = {"coord": coord, "feat": feat, "grid_size": grid_size, "offset": offset}
    batch = torch.repeat_interleave(torch.arange(len(offset)), torch.diff(offset, prepend=offset.new_zeros(1)))
    grid = torch.div(coord - coord.min(0)[0], grid_size, rounding_mode="trunc").int()
    subm_conv_check(model.embedding.stem.conv, feat, batch, grid)

    n, n_arg = 0, 0
    model64, data64 = as_double(model, data)
    for mdl, dat, label in ((model64, data64, "PTv3m1 float64"), (model, data, "PTv3m1 float32")):
        k, n_arg = ptv3_pair(m, torch_scatter, mdl, dat, label)
        n += k
    n_pts = offset.tolist()
    return (f"ptv3: PT-v3m1 (3 stages, patch 32, 4 orders, non-flash attention) on clouds of {n_pts[0]} + "
            f"{n_pts[1] - n_pts[0]} voxels, {n} index outputs exact ({n_arg} segment_csr max args), forward and "
            f"backward match; two runs through the shims bit-identical")


if __name__ == "__main__":
    print("OK", {"ptv1": ptv1, "ptv2": ptv2, "ptv3": ptv3}[sys.argv[1]]())

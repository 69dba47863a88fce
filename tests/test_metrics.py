"""pcgeom.metrics against brute force, scipy, and a literal transcription of the YCB-Video toolbox AUC."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICES
from pcgeom.metrics import (
    accuracy,
    accuracy_curve,
    add,
    add_accuracy,
    add_or_add_s,
    add_s,
    auc,
    object_diameter,
)

F64 = torch.float64


def _rotations(n, g):
    q = torch.randn(n, 4, generator=g, dtype=F64)
    q = q / q.norm(dim=1, keepdim=True)
    w, x, y, z = q.unbind(1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], 1).view(n, 3, 3)


def _poses(B, Nm, *, seed=0, dtype=F64, device="cpu", shared=False):
    g = torch.Generator().manual_seed(seed)
    gt_R = _rotations(B, g)
    pred_R = _rotations(B, g)
    gt_t = torch.randn(B, 3, generator=g, dtype=F64) * 0.1
    pred_t = gt_t + torch.randn(B, 3, generator=g, dtype=F64) * 0.02
    model = torch.randn(*(() if shared else (B,)), Nm, 3, generator=g, dtype=F64) * 0.05
    return [x.to(device=device, dtype=dtype) for x in (pred_R, pred_t, gt_R, gt_t, model)]


def _brute(pred_R, pred_t, gt_R, gt_t, model, symmetric):
    """Per pose, per point, in float64 Python loops over poses."""
    out = []
    for b in range(pred_R.shape[0]):
        m = model if model.dim() == 2 else model[b]
        est = m.to(F64) @ pred_R[b].to(F64).T + pred_t[b].to(F64)
        ref = m.to(F64) @ gt_R[b].to(F64).T + gt_t[b].to(F64)
        if symmetric:
            d = torch.cdist(ref, est, compute_mode="donot_use_mm_for_euclid_dist").min(dim=1).values
        else:
            d = (est - ref).norm(dim=1)
        out.append(d.mean())
    return torch.stack(out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shared", [False, True])
def test_add_and_add_s_match_brute_force(device, shared):
    args = _poses(5, 300, seed=1, device=device, shared=shared)
    for fn, sym in ((add, False), (add_s, True)):
        got = fn(*args)
        assert got.shape == (5,) and got.dtype == F64 and got.device.type == device
        torch.testing.assert_close(got.cpu(), _brute(*[a.cpu() for a in args], sym), rtol=1e-12, atol=1e-14)
    assert (add_s(*args) <= add(*args) + 1e-15).all()  # the nearest point is never farther than the same point


def test_add_s_matches_scipy_kdtree_direction_gt_to_prediction():
    spatial = pytest.importorskip("scipy.spatial")
    pred_R, pred_t, gt_R, gt_t, model = _poses(3, 500, seed=2)
    got = add_s(pred_R, pred_t, gt_R, gt_t, model)
    for b in range(3):
        est = (model[b] @ pred_R[b].T + pred_t[b]).numpy()
        ref = (model[b] @ gt_R[b].T + gt_t[b]).numpy()
        d, _ = spatial.cKDTree(est).query(ref, k=1)  # YCB toolbox / BOP adi: from gt points into the estimate
        assert abs(got[b].item() - d.mean()) < 1e-12
        d_rev, _ = spatial.cKDTree(ref).query(est, k=1)
        assert abs(got[b].item() - d_rev.mean()) > 1e-6  # the other direction is a different number


def test_symmetric_object_scores_zero_add_s_but_not_add():
    # a ring about z is symmetric under any rotation about z that maps the ring onto itself
    n = 36
    ang = torch.arange(n, dtype=F64) * (2 * math.pi / n)
    ring = torch.stack([torch.cos(ang), torch.sin(ang), torch.zeros(n, dtype=F64)], 1) * 0.05
    a = 2 * math.pi / n * 5
    Rz = torch.tensor([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]], dtype=F64)
    eye, t = torch.eye(3, dtype=F64), torch.tensor([0.1, 0.2, 0.7], dtype=F64)
    assert add_s(Rz, t, eye, t, ring).item() < 1e-12
    assert add(Rz, t, eye, t, ring).item() > 0.04
    both = add_or_add_s(torch.stack([Rz, Rz]), torch.stack([t, t]), torch.stack([eye, eye]), torch.stack([t, t]),
                        ring, torch.tensor([True, False]))
    assert both[0].item() < 1e-12 and both[1].item() > 0.04
    assert add_or_add_s(Rz, t, eye, t, ring, True).item() < 1e-12


def test_model_lengths_mask_padding():
    pred_R, pred_t, gt_R, gt_t, model = _poses(3, 80, seed=3)
    lengths = torch.tensor([80, 33, 1])
    padded = model.clone()
    padded[1, 33:] = 1e3  # garbage that must not count
    padded[2, 1:] = -1e3
    for fn, sym in ((add, False), (add_s, True)):
        got = fn(pred_R, pred_t, gt_R, gt_t, padded, model_lengths=lengths)
        for b, L in enumerate(lengths.tolist()):
            ref = _brute(pred_R[b:b + 1], pred_t[b:b + 1], gt_R[b:b + 1], gt_t[b:b + 1], model[b:b + 1, :L], sym)
            torch.testing.assert_close(got[b:b + 1], ref, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="model_lengths must be >= 1"):
        add(pred_R, pred_t, gt_R, gt_t, model, model_lengths=torch.tensor([3, 0, 2]))


def test_unbatched_float32_and_gradients():
    pred_R, pred_t, gt_R, gt_t, model = _poses(1, 100, seed=4, dtype=torch.float32)
    one = add(pred_R[0], pred_t[0], gt_R[0], gt_t[0], model[0])
    assert one.shape == () and one.dtype == torch.float32
    torch.testing.assert_close(one.double(), _brute(pred_R, pred_t, gt_R, gt_t, model, False)[0], rtol=1e-5, atol=1e-7)
    # gradients stay finite even where ADD-S is exactly zero (prediction == ground truth)
    R = gt_R[0].double().clone().requires_grad_()
    t = gt_t[0].double().clone().requires_grad_()
    for fn in (add, add_s):
        val = fn(R, t, gt_R[0].double(), gt_t[0].double(), model[0].double())
        assert val.item() == 0
        gR, gt = torch.autograd.grad(val, [R, t])
        assert torch.isfinite(gR).all() and torch.isfinite(gt).all()
    # and away from zero they match finite differences
    Rp = pred_R[0].double().clone().requires_grad_()
    tp = pred_t[0].double().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda R_, t_: add_s(R_, t_, gt_R[0].double(), gt_t[0].double(), model[0].double()),
                                    (Rp, tp))


def test_object_diameter_brute_force():
    g = torch.Generator().manual_seed(5)
    pts = torch.randn(2, 400, 3, generator=g, dtype=F64)
    expect = torch.stack([torch.pdist(p).max() for p in pts])
    torch.testing.assert_close(object_diameter(pts), expect, rtol=0, atol=1e-12)
    assert object_diameter(pts[0]).shape == ()
    lengths = torch.tensor([400, 17])
    torch.testing.assert_close(object_diameter(pts, model_lengths=lengths)[1], torch.pdist(pts[1, :17]).max())
    assert object_diameter(torch.zeros(1, 3)).item() == 0


def test_accuracy_thresholds_are_strict():
    d = torch.tensor([0.01, 0.02, 0.03, float("inf"), float("nan")], dtype=F64)
    assert accuracy(d, 0.02).item() == pytest.approx(1 / 5)   # 0.02 itself is not below 0.02
    assert accuracy(d, 0.0201).item() == pytest.approx(2 / 5)
    d2 = torch.tensor([0.009, 0.021, 0.03, float("inf"), float("nan")], dtype=F64)
    diam = torch.tensor([0.1, 0.2, 0.5, 1.0, 1.0], dtype=F64)  # per-pose object diameters
    assert add_accuracy(d2, diam).item() == pytest.approx(2 / 5)  # 0.009 < 0.01, 0.03 < 0.05
    assert add_accuracy(d2, diam, fraction=0.11).item() == pytest.approx(3 / 5)
    assert add_accuracy(torch.tensor([0.25, 0.125]), 0.5, fraction=0.5).item() == 0.5  # exactly 0.25 fails
    assert add_accuracy([0.004, 0.012], 0.1).item() == 0.5


def _vocap_literal(distances, max_distance=0.1):
    """plot_accuracy_keyframe.m + VOCap, transcribed loop by loop (MATLAB's 1-based indices kept in mind)."""
    D = [math.inf if (d > max_distance) else d for d in distances]
    d = sorted(D, key=lambda v: (math.isnan(v), v))
    n = len(d)
    acc = [(i + 1) / n for i in range(n)]
    rec = [v for v in d if math.isfinite(v)]
    prec = [a for v, a in zip(d, acc) if math.isfinite(v)]
    if not rec:
        return 0.0
    mrec = [0.0] + rec + [max_distance]
    mpre = [0.0] + prec + [prec[-1]]
    for i in range(1, len(mpre)):
        mpre[i] = max(mpre[i], mpre[i - 1])
    total = 0.0
    for i in range(1, len(mrec)):
        if mrec[i] != mrec[i - 1]:
            total += (mrec[i] - mrec[i - 1]) * mpre[i]
    return total / max_distance


@pytest.mark.parametrize("seed", range(4))
def test_auc_matches_the_ycb_toolbox(seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(300, generator=g, dtype=F64) * 0.14
    d[:20] = torch.round(d[:20] * 100) / 100  # exact ties, including at 0.1 itself
    d[20:25] = 0.0
    d[25] = float("inf")
    d[26] = float("nan")
    got = auc(d).item()
    assert got == pytest.approx(_vocap_literal(d.tolist()), abs=1e-12)
    # the closed form in the docstring
    finite = torch.sort(d[torch.isfinite(d) & (d <= 0.1)]).values
    K, n = finite.numel(), d.numel()
    assert got == pytest.approx((K * 0.1 - finite[:-1].sum().item()) / (n * 0.1), abs=1e-12)
    assert auc(d, max_distance=0.05).item() == pytest.approx(_vocap_literal(d.tolist(), 0.05), abs=1e-12)


def test_auc_edge_cases_and_curve():
    assert auc(torch.zeros(7)).item() == 1.0
    assert auc(torch.full((4,), 0.2)).item() == 0.0
    assert auc(torch.tensor([float("nan")])).item() == 0.0
    # the toolbox's right-end rule credits (0, d_K] with the accuracy reached at d_K,
    # so a lone pose below 0.1 scores 1 (the exact step-curve integral would be 0.5)
    assert auc([0.05]).item() == 1.0
    assert auc([0.05, 0.2]).item() == pytest.approx(0.5)
    x, y = accuracy_curve(torch.tensor([0.03, 0.01, 0.5], dtype=F64))
    assert x.tolist() == [0.0, 0.01, 0.03, 0.1]
    assert y.tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 2 / 3])
    # close to, but (by the toolbox's right-end rule) at least, the exact integral of the step curve
    d = torch.rand(1000, generator=torch.Generator().manual_seed(9), dtype=F64) * 0.12
    exact = (1 - d / 0.1).clamp(min=0).mean().item()
    assert exact <= auc(d).item() <= exact + 1 / 1000


def test_metric_errors():
    pred_R, pred_t, gt_R, gt_t, model = _poses(2, 10, seed=6)
    with pytest.raises(ValueError, match=r"add: pred_t must have shape \(B, 3\) with B=2, got \(2, 4\)"):
        add(pred_R, torch.zeros(2, 4, dtype=F64), gt_R, gt_t, model)
    with pytest.raises(ValueError, match=r"add_s: model_points must have shape \(Nm, 3\) or \(B, Nm, 3\) with B=2"):
        add_s(pred_R, pred_t, gt_R, gt_t, model[:1])
    with pytest.raises(TypeError, match="add: gt_t must have the dtype of pred_R"):
        add(pred_R, pred_t, gt_R, gt_t.float(), model)
    with pytest.raises(ValueError, match=r"add_or_add_s: symmetric must have shape \(2,\)"):
        add_or_add_s(pred_R, pred_t, gt_R, gt_t, model, torch.tensor([True]))
    with pytest.raises(ValueError, match="auc: distances must be >= 0"):
        auc(torch.tensor([0.1, -0.01]))
    with pytest.raises(ValueError, match=r"accuracy_curve: distances must have shape \(N,\)"):
        accuracy_curve(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="max_distance must be > 0"):
        auc(torch.zeros(3), max_distance=0)
    with pytest.raises(ValueError, match="object_diameter: model_points must have shape"):
        object_diameter(torch.zeros(5, 2))

"""DenseFusion losses and lib/knn shim: parity with independent transcriptions of the originals.

The oracle below re-derives DenseFusion's ``lib/loss.py`` and
``lib/loss_refiner.py`` from their published semantics (see
shared/reference/anchors.md, section c) in the original's own style: repeated
model points, ``bmm`` with the transposed rotation, and for symmetric objects
a dense distance matrix with ``argmin`` standing in for the 1-based
``lib/knn`` search.  It runs in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import DEVICES
from pcgeom.compat.densefusion import KNearestNeighbor
from pcgeom.losses import PoseLossResult, RefineLossResult, pose_loss, refine_loss
from pcgeom.losses.densefusion import Loss, Loss_refine, quaternion_to_matrix

LINEMOD_SYM = [7, 8]
F64 = torch.float64


# --------------------------------------------------------------------------- #
# the oracle: a float64 transcription of the two original loss functions
# --------------------------------------------------------------------------- #


def _oracle_knn_1based(ref, query, chunk=16384):
    """lib/knn semantics: (1,3,Nr), (1,3,Nq) -> (1,1,Nq) 1-based nearest ref index per query.

    A scipy KD-tree when available (fast; random float64 inputs have no exact
    ties), else a dense distance matrix with argmin (first minimum = lower
    index).  Exact ties are covered by dedicated tests.
    """
    T = ref[0].transpose(0, 1)
    Q = query[0].transpose(0, 1)
    try:
        from scipy.spatial import cKDTree
    except ImportError:
        best = []
        for s in range(0, Q.shape[0], chunk):  # chunked only to keep the test's own memory small
            d = torch.cdist(Q[s : s + chunk], T, compute_mode="donot_use_mm_for_euclid_dist")
            best.append(torch.argmin(d, dim=1))
        best = torch.cat(best)
    else:
        best = torch.from_numpy(cKDTree(T.numpy()).query(Q.numpy(), k=1)[1]).to(torch.int64)
    return (best + 1).view(1, 1, -1)


def _oracle_rotation(q):
    """The original's 9-entry concatenation, for q (n, 4) already normalised, w first."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return torch.stack(
        [1 - 2 * (y * y + z * z), 2 * x * y - 2 * w * z, 2 * w * y + 2 * x * z,
         2 * x * y + 2 * z * w, 1 - 2 * (x * x + z * z), -2 * w * x + 2 * y * z,
         -2 * w * y + 2 * x * z, 2 * w * x + 2 * y * z, 1 - 2 * (x * x + y * y)], dim=1).view(-1, 3, 3)


def oracle_loss(pred_r, pred_t, pred_c, target, model_points, idx, points, w, refine, num_point_mesh, sym_list):
    bs, num_p, _ = pred_c.shape
    Nm = num_point_mesh
    q = pred_r / torch.norm(pred_r, dim=2).view(bs, num_p, 1)
    ori_base = _oracle_rotation(q.reshape(bs * num_p, 4))
    base = ori_base.transpose(2, 1)
    model_points = model_points.view(bs, 1, Nm, 3).repeat(1, num_p, 1, 1).view(bs * num_p, Nm, 3)
    target = target.view(bs, 1, Nm, 3).repeat(1, num_p, 1, 1).view(bs * num_p, Nm, 3)
    ori_target = target
    pred_t = pred_t.reshape(bs * num_p, 1, 3)
    ori_t = pred_t
    points = points.reshape(bs * num_p, 1, 3)
    pred_c = pred_c.reshape(bs * num_p)
    pred = torch.bmm(model_points, base) + (points + pred_t)
    if not refine and int(idx.view(-1)[0]) in sym_list:
        T = target[0].transpose(1, 0).contiguous().view(3, -1)
        Q = pred.permute(2, 0, 1).contiguous().view(3, -1)
        inds = _oracle_knn_1based(T.unsqueeze(0), Q.detach().unsqueeze(0))
        target = torch.index_select(T, 1, inds.view(-1) - 1)
        target = target.view(3, bs * num_p, Nm).permute(1, 2, 0)
        pred = Q.view(3, bs * num_p, Nm).permute(1, 2, 0)
    dis = torch.mean(torch.norm(pred - target, dim=2), dim=1)
    loss = torch.mean(dis * pred_c - w * torch.log(pred_c), dim=0)
    which_max = torch.max(pred_c.view(bs, num_p), 1)[1]
    dis = dis.view(bs, num_p)
    t = ori_t[which_max[0]] + points[which_max[0]]
    R = ori_base[which_max[0]].view(1, 3, 3)
    new_points = torch.bmm(points.view(1, bs * num_p, 3) - t.repeat(bs * num_p, 1).view(1, bs * num_p, 3), R)
    new_target = torch.bmm(ori_target[0].view(1, Nm, 3) - t.repeat(Nm, 1).view(1, Nm, 3), R)
    return loss, dis[0][which_max[0]], new_points.detach(), new_target.detach()


def oracle_loss_refine(pred_r, pred_t, target, model_points, idx, points, num_point_mesh, sym_list):
    Nm = num_point_mesh
    q = pred_r.view(1, 1, -1)
    q = q / torch.norm(q, dim=2).view(1, 1, 1)
    ori_base = _oracle_rotation(q.view(1, 4))
    pred_t = pred_t.view(1, 1, 3)
    target = target.view(1, Nm, 3)
    ori_target = target
    pred = torch.bmm(model_points.view(1, Nm, 3), ori_base.transpose(2, 1)) + pred_t
    if int(idx.view(-1)[0]) in sym_list:  # no refine guard in the refiner
        T = target[0].transpose(1, 0).contiguous().view(3, -1)
        Q = pred.permute(2, 0, 1).contiguous().view(3, -1)
        inds = _oracle_knn_1based(T.unsqueeze(0), Q.detach().unsqueeze(0))
        target = torch.index_select(T, 1, inds.view(-1) - 1).view(3, 1, Nm).permute(1, 2, 0)
        pred = Q.view(3, 1, Nm).permute(1, 2, 0)
    dis = torch.mean(torch.norm(pred - target, dim=2), dim=1)
    n = points.shape[1]
    t = pred_t[0]
    new_points = torch.bmm(points.view(1, n, 3) - t.repeat(n, 1).view(1, n, 3), ori_base)
    new_target = torch.bmm(ori_target[0].view(1, Nm, 3) - t.repeat(Nm, 1).view(1, Nm, 3), ori_base)
    return dis, new_points.detach(), new_target.detach()


# --------------------------------------------------------------------------- #
# realistic inputs (meters; objects ~10 cm; hypotheses scattered around the truth)
# --------------------------------------------------------------------------- #


def _random_rotation(n, g, dtype=F64):
    q = torch.randn(n, 4, generator=g, dtype=F64)
    return _oracle_rotation(q / q.norm(dim=1, keepdim=True)).to(dtype)


def make_pose_inputs(P, Nm, *, bs=1, seed=0, dtype=F64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    model = torch.randn(bs, Nm, 3, generator=g, dtype=F64) * torch.tensor([0.05, 0.03, 0.02], dtype=F64)
    R = _random_rotation(bs, g)
    t = torch.tensor([0.0, 0.0, 0.8], dtype=F64) + 0.05 * torch.randn(bs, 3, generator=g, dtype=F64)
    target = torch.bmm(model, R.transpose(1, 2)) + t[:, None]
    points = target[:, torch.randint(0, Nm, (P,), generator=g)] + 0.003 * torch.randn(bs, P, 3, generator=g, dtype=F64)
    q_true = torch.tensor([1.0, 0, 0, 0], dtype=F64)  # hypotheses near some rotation, then perturbed
    pred_r = q_true + 0.8 * torch.randn(bs, P, 4, generator=g, dtype=F64)
    pred_t = (t[:, None] - points) + 0.01 * torch.randn(bs, P, 3, generator=g, dtype=F64)
    pred_c = torch.sigmoid(torch.randn(bs, P, 1, generator=g, dtype=F64))
    out = [pred_r, pred_t, pred_c, target, model, points]
    return [x.to(device=device, dtype=dtype).requires_grad_(i < 3) for i, x in enumerate(out)]


def make_refine_inputs(P, Nm, *, seed=0, dtype=F64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    model = torch.randn(1, Nm, 3, generator=g, dtype=F64) * 0.04
    R = _random_rotation(1, g)
    target = torch.bmm(model, R.transpose(1, 2)) + 0.02 * torch.randn(1, 1, 3, generator=g, dtype=F64)
    points = target[:, torch.randint(0, Nm, (P,), generator=g)] + 0.002 * torch.randn(1, P, 3, generator=g, dtype=F64)
    pred_r = torch.randn(1, 4, generator=g, dtype=F64)
    pred_t = 0.01 * torch.randn(1, 3, generator=g, dtype=F64)
    out = [pred_r, pred_t, target, model, points]
    return [x.to(device=device, dtype=dtype).requires_grad_(i < 2) for i, x in enumerate(out)]


def _grads(outputs, inputs):
    total = sum(o.sum() for o in outputs if o.requires_grad)
    return torch.autograd.grad(total, inputs)


def _close(a, b, tol):
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a.to(F64), b.to(F64), rtol=tol, atol=tol)


# --------------------------------------------------------------------------- #
# parity
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("symmetric,refine", [(False, False), (True, False), (True, True)])
def test_loss_parity_float64_linemod(symmetric, refine):
    P = Nm = 500  # LineMOD
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, seed=1)
    idx = torch.tensor([[7 if symmetric else 2]])
    ours = Loss(Nm, LINEMOD_SYM)(pred_r, pred_t, pred_c, target, model, idx, points, 0.015, refine)
    ref = oracle_loss(pred_r, pred_t, pred_c, target, model, idx, points, 0.015, refine, Nm, LINEMOD_SYM)
    assert ours[0].shape == () and ours[1].shape == ()
    for a, b in zip(ours, ref):
        _close(a, b, 1e-9)
    for ga, gb in zip(_grads(ours[:2], [pred_r, pred_t, pred_c]), _grads(ref[:2], [pred_r, pred_t, pred_c])):
        assert ga.abs().max() > 0
        _close(ga, gb, 1e-9)


def test_symmetric_branch_changes_the_loss():
    # guards the test above: the symmetric pairing must actually matter on these inputs
    P = Nm = 60
    args = make_pose_inputs(P, Nm, seed=2)
    crit = Loss(Nm, LINEMOD_SYM)
    plain = crit(*args[:5], torch.tensor([[2]]), args[5], 0.015, False)[0]
    sym = crit(*args[:5], torch.tensor([[8]]), args[5], 0.015, False)[0]
    sym_refine = crit(*args[:5], torch.tensor([[8]]), args[5], 0.015, True)[0]
    assert sym < plain - 1e-3
    assert sym_refine == plain


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("symmetric", [False, True])
def test_loss_parity_float32(device, symmetric):
    P, Nm = 200, 300
    args = make_pose_inputs(P, Nm, seed=3, dtype=torch.float32, device=device)
    idx = torch.tensor([[8 if symmetric else 0]], device=device)
    ours = Loss(Nm, LINEMOD_SYM)(*args[:5], idx, args[5], 0.015, False)
    args64 = [a.detach().to(F64).requires_grad_(a.requires_grad) for a in args]
    ref = oracle_loss(*args64[:5], idx, args64[5], 0.015, False, Nm, LINEMOD_SYM)
    for a, b in zip(ours, ref):
        assert a.dtype == torch.float32
        _close(a, b, 2e-5)  # float32 rounding; a near-tie may flip a pairing, which moves dis by ~1e-7
    for ga, gb in zip(_grads(ours[:2], args[:3]), _grads(ref[:2], args64[:3])):
        _close(ga, gb, 2e-4)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-9), (torch.float32, 2e-5)])
def test_loss_refine_parity(symmetric, dtype, tol):
    P = Nm = 500
    pred_r, pred_t, target, model, points = make_refine_inputs(P, Nm, seed=4, dtype=dtype)
    idx = torch.tensor([[12 if symmetric else 1]])
    sym_list = [12, 15, 18, 19, 20]
    ours = Loss_refine(Nm, sym_list)(pred_r, pred_t, target, model, idx, points)
    r64 = [x.detach().to(F64).requires_grad_(x.requires_grad) for x in (pred_r, pred_t, target, model, points)]
    ref = oracle_loss_refine(*r64[:4], idx, r64[4], Nm, sym_list)
    assert ours[0].shape == (1,)
    for a, b in zip(ours, ref):
        assert a.dtype == dtype
        _close(a, b, tol)
    for ga, gb in zip(_grads(ours[:1], [pred_r, pred_t]), _grads(ref[:1], r64[:2])):
        _close(ga, gb, tol * 10)


def test_loss_refine_symmetric_even_when_unrefined_would_not_be():
    # Loss_refine has no `refine` guard: a symmetric object is always re-paired,
    # so a symmetric rotation of the model costs nothing.
    Nm = 64
    ang = torch.linspace(0, 2 * math.pi, Nm + 1, dtype=F64)[:-1]
    ring = torch.stack([torch.cos(ang), torch.sin(ang), torch.zeros_like(ang)], 1)[None] * 0.05
    c, s = math.cos(math.pi / 32), math.sin(math.pi / 32)  # one ring step about z (quaternion half angle)
    pred_r = torch.tensor([[c, 0, 0, s]], dtype=F64, requires_grad=True)
    pred_t = torch.zeros(1, 3, dtype=F64, requires_grad=True)
    crit = Loss_refine(Nm, [3])
    dis_sym = crit(pred_r, pred_t, ring, ring, torch.tensor([[3]]), ring)[0]
    dis_plain = crit(pred_r, pred_t, ring, ring, torch.tensor([[0]]), ring)[0]
    assert dis_sym.item() < 1e-12 and dis_plain.item() > 4e-3


def test_ties_pair_with_the_lower_target_index():
    # Two target points equidistant from every predicted point: the lower index wins,
    # which decides the gradient (towards +x for index 0, -x for index 1).
    target = torch.tensor([[[1.0, 0, 0], [-1.0, 0, 0]]], dtype=F64, requires_grad=True)
    model = torch.zeros(1, 2, 3, dtype=F64)
    pred_r = torch.tensor([[1.0, 0, 0, 0]], dtype=F64, requires_grad=True)
    pred_t = torch.zeros(1, 3, dtype=F64, requires_grad=True)
    dis, _, _ = Loss_refine(2, [0])(pred_r, pred_t, target, model, torch.tensor([[0]]), torch.zeros(1, 1, 3, dtype=F64))
    dis.backward()
    assert dis.item() == 1.0
    assert pred_t.grad.tolist() == [[-1.0, 0.0, 0.0]]
    assert target.grad[0, 1].abs().max() == 0 and target.grad[0, 0, 0] == 1.0


def test_confidence_ties_pick_the_first_hypothesis():
    P, Nm = 6, 10
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, seed=5)
    pred_c = torch.full((1, P, 1), 0.5, dtype=F64, requires_grad=True)
    loss, dis, new_points, new_target = Loss(Nm, [])(pred_r, pred_t, pred_c, target, model, 0, points, 0.015, False)
    R0 = quaternion_to_matrix(pred_r[0, 0]).detach()
    t0 = (points[0, 0] + pred_t[0, 0]).detach()
    _close(new_target[0], (target[0].detach() - t0) @ R0, 1e-12)
    _close(new_points[0], (points[0] - t0) @ R0, 1e-12)
    ref = oracle_loss(pred_r, pred_t, pred_c, target, model, torch.tensor([0]), points, 0.015, False, Nm, [])
    _close(dis, ref[1], 1e-12)


# --------------------------------------------------------------------------- #
# gradients, detaching, batching
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("symmetric", [False, True])
def test_loss_gradcheck(symmetric):
    P, Nm = 4, 7
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, seed=6)
    crit = Loss(Nm, [5])
    idx = torch.tensor([[5 if symmetric else 1]])

    def f(r, t, c):
        loss, dis, _, _ = crit(r, t, c, target, model, idx, points, 0.015, False)
        return loss, dis

    assert torch.autograd.gradcheck(f, (pred_r, pred_t, pred_c))


@pytest.mark.parametrize("symmetric", [False, True])
def test_loss_refine_gradcheck(symmetric):
    pred_r, pred_t, target, model, points = make_refine_inputs(5, 9, seed=7)
    crit = Loss_refine(9, [5])
    idx = torch.tensor([[5 if symmetric else 1]])
    assert torch.autograd.gradcheck(lambda r, t: crit(r, t, target, model, idx, points)[0], (pred_r, pred_t))


def test_batched_forms_gradcheck():
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(3, 5, bs=3, seed=21)  # no near-ties (gap > 1e-3)
    sym = torch.tensor([True, False, True])
    # fast_mode: a random projection of the Jacobian, a few evaluations instead of one per input entry
    assert torch.autograd.gradcheck(
        lambda r, t, c: pose_loss(r, t, c, target, model, points, 0.015, symmetric=sym)[:2], (pred_r, pred_t, pred_c),
        fast_mode=True)
    r = pred_r[:, 0].detach().clone().requires_grad_()
    t = (pred_t[:, 0] + points[:, 0]).detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda r, t: refine_loss(r, t, target, model, points, symmetric=sym).dis, (r, t),
                                    fast_mode=True)


def test_outputs_are_detached_and_graphs_reach_predictions():
    P, Nm = 20, 30
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, seed=9)
    target.requires_grad_()
    points.requires_grad_()
    loss, dis, new_points, new_target = Loss(Nm, [1])(pred_r, pred_t, pred_c, target, model, 1, points, 0.015, False)
    assert loss.requires_grad and dis.requires_grad
    assert not new_points.requires_grad and not new_target.requires_grad
    gr, gt, gc = torch.autograd.grad(loss, [pred_r, pred_t, pred_c])
    assert all(g.abs().sum() > 0 for g in (gr, gt, gc))
    d2, np2, nt2 = Loss_refine(Nm, [1])(pred_r[0, :1], pred_t[0, :1], target, model, 1, points)
    assert d2.requires_grad and not np2.requires_grad and not nt2.requires_grad


def test_refine_chain_returns_the_frame_of_the_prediction():
    # new_points/new_target of one refinement are the inputs of the next: a
    # prediction equal to the true residual pose maps new_target onto the model.
    g = torch.Generator().manual_seed(10)
    model = torch.randn(1, 40, 3, generator=g, dtype=F64) * 0.05
    q = torch.tensor([0.9, 0.1, -0.3, 0.2], dtype=F64)
    R = quaternion_to_matrix(q)
    t = torch.tensor([0.01, -0.02, 0.03], dtype=F64)
    target = model @ R.T + t
    crit = Loss_refine(40, [])
    dis, new_points, new_target = crit(q[None], t[None], target, model, 0, target.clone())
    assert dis.item() < 1e-12
    _close(new_target, model, 1e-12)
    _close(new_points, model, 1e-12)


def test_batched_pose_loss_matches_per_sample_modules():
    B, P, Nm = 3, 30, 40
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, bs=B, seed=11)
    sym = torch.tensor([True, False, True])
    out = pose_loss(pred_r, pred_t, pred_c, target, model, points, 0.02, symmetric=sym)
    assert isinstance(out, PoseLossResult) and out.dis.shape == (B,)
    crit = Loss(Nm, [1])
    losses = []
    for b in range(B):
        l, d, npb, ntb = crit(pred_r[b:b + 1], pred_t[b:b + 1], pred_c[b:b + 1], target[b:b + 1], model[b:b + 1],
                              torch.tensor([[int(sym[b])]]), points[b:b + 1], 0.02, False)
        losses.append(l)
        _close(out.dis[b], d, 1e-12)
        _close(out.new_points[b], npb[0], 1e-12)
        _close(out.new_target[b], ntb[0], 1e-12)
        # (R, t) is the pose that produced new_target: R^T (target - t)
        _close((target[b].detach() - out.t[b]) @ out.R[b], ntb[0], 1e-12)
    _close(out.loss, torch.stack(losses).mean(), 1e-12)
    assert not out.R.requires_grad and not out.t.requires_grad
    # pred_c may also be (B, P)
    _close(pose_loss(pred_r, pred_t, pred_c[..., 0], target, model, points, 0.02, symmetric=sym).loss, out.loss, 0)


def test_batched_refine_loss_matches_per_sample_module():
    B, P, Nm = 4, 25, 35
    g = torch.Generator().manual_seed(12)
    r = torch.randn(B, 4, generator=g, dtype=F64, requires_grad=True)
    t = torch.randn(B, 3, generator=g, dtype=F64, requires_grad=True)
    target = torch.randn(B, Nm, 3, generator=g, dtype=F64)
    model = torch.randn(B, Nm, 3, generator=g, dtype=F64)
    points = torch.randn(B, P, 3, generator=g, dtype=F64)
    sym = torch.tensor([False, True, True, False])
    out = refine_loss(r, t, target, model, points, symmetric=sym)
    assert isinstance(out, RefineLossResult)
    crit = Loss_refine(Nm, [1])
    for b in range(B):
        ref = crit(r[b:b + 1], t[b:b + 1], target[b:b + 1], model[b:b + 1], torch.tensor([[int(sym[b])]]), points[b:b + 1])
        _close(out.dis[b:b + 1], ref[0], 1e-12)
        _close(out.new_points[b:b + 1], ref[1], 1e-12)
        _close(out.new_target[b:b + 1], ref[2], 1e-12)
    all_sym = refine_loss(r, t, target, model, points, symmetric=True).dis
    none_sym = refine_loss(r, t, target, model, points).dis
    _close(out.dis, torch.where(sym, all_sym, none_sym), 1e-12)


def test_bs_greater_than_one_follows_the_original_when_not_symmetric():
    bs, P, Nm = 2, 10, 12
    args = make_pose_inputs(P, Nm, bs=bs, seed=13)
    idx = torch.tensor([[0], [1]])
    ours = Loss(Nm, [5])(*args[:5], idx, args[5], 0.015, False)
    ref = oracle_loss(*args[:5], idx, args[5], 0.015, False, Nm, [5])
    assert ours[2].shape == (1, bs * P, 3)
    for a, b in zip(ours, ref):
        _close(a, b, 1e-12)
    with pytest.raises(ValueError, match="bs=1 only"):
        Loss(Nm, [0])(*args[:5], idx, args[5], 0.015, False)


def test_quaternion_convention():
    scipy_rot = pytest.importorskip("scipy.spatial.transform").Rotation
    q = torch.randn(50, 4, dtype=F64) * 3
    R = quaternion_to_matrix(q)
    qn = (q / q.norm(dim=1, keepdim=True)).numpy()
    expect = scipy_rot.from_quat(qn[:, [1, 2, 3, 0]]).as_matrix()  # scipy is scalar-last
    torch.testing.assert_close(R, torch.from_numpy(expect), rtol=0, atol=1e-12)
    assert torch.isnan(quaternion_to_matrix(torch.zeros(4, dtype=F64))).all()  # no epsilon, like the original


# --------------------------------------------------------------------------- #
# memory: the symmetric matching never builds an Nm x (P*Nm) matrix
# --------------------------------------------------------------------------- #


class _AllocationTracker(TorchDispatchMode):
    """Records the largest tensor produced by any op, and which ops ran."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.largest_op = None
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                n = t.untyped_storage().nbytes()
                if n > self.largest:
                    self.largest, self.largest_op = n, str(func)
        self.calls.append((str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return out


def _ycb_forward_backward(loss_fn, P, Nm):
    """Runs forward+backward on fake tensors: shapes and allocations only, no arithmetic."""
    with FakeTensorMode():
        pred_r = torch.randn(1, P, 4, requires_grad=True)
        pred_t = torch.randn(1, P, 3, requires_grad=True)
        pred_c = torch.rand(1, P, 1).requires_grad_()
        target, model, points = torch.randn(1, Nm, 3), torch.randn(1, Nm, 3), torch.randn(1, P, 3)
        with _AllocationTracker() as tracker:
            loss, dis, _, _ = loss_fn(pred_r, pred_t, pred_c, target, model, 12, points, 0.015, False)
            (loss + dis).backward()
            assert pred_r.grad.shape == pred_r.shape and pred_c.grad.shape == pred_c.shape
    return tracker


def test_ycb_symmetric_config_memory_is_bounded():
    P, Nm = 1000, 2600  # YCB: 1000 hypotheses, 2600 mesh points, symmetric (024_bowl is 12)
    tracker = _ycb_forward_backward(Loss(Nm, [12, 15, 18, 19, 20]), P, Nm)
    matrix = Nm * P * Nm * 4  # the original's float32 distance matrix: 27 GB
    per_hypothesis_set = P * Nm * 3 * 4  # the predicted points themselves: 31 MB
    assert tracker.largest <= 2 * per_hypothesis_set, (tracker.largest, tracker.largest_op)
    assert tracker.largest < matrix / 500
    knn_calls = [shapes for name, shapes in tracker.calls if name.startswith("pcgeom.knn")]
    assert knn_calls and knn_calls[0][:2] == [(1, P * Nm, 3), (1, Nm, 3)]


def test_allocation_tracker_catches_the_dense_formulation():
    # the tracker must fail an implementation that builds the distance matrix
    P, Nm = 1000, 2600

    def dense(pred_r, pred_t, pred_c, target, model, idx, points, w, refine):
        R = quaternion_to_matrix(pred_r)
        pred = (model[:, None] @ R.transpose(-1, -2) + (points + pred_t)[:, :, None]).reshape(-1, 3)
        d = torch.cdist(target[0], pred)  # (Nm, P*Nm)
        paired = target[0][d.argmin(0)].view(1, P, Nm, 3)
        dis = (pred.view(1, P, Nm, 3) - paired).norm(dim=-1).mean(-1)
        return (dis * pred_c[..., 0]).mean(), dis[0, 0], None, None

    tracker = _ycb_forward_backward(dense, P, Nm)
    assert tracker.largest >= Nm * P * Nm * 4


def test_real_linemod_symmetric_run_stays_small():
    P = Nm = 500
    args = make_pose_inputs(P, Nm, seed=14, dtype=torch.float32)
    with _AllocationTracker() as tracker:
        loss, dis, _, _ = Loss(Nm, LINEMOD_SYM)(*args[:5], torch.tensor([[7]]), args[5], 0.015, False)
        (loss + dis).backward()
    assert tracker.largest <= 2 * P * Nm * 3 * 4  # 6 MB; the original allocates 500 MB here


# --------------------------------------------------------------------------- #
# input validation
# --------------------------------------------------------------------------- #


def test_errors_name_function_argument_and_shapes():
    P, Nm = 10, 20
    pred_r, pred_t, pred_c, target, model, points = make_pose_inputs(P, Nm, seed=15)
    crit = Loss(Nm, [1])
    with pytest.raises(ValueError, match=r"Loss: target must have shape \(bs, num_points_mesh, 3\) = \(1, 20, 3\), got \(1, 19, 3\)"):
        crit(pred_r, pred_t, pred_c, target[:, :19], model, 0, points, 0.015, False)
    with pytest.raises(ValueError, match=r"Loss: pred_t must have shape"):
        crit(pred_r, pred_t[:, :5], pred_c, target, model, 0, points, 0.015, False)
    with pytest.raises(TypeError, match="Loss: points must have the dtype of pred_r"):
        crit(pred_r, pred_t, pred_c, target, model, 0, points.float(), 0.015, False)
    with pytest.raises(TypeError, match="Loss: idx must be an integer"):
        crit(pred_r, pred_t, pred_c, target, model, 0.5, points, 0.015, False)
    with pytest.raises(TypeError, match="Loss: w must be a float"):
        crit(pred_r, pred_t, pred_c, target, model, 0, points, "0.015", False)
    with pytest.raises(TypeError, match="sym_list"):
        Loss(Nm, 3)
    with pytest.raises(ValueError, match="num_points_mesh must be >= 1"):
        Loss_refine(0, [])
    with pytest.raises(ValueError, match="Loss_refine: pred_r must hold exactly 4 values"):
        Loss_refine(Nm, [])(pred_r[0, :2], pred_t[0, :1], target, model, 0, points)
    with pytest.raises(ValueError, match=r"pose_loss: symmetric must have shape \(1,\)"):
        pose_loss(pred_r, pred_t, pred_c, target, model, points, 0.015, symmetric=torch.tensor([True, False]))
    with pytest.raises(TypeError, match="refine_loss: symmetric must be a bool tensor"):
        refine_loss(pred_r[:, 0], pred_t[:, 0], target, model, points, symmetric=torch.tensor([1]))
    with pytest.raises(ValueError, match="refine_loss: model_points must have shape"):
        refine_loss(pred_r[:, 0], pred_t[:, 0], target, model[:, :3], points)
    with pytest.raises(ValueError, match="pose_loss: Nm must be >= 1"):
        pose_loss(pred_r, pred_t, pred_c, target[:, :0], model[:, :0], points, 0.015)


# --------------------------------------------------------------------------- #
# pcgeom.compat.densefusion.KNearestNeighbor
# --------------------------------------------------------------------------- #


def _brute_knn_1based(ref, query, k):
    d2 = ((query.transpose(1, 2)[:, :, None, :].to(F64) - ref.transpose(1, 2)[:, None, :, :].to(F64)) ** 2).sum(-1)
    order = torch.sort(d2, dim=-1, stable=True).indices[..., :k]  # stable: ties keep the lower index
    return (order + 1).transpose(1, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [1, 3])
def test_knearestneighbor_matches_brute_force_one_based(device, k):
    g = torch.Generator().manual_seed(16)
    ref = torch.rand(2, 3, 70, generator=g).to(device)
    query = torch.rand(2, 3, 45, generator=g).to(device)
    inds = KNearestNeighbor(k)(ref, query)
    assert inds.shape == (2, k, 45) and inds.dtype == torch.int64 and inds.device.type == device
    assert inds.min() >= 1 and inds.max() <= 70
    assert torch.equal(inds.cpu(), _brute_knn_1based(ref.cpu(), query.cpu(), k))


def test_knearestneighbor_call_styles_ties_and_no_grad():
    # lattice points: many exact ties, which must go to the lower index as in lib/knn
    axis = torch.arange(4.0)
    grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), 0).reshape(1, 3, -1)
    ref = grid[:, :, torch.randperm(64, generator=torch.Generator().manual_seed(0))].requires_grad_()
    query = (torch.rand(1, 3, 30, generator=torch.Generator().manual_seed(1)) * 3).round() + 0.5
    expect = _brute_knn_1based(ref.detach(), query, 1)
    static = KNearestNeighbor.apply(ref, query)        # the PyTorch-1.6 fork's style, k = 1
    instance = KNearestNeighbor(1)(ref, query)         # the original style
    legacy_forward = KNearestNeighbor(1).forward(ref, query)
    assert torch.equal(static, expect) and torch.equal(instance, expect) and torch.equal(legacy_forward, expect)
    assert not static.requires_grad and static.grad_fn is None
    assert KNearestNeighbor(2).apply(ref, query).shape == (1, 2, 30)
    # how DenseFusion consumes it: index_select(target, 1, inds.view(-1) - 1)
    picked = torch.index_select(ref.detach()[0], 1, instance.view(-1) - 1)
    assert picked.shape == (3, 30)


def test_knearestneighbor_errors_and_dtypes():
    ref64 = torch.rand(1, 3, 10, dtype=F64)
    q32 = torch.rand(1, 3, 4)
    assert torch.equal(KNearestNeighbor(1)(ref64, q32), _brute_knn_1based(ref64, q32.to(F64), 1))
    with pytest.raises(ValueError, match="k=11 exceeds the number of reference points Nr=10"):
        KNearestNeighbor(11)(ref64, q32)
    with pytest.raises(ValueError, match="must share B and D"):
        KNearestNeighbor(1)(ref64, torch.rand(1, 2, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"ref must have shape \(B, D, Nr\)"):
        KNearestNeighbor(1)(ref64[0], q32)
    with pytest.raises(ValueError, match="k must be >= 1"):
        KNearestNeighbor(0)


# --------------------------------------------------------------------------- #
# the example stays runnable
# --------------------------------------------------------------------------- #


def test_example_runs_end_to_end(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "densefusion_refine.py"
    spec = importlib.util.spec_from_file_location("densefusion_refine_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    threads = torch.get_num_threads()
    try:
        rc = example.main(["--steps", "3", "--batch-size", "2", "--points", "40", "--mesh-points", "60",
                           "--dense-points", "300", "--metric-points", "100", "--eval-samples", "12"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert rc == 0 and "ADD(-S)" in out and "bowl" in out and "mean ADD(-S)" in out

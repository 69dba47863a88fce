"""pcgeom.segment: group_reduce / segment_reduce / group_gather against float64 loops."""

import itertools

import pytest
import torch

import pcgeom
from pcgeom import segment as S

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int32, torch.int64]
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6, torch.float64: 1e-12}


def _ref(src, index, G, reduce, dim):
    """Loop reference: float64 (or Python int) per output element; arg = lowest position."""
    src = src.movedim(dim, 0)
    N = src.shape[0]
    rest = src.shape[1:]
    out = torch.zeros((G,) + rest, dtype=torch.float64)
    arg = torch.full((G,) + rest, N, dtype=torch.int64)
    for pos in itertools.product(*[range(s) for s in rest]):
        for g in range(G):
            rows = [i for i in range(N) if int(index[i]) == g]
            vals = [float(src[(i,) + pos]) for i in rows]
            if not rows:
                out[(g,) + pos] = 1.0 if reduce == "prod" else 0.0
                continue
            if reduce == "sum":
                v = sum(vals)
            elif reduce == "prod":
                v = 1.0
                for x in vals:
                    v *= x
            elif reduce == "mean":
                v = sum(vals) / len(vals)
                if not src.is_floating_point():
                    v = float(int(sum(vals)) // len(vals))
            else:
                best = min(vals) if reduce == "min" else max(vals)
                v = best
                arg[(g,) + pos] = rows[vals.index(best)]
            out[(g,) + pos] = v
    return out.movedim(0, dim), arg.movedim(0, dim)


def _ref_contract(src, index, G, reduce, dim):
    """The documented floating sum / mean / prod, operation by operation: each output element accumulated in row
    order from 0 (prod: 1) in float32 for float16/bfloat16 (the dtype itself otherwise), the mean divided once by
    the group size in that dtype, then rounded once to the input dtype."""
    acc = torch.float32 if src.dtype in (torch.float16, torch.bfloat16) else src.dtype
    src = src.movedim(dim, 0)
    out = torch.zeros((G,) + src.shape[1:], dtype=acc)
    for pos in itertools.product(*[range(s) for s in src.shape[1:]]):
        for g in range(G):
            rows = [i for i in range(src.shape[0]) if int(index[i]) == g]
            v = torch.ones((), dtype=acc) if reduce == "prod" else torch.zeros((), dtype=acc)
            for i in rows:
                x = src[(i,) + pos].to(acc)
                v = v * x if reduce == "prod" else v + x
            if reduce == "mean" and rows:
                v = v / torch.tensor(float(len(rows)), dtype=acc)
            out[(g,) + pos] = v
    return out.to(src.dtype).movedim(0, dim)


def _data(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


@pytest.mark.parametrize("reduce", S.REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_group_reduce_matches_loop(reduce, dtype):
    for seed, (shape, dim, G) in enumerate([((11, 3), 0, 6), ((2, 9, 2), 1, 5), ((4, 7), -1, 9)]):
        src = _data(dtype, shape, seed)
        N = src.shape[dim]
        index = torch.randint(0, G - 1, (N,), generator=torch.Generator().manual_seed(100 + seed))  # G-1: an empty group
        got = pcgeom.group_reduce(src, index, G, reduce, dim=dim, return_arg=True)
        want, warg = _ref(src, index, G, reduce, dim)
        if reduce in ("min", "max"):
            got, garg = got
            assert torch.equal(garg, warg)
        assert got.dtype == dtype and got.shape == want.shape
        if dtype.is_floating_point:
            tol = TOL[dtype] * (1 + want.abs().max().item()) * (4 if reduce == "prod" else 1)
            assert (got.double() - want).abs().max().item() <= tol * (N if reduce == "prod" else 1)
            if reduce in ("min", "max"):  # a value of src, whichever it is
                assert torch.equal(got.double(), want)
            else:  # the documented order of roundings, exactly
                assert torch.equal(got, _ref_contract(src, index, G, reduce, dim))
        else:
            assert torch.equal(got.long(), want.long())


def test_empty_groups_and_default_num_groups():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = pcgeom.group_reduce(x, torch.tensor([2, 2]), reduce="max")
    assert out.tolist() == [[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]]
    v, a = pcgeom.group_reduce(x, torch.tensor([2, 2]), 4, "min", return_arg=True)
    assert a.tolist() == [[2, 2], [2, 2], [0, 0], [2, 2]]
    assert pcgeom.group_reduce(x, torch.tensor([0, 0]), 2, "prod").tolist() == [[3.0, 8.0], [1.0, 1.0]]
    e = pcgeom.group_reduce(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), 2, "mean")
    assert e.shape == (2, 3) and not e.any()


def test_ties_pick_the_lowest_row_and_nan_propagates():
    x = torch.tensor([1.0, 5.0, 5.0, 1.0, float("nan"), 2.0])
    v, a = pcgeom.group_reduce(x, torch.tensor([0, 0, 0, 0, 1, 1]), reduce="max", return_arg=True)
    assert v[0].item() == 5.0 and a.tolist() == [1, 4] and torch.isnan(v[1])
    v, a = pcgeom.group_reduce(x, torch.tensor([0, 0, 0, 0, 1, 1]), reduce="min", return_arg=True)
    assert a.tolist() == [0, 4]


def test_segment_reduce_matches_group_reduce():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 4, generator=g, dtype=torch.float64)
    offsets = torch.tensor([3, 3, 11, 20])
    seg_id = torch.repeat_interleave(torch.arange(4), torch.diff(offsets, prepend=torch.zeros(1, dtype=torch.long)))
    for reduce in S.REDUCTIONS:
        a = pcgeom.segment_reduce(x, offsets, reduce)
        b = pcgeom.group_reduce(x, seg_id, 4, reduce)
        assert torch.equal(a, b), reduce
        assert a[1].abs().sum() == (4 if reduce == "prod" else 0)
    v, arg = pcgeom.segment_reduce(x.t(), offsets, "max", dim=1, return_arg=True)
    assert arg.shape == (4, 4) and (arg[:, 1] == 20).all()
    assert torch.equal(v[:, 2], x[3:11].max(0).values)


def test_sum_is_sequential_in_row_order_and_independent_of_other_groups():
    # float32 sums: (((x0 + x1) + x2) + ...) in the rows' input order, whatever the other groups hold or
    # where the rows sit (a stable sort, then one pass per group; no atomics).
    g = torch.Generator().manual_seed(5)
    vals = (torch.rand(7, generator=g) * 1e4).float()
    noise = torch.randn(60, generator=g) * 1e6
    for seed in range(3):
        perm = torch.randperm(67, generator=torch.Generator().manual_seed(seed))
        src = torch.cat([vals, noise])[perm]
        idx = torch.cat([torch.zeros(7, dtype=torch.long), torch.randint(1, 4, (60,), generator=g)])[perm]
        out = pcgeom.group_reduce(src, idx, 4, "sum")
        acc = torch.zeros((), dtype=torch.float32)
        for p in perm.tolist():
            if p < 7:
                acc = acc + vals[p]
        assert out[0].item() == acc.item()
        # float16 accumulates in float32 and rounds once
        h = pcgeom.group_reduce(src.half(), idx, 4, "sum")
        acc = torch.zeros((), dtype=torch.float32)
        for p in perm.tolist():
            if p < 7:
                acc = acc + vals[p].half().float()
        assert h[0].item() == acc.half().item()


def test_cpu_fast_path_equals_the_sorted_pass_bit_for_bit():
    # CPU sums use index_add (no sort); other devices the stable sort + sequential segment pass.
    g = torch.Generator().manual_seed(12)
    for M, C, G in [(20000, 3, 300), (5000, 1, 4), (3000, 16, 2000)]:
        key = torch.randint(0, G, (M,), generator=g)
        x = torch.randn(M, C, generator=g) * torch.logspace(-4, 4, M)[:, None]
        fast = pcgeom.group_reduce(x, key, G, "sum")
        counts = torch.bincount(key, minlength=G)
        assert torch.equal(fast, S._sorted_pass(x, key, counts, "sum", 0))


@pytest.mark.parametrize("reduce", S.REDUCTIONS)
def test_gradcheck(reduce):
    g = torch.Generator().manual_seed(7)
    x = (torch.rand(9, 3, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    idx = torch.tensor([0, 2, 0, 2, 2, 0, 3, 3, 0])
    assert torch.autograd.gradcheck(lambda t: pcgeom.group_reduce(t, idx, 5, reduce), (x,), fast_mode=True)
    off = torch.tensor([2, 2, 7, 9])
    assert torch.autograd.gradcheck(lambda t: pcgeom.segment_reduce(t, off, reduce), (x,), fast_mode=True)


def test_min_max_gradient_goes_to_the_chosen_row_only():
    x = torch.tensor([3.0, 3.0, 1.0], requires_grad=True)
    pcgeom.group_reduce(x, torch.tensor([0, 0, 0]), 1, "max").sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 0.0]


def test_group_gather_and_its_deterministic_backward():
    g = torch.Generator().manual_seed(9)
    src = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([3, 0, 3, 3, 1])
    out = pcgeom.group_gather(src, idx)
    assert torch.equal(out, src.detach()[idx])
    assert torch.autograd.gradcheck(lambda t: pcgeom.group_gather(t, idx), (src,), fast_mode=True)
    assert torch.equal(pcgeom.group_gather(src.detach().t(), idx, dim=1), src.detach().t()[:, idx])


def test_errors_name_the_argument():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="reduce must be one of"):
        pcgeom.group_reduce(x, torch.zeros(4, dtype=torch.long), 1, "median")
    with pytest.raises(ValueError, match=r"index values must be in \[0, 2\)"):
        pcgeom.group_reduce(x, torch.tensor([0, 1, 2, 0]), 2)
    with pytest.raises(ValueError, match=r"index must have shape \(4,\)"):
        pcgeom.group_reduce(x, torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(TypeError, match="index must be an integer tensor"):
        pcgeom.group_reduce(x, torch.zeros(4), 1)
    with pytest.raises(TypeError, match="src must be a floating or integer"):
        pcgeom.group_reduce(x.bool(), torch.zeros(4, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="dim must be in"):
        pcgeom.group_reduce(x, torch.zeros(4, dtype=torch.long), 1, dim=2)
    with pytest.raises(ValueError, match="offsets"):
        pcgeom.segment_reduce(x, torch.tensor([3, 2]))
    with pytest.raises(ValueError, match="offsets"):
        pcgeom.segment_reduce(x, torch.tensor([1, 3]))
    with pytest.raises(ValueError, match=r"index values must be in \[0, 4\)"):
        pcgeom.group_gather(x, torch.tensor([0, 4]))


def test_same_bits_on_every_device_and_every_run(device):
    # "The same answer on every device": a device's sums (stable sort + one sequential pass
    # per output, torch.segment_reduce on CUDA) must equal, bit for bit, the CPU sequential pass
    # in the elements' order, on repeated runs; so must the gradients. On CPU this compares
    # the index_add fast path with that pass. Magnitudes spread over 8 decades, so any other
    # summation order changes the low bits.
    g = torch.Generator().manual_seed(21)
    M, C, G = 30000, 4, 97
    key = torch.randint(0, G, (M,), generator=g)
    x = torch.randn(M, C, generator=g, dtype=torch.float64).mul(torch.logspace(-4, 4, M, dtype=torch.float64)[:, None])
    x = x.float()
    want = S._sorted_pass(x, key, torch.bincount(key, minlength=G), "sum", 0)
    xd, kd = x.to(device), key.to(device)
    for _ in range(3):
        assert torch.equal(pcgeom.group_reduce(xd, kd, G, "sum").cpu(), want)
    off = torch.bincount(key, minlength=G).cumsum(0)
    srt = x[key.argsort(stable=True)]
    counts = torch.bincount(key, minlength=G)
    want_seg = S._sorted_pass(srt, key.sort(stable=True).values, counts, "sum", 0) / counts.clamp(min=1)[:, None]
    grads = []
    for _ in range(2):
        t = srt.to(device).requires_grad_()
        out = pcgeom.segment_reduce(t, off.to(device), "mean")
        assert torch.equal(out.detach().cpu(), want_seg)
        w = torch.linspace(-3, 3, G * C, device=device).view(G, C)
        (gr,) = torch.autograd.grad((out * w).sum() + pcgeom.group_gather(out, kd).square().sum(), t)
        grads.append(gr.cpu())
    assert torch.equal(grads[0], grads[1])

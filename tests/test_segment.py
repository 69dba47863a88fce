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


def test_pairwise_order_is_fixed_and_independent_of_other_groups():
    # The tree: ((x0 + x1) + (x2 + x3)) + x4 in float32, whatever the other groups hold or where rows sit.
    g = torch.Generator().manual_seed(5)
    vals = (torch.rand(5, generator=g) * 1e4).float()
    t = [vals[i] for i in range(5)]
    want = ((t[0] + t[1]) + (t[2] + t[3])) + t[4]
    noise = torch.randn(40, generator=g) * 1e6
    for seed in range(3):
        perm = torch.randperm(45, generator=torch.Generator().manual_seed(seed))
        src = torch.cat([vals, noise])[perm]
        idx = torch.cat([torch.zeros(5, dtype=torch.long), torch.randint(1, 4, (40,), generator=g)])[perm]
        out = pcgeom.group_reduce(src, idx, 4, "sum")
        # rows of group 0 keep their relative (input) order: check against that order's tree
        order = [int(p) for p in perm if int(p) < 5]
        tt = [vals[i] for i in order]
        exp = ((tt[0] + tt[1]) + (tt[2] + tt[3])) + tt[4]
        assert out[0].item() == exp.item()
    assert pcgeom.group_reduce(vals, torch.zeros(5, dtype=torch.long), 1, "sum")[0].item() == want.item()


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

"""pcgeom.compat.torch_scatter: torch_scatter 2.1.2's API against independent float64 loops."""

import itertools

import pytest
import torch

import pcgeom.compat.torch_scatter as ts

REDUCES = ["sum", "add", "mean", "min", "max", "mul"]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]
TOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 2e-6, torch.float64: 1e-12}


def bcast(index, shape, dim):
    """torch_scatter's broadcasting rule, written out independently."""
    if index.dim() == 1:
        index = index.reshape([1] * dim + [-1] + [1] * (len(shape) - dim - 1))
    while index.dim() < len(shape):
        index = index.unsqueeze(-1)
    return index.expand(shape)


def ref_scatter(src, index, dim, N, reduce, out=None, int_div="floor"):
    """Loop over every element; float64 accumulators; arg = first position that strictly improves.

    Integer means: floor division (scatter_mean) or truncation (segment_coo / segment_csr).
    """
    dim = dim % src.dim()
    idx = bcast(index, list(src.shape), dim)
    oshape = list(src.shape)
    oshape[dim] = N
    groups = {}
    for pos in itertools.product(*[range(s) for s in src.shape]):
        slot = list(pos)
        slot[dim] = int(idx[pos])
        groups.setdefault(tuple(slot), []).append((pos[dim], float(src[pos])))
    res = torch.zeros(oshape, dtype=torch.float64)
    arg = torch.full(oshape, src.shape[dim], dtype=torch.int64)
    base = None if out is None else out.double()
    for slot in itertools.product(*[range(s) for s in oshape]):
        items = groups.get(slot, [])
        vals = [v for _, v in items]
        init = None if base is None else float(base[slot])
        if reduce in ("sum", "add"):
            v = (init or 0.0) + sum(vals)
        elif reduce == "mul":
            v = 1.0 if init is None else init
            for x in vals:
                v *= x
        elif reduce == "mean":
            v = ((init or 0.0) + sum(vals)) / max(len(vals), 1)
            if not src.is_floating_point():
                tot, n = int((init or 0) + sum(vals)), max(len(vals), 1)
                v = float(tot // n if int_div == "floor" else int(tot / n))
        else:
            better = (lambda a, b: a < b) if reduce == "min" else (lambda a, b: a > b)
            cur, a = init, src.shape[dim]
            for e, x in items:
                if cur is None or better(x, cur):
                    cur, a = x, e
            v = 0.0 if cur is None else cur
            arg[slot] = a
        res[slot] = v
    return res, arg


def close(got, want, dtype, scale=1.0):
    if dtype.is_floating_point:
        tol = TOL[dtype] * (1.0 + want.abs().max().item()) * scale
        assert (got.double() - want).abs().max().item() <= tol
    else:
        assert torch.equal(got.long(), want.long())


def data(dtype, shape, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 + 0.5 if positive else \
            torch.randn(shape, generator=g, dtype=torch.float64) * 2
        return x.to(dtype)
    lo = 1 if positive else -6
    return torch.randint(lo, 7, shape, generator=g).to(dtype)


# (src shape, index shape, dim, dim_size): 1-d index along dim 0 / middle / last, a 2-d index broadcast over a
# trailing dim, a full-shape index, and dim_size larger than needed (trailing empty slots).
PATTERNS = [((13, 3), (13,), 0, 8), ((2, 9, 3), (9,), 1, 6), ((3, 10), (3, 10), -1, 7), ((2, 8, 3), (2, 8), 1, 5),
            ((3, 6, 2), (3, 6, 2), 1, 4)]


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_matches_loop(reduce, dtype):
    for k, (sshape, ishape, dim, N) in enumerate(PATTERNS):
        src = data(dtype, sshape, k, positive=reduce == "mul")
        g = torch.Generator().manual_seed(50 + k)
        index = torch.randint(0, N - 2, ishape, generator=g)  # the last two slots stay empty
        index.view(-1)[0] = 1  # slot 0 empty in most rows too
        got = ts.scatter(src, index, dim, None, N, reduce)
        want, warg = ref_scatter(src, index, dim, N, reduce)
        assert got.dtype == dtype and list(got.shape) == list(want.shape)
        close(got, want, dtype, scale=8.0 if reduce == "mul" else 1.0)
        if reduce in ("min", "max"):
            v, a = getattr(ts, "scatter_" + reduce)(src, index, dim, dim_size=N)
            assert torch.equal(a, warg) and torch.equal(v, got)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_out_semantics(reduce, dtype):
    sshape, ishape, dim, N = PATTERNS[3]
    src = data(dtype, sshape, 1, positive=reduce == "mul")
    index = torch.randint(0, N - 1, ishape, generator=torch.Generator().manual_seed(2))
    oshape = list(sshape)
    oshape[dim] = N
    out = data(dtype, oshape, 3, positive=reduce == "mul")
    want, warg = ref_scatter(src, index, dim, N, reduce, out=out)
    res = getattr(ts, "scatter_" + reduce)(src, index, dim, out)
    if isinstance(res, tuple):
        res, arg = res
        assert torch.equal(arg, warg)
    assert res is out  # modified in place, as torch_scatter
    close(out, want, dtype)


def test_scatter_defaults_and_edge_cases():
    src = torch.tensor([1.0, 3, 2, 4, 5, 6])
    idx = torch.tensor([0, 1, 0, 1, 1, 3])
    assert ts.scatter(src, idx).tolist() == [3, 12, 0, 6]  # dim=-1, size index.max() + 1
    assert ts.scatter_mul(src, idx).tolist() == [2, 60, 1, 6]  # empty product is 1 (torch_scatter)
    v, a = ts.scatter_max(src, idx)
    assert a.tolist() == [2, 4, 6, 5]
    e = ts.scatter(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), 0, reduce="max")
    assert e.shape == (0, 4)
    assert ts.scatter_min(torch.tensor([2, 2, 1]), torch.tensor([0, 0, 1]))[1].tolist() == [0, 2]  # ties: lowest
    assert ts.scatter_mean(torch.tensor([-3, 0]), torch.tensor([0, 0])).tolist() == [-2]  # floor division


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_gradcheck(reduce):
    g = torch.Generator().manual_seed(11)
    src = (torch.rand(2, 7, 3, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    idx = torch.tensor([0, 3, 0, 3, 3, 1, 0])
    assert torch.autograd.gradcheck(lambda s: ts.scatter(s, idx, 1, None, 5, reduce), (src,), fast_mode=True)
    full = torch.randint(0, 4, (2, 7, 3), generator=g)
    assert torch.autograd.gradcheck(lambda s: ts.scatter(s, full, 1, None, 4, reduce), (src,), fast_mode=True)


def test_deterministic_values_and_gradients():
    # Same bits on repeated runs and whatever the order of the other groups' rows.
    g = torch.Generator().manual_seed(4)
    src = torch.randn(5000, 8, generator=g) * 100
    idx = torch.randint(0, 37, (5000,), generator=g)
    a = ts.scatter_sum(src, idx, 0)
    for _ in range(2):
        assert torch.equal(ts.scatter_sum(src, idx, 0), a)
    other = idx != 5
    perm = torch.arange(5000)
    perm[other] = perm[other][torch.randperm(int(other.sum()), generator=g)]
    b = ts.scatter_sum(src[perm], idx[perm], 0)
    assert torch.equal(a[5], b[5])
    x = src.clone().requires_grad_()
    y = ts.gather_coo(ts.segment_coo(x, idx.sort().values, reduce="mean"), idx.sort().values)
    (gr1,) = torch.autograd.grad(y.square().sum(), x)
    y = ts.gather_coo(ts.segment_coo(x, idx.sort().values, reduce="mean"), idx.sort().values)
    (gr2,) = torch.autograd.grad(y.square().sum(), x)
    assert torch.equal(gr1, gr2)


def ref_csr(src, ptr, reduce):
    """1-d or batched pointers along dim ptr.dim() - 1, by loops."""
    dim = ptr.dim() - 1
    lead = list(src.shape[:dim])
    ptr = ptr.expand(lead + [ptr.shape[-1]])
    S = ptr.shape[-1] - 1
    oshape = list(src.shape)
    oshape[dim] = S
    res = torch.zeros(oshape, dtype=torch.float64)
    arg = torch.full(oshape, src.shape[dim], dtype=torch.int64)
    for lpos in itertools.product(*[range(s) for s in lead]):
        p = ptr[lpos].tolist()
        for s in range(S):
            for rpos in itertools.product(*[range(x) for x in src.shape[dim + 1:]]):
                items = [(e, float(src[lpos + (e,) + rpos])) for e in range(p[s], p[s + 1])]
                slot = lpos + (s,) + rpos
                if not items:
                    continue
                vals = [v for _, v in items]
                if reduce in ("sum", "add"):
                    res[slot] = sum(vals)
                elif reduce == "mean":
                    res[slot] = sum(vals) / len(vals) if src.is_floating_point() else int(sum(vals) / len(vals))
                else:
                    best = min(vals) if reduce == "min" else max(vals)
                    res[slot] = best
                    arg[slot] = items[vals.index(best)][0]
    return res, arg


@pytest.mark.parametrize("reduce", ["sum", "add", "mean", "min", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_segment_csr_coo_match_loop(reduce, dtype):
    src = data(dtype, (2, 12, 3), 6)
    for ptr in (torch.tensor([1, 4, 4, 9, 11]), torch.tensor([[0, 3, 3, 8, 12], [2, 2, 6, 7, 10]])):
        got = ts.segment_csr(src, ptr if ptr.dim() == 2 else ptr.view(1, -1), reduce=reduce)
        want, warg = ref_csr(src, ptr if ptr.dim() == 2 else ptr.view(1, -1), reduce)
        close(got, want, dtype)
        if reduce in ("min", "max"):
            v, a = getattr(ts, f"segment_{reduce}_csr")(src, ptr if ptr.dim() == 2 else ptr.view(1, -1))
            assert torch.equal(a, warg)
    # segment_coo: sorted index per row, leading dims broadcast, a gap slot and trailing empty slots
    index = torch.tensor([[0, 0, 0, 2, 2, 3, 3, 3, 3, 5, 5, 5], [0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 5, 5]])
    got = ts.segment_coo(src, index, dim_size=7, reduce=reduce)
    want, warg = ref_scatter(src, index, 1, 7, reduce, int_div="trunc")
    close(got, want, dtype)
    if reduce in ("min", "max"):
        assert torch.equal(getattr(ts, f"segment_{reduce}_coo")(src, index, dim_size=7)[1], warg)
    one = ts.segment_coo(src, index[0].view(1, -1), reduce=reduce)  # broadcast over the batch
    close(one, ref_scatter(src, index[0], 1, 6, reduce, int_div="trunc")[0], dtype)


def test_segment_csr_overwrites_out_and_coo_accumulates():
    src = torch.arange(1.0, 7.0)
    ptr = torch.tensor([0, 2, 5, 5, 6])
    out = torch.full((4,), -2.0)
    ts.segment_csr(src, ptr, out)
    assert out.tolist() == [3, 12, 0, 6]
    out = torch.full((4,), -2.0)
    ts.segment_coo(src, torch.tensor([0, 0, 1, 1, 1, 3]), out)
    assert out.tolist() == [1, 10, -2, 4]


def test_segment_csr_max_ties_nan_and_gradient():
    # PTv2 / PTv3 grid pooling: segment_csr(feat[sorted], idx_ptr, reduce="max") after a ReLU (ties at 0).
    src = torch.tensor([[0.0, 1.0], [0.0, 3.0], [2.0, 3.0], [5.0, float("nan")], [1.0, 0.0]], requires_grad=True)
    ptr = torch.tensor([0, 2, 2, 5])
    v, a = ts.segment_max_csr(src, ptr)
    assert a.tolist() == [[0, 1], [5, 5], [3, 3]]
    assert v[0].tolist() == [0.0, 3.0] and v[1].tolist() == [0.0, 0.0] and v[2, 0] == 5 and torch.isnan(v[2, 1])
    ts.segment_csr(src, ptr, reduce="max")[:, 0].sum().backward()
    assert src.grad[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]  # the first of the tied zeros only
    assert ts.segment_csr(src.detach(), ptr, reduce="min")[2].tolist()[0] == 1.0


def test_gather_csr_coo():
    src = torch.tensor([[1.0, 2], [3, 4], [5, 6], [7, 8]])
    ptr = torch.tensor([0, 2, 5, 5, 6])
    want = torch.tensor([[1.0, 2], [1, 2], [3, 4], [3, 4], [3, 4], [7, 8]])
    assert torch.equal(ts.gather_csr(src, ptr), want)
    assert torch.equal(ts.gather_coo(src, torch.tensor([0, 0, 1, 1, 1, 3])), want)
    out = torch.full((7, 2), -2.0)
    ts.gather_csr(src, ptr, out)
    assert torch.equal(out[:6], want) and (out[6] == -2).all()  # rows outside indptr untouched
    s = src.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ts.gather_csr(t, ptr), (s,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda t: ts.gather_coo(t, torch.tensor([0, 0, 1, 1, 1, 3])), (s,), fast_mode=True)
    b = torch.arange(24.0).view(2, 4, 3)
    bptr = torch.tensor([[0, 1, 1, 3, 3], [0, 2, 3, 3, 4]])  # output size: the last pointer, 4
    got = ts.gather_csr(b, bptr)
    assert torch.equal(got[1], b[1][[0, 0, 1, 3]]) and torch.equal(got[0, :3], b[0][[0, 2, 2]])
    assert (got[0, 3] == 0).all()  # beyond the first row's last pointer
    # every range empty: an empty output (an earlier version failed reshaping it), gradient zero
    z = ts.gather_csr(s, torch.zeros(5, dtype=torch.long))
    assert z.shape == (0, 2)
    z.sum().backward()
    assert torch.equal(s.grad, torch.zeros_like(s))


def test_composites_match_torch_per_group():
    g = torch.Generator().manual_seed(8)
    src = torch.randn(3, 20, generator=g, dtype=torch.float64)
    idx = torch.randint(0, 6, (20,), generator=g)
    idx[idx == 4] = 5  # group 4 empty
    sm = ts.scatter_softmax(src, idx, dim=-1)
    lsm = ts.scatter_log_softmax(src, idx, dim=-1)
    lse = ts.scatter_logsumexp(src, idx, dim=-1)
    sd = ts.scatter_std(src, idx, dim=-1)
    sdb = ts.scatter_std(src, idx, dim=-1, unbiased=False)
    for grp in range(6):
        m = idx == grp
        if not m.any():
            assert (lse[:, grp] == 0).all() and (sd[:, grp] == 0).all()
            continue
        x = src[:, m]
        assert torch.allclose(sm[:, m], torch.softmax(x, -1))
        assert torch.allclose(lsm[:, m], torch.log_softmax(x, -1))
        assert torch.allclose(lse[:, grp], torch.logsumexp(x, -1))
        n = x.shape[1]
        var = ((x - x.mean(-1, keepdim=True)) ** 2).sum(-1)
        assert torch.allclose(sd[:, grp], (var / (max(n - 1, 1) + 1e-6)).sqrt())
        assert torch.allclose(sdb[:, grp], (var / (n + 1e-6)).sqrt())
    s = src.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ts.scatter_softmax(t, idx, -1), (s,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda t: ts.scatter_logsumexp(t, idx, -1), (s,), fast_mode=True)
    with pytest.raises(ValueError, match="floating point"):
        ts.scatter_softmax(torch.tensor([1, 2]), torch.tensor([0, 0]))


def test_torchscript_and_every_public_name():
    names = ["scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter",
             "segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr",
             "segment_csr", "gather_csr", "segment_sum_coo", "segment_add_coo", "segment_mean_coo",
             "segment_min_coo", "segment_max_coo", "segment_coo", "gather_coo", "scatter_std",
             "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax"]
    assert set(names) | {"__version__"} == set(ts.__all__) and ts.__version__ == "2.1.2"
    for n in names:
        torch.jit.script(getattr(ts, n))
    j = torch.jit.script(ts.segment_max_csr)
    v, a = j(torch.tensor([1.0, 5, 2]), torch.tensor([0, 2, 3]))
    assert v.tolist() == [5, 2] and a.tolist() == [1, 2]


def test_errors_name_the_argument():
    src = torch.randn(4, 2)
    with pytest.raises(ValueError, match=r"index values must be in \[0, 3\)"):
        ts.scatter(src, torch.tensor([0, 1, 3, 0]), 0, dim_size=3)
    with pytest.raises(ValueError, match="reduce must be one of"):
        ts.scatter(src, torch.tensor([0, 1, 2, 0]), 0, reduce="median")
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ts.scatter(src, torch.tensor([0, 1, 2]), 0)
    with pytest.raises(ValueError, match="out must have shape"):
        ts.scatter_sum(src, torch.tensor([0, 1, 2, 0]), 0, torch.zeros(3, 3))
    with pytest.raises(TypeError, match="index must be an integer tensor"):
        ts.scatter_sum(src, torch.zeros(4), 0)
    with pytest.raises(ValueError, match="indptr must be non-decreasing"):
        ts.segment_csr(src, torch.tensor([0, 3, 2]))
    with pytest.raises(ValueError, match=r"indptr values must be in \[0, 4\]"):
        ts.segment_csr(src, torch.tensor([0, 3, 5]))
    with pytest.raises(ValueError, match="src.size"):
        ts.gather_csr(src, torch.tensor([0, 3, 4]))
    with pytest.raises(ValueError, match="indptr must have at least one entry"):
        ts.segment_csr(src, torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="reduce must be one of .* got None"):
        ts.scatter(src, torch.tensor([0, 1, 2, 0]), 0, reduce=None)
    with pytest.raises(TypeError, match="scatter_log_softmax: eps must be a float"):
        ts.scatter_log_softmax(src, torch.tensor([0, 1, 2, 0]), 0, eps=None)
    # (a size that fails to allocate is named too: tests/test_compat_bad_input.py, under a memory cap)
    with pytest.raises(RuntimeError, match=r"scatter_sum: dim_size=2305843009213693952 is too large: the output "
                                           r"of shape \(2305843009213693952, 2\) would need 16.0 EiB"):
        ts.scatter_sum(src, torch.tensor([0, 1, 2, 0]), 0, dim_size=2**61)


def test_logsumexp_propagates_nan_and_keeps_inf():
    # torch_scatter's nan_to_num turned a NaN group into 0 and +inf into finfo.max; pcgeom's rule is torch.logsumexp's.
    from pcgeom.compat.torch_scatter import scatter_logsumexp

    nan, inf = float("nan"), float("inf")
    src = torch.tensor([nan, 1.0, inf, 1.0, 0.0, 0.0])
    got = scatter_logsumexp(src, torch.tensor([0, 0, 1, 1, 3, 3]))
    assert torch.isnan(got[0]) and got[1] == inf and got[2] == 0.0  # group 2 is empty
    assert torch.allclose(got[3], torch.logsumexp(torch.zeros(2), 0))
    out = torch.tensor([0.0, nan, 1.0])
    got = scatter_logsumexp(torch.tensor([1.0, 2.0, nan]), torch.tensor([0, 1, 2]), out=out)
    assert got is out and torch.isfinite(got[0]) and torch.isnan(got[1]) and torch.isnan(got[2])


@pytest.mark.parametrize("reduce", ["sum", "mean", "mul"])
def test_out_takes_the_elements_in_order_after_its_own_value(reduce):
    # torch_scatter's CPU kernel adds into out in place: ((out + s1) + s2) + ...; the stand-in's docstring says
    # the same. It used to add the group's own sum to out, which rounds differently.
    from pcgeom.compat.torch_scatter import scatter

    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        src = torch.randn(9, 3, generator=g) * 10.0 ** torch.randint(-4, 5, (9, 1), generator=g)
        idx = torch.randint(0, 3, (9,), generator=g)
        out = torch.randn(3, 3, generator=g) * 1e3
        ref = out.clone()
        for j in range(9):
            ref[idx[j]] = ref[idx[j]] * src[j] if reduce == "mul" else ref[idx[j]] + src[j]
        if reduce == "mean":
            ref /= torch.bincount(idx, minlength=3).clamp(min=1)[:, None].to(ref.dtype)
        got = scatter(src, idx, dim=0, out=out.clone(), reduce=reduce)
        assert torch.equal(got, ref), (trial, reduce)
    if reduce == "sum":  # a slot no index names keeps out's bits, -0.0 included
        got = scatter(torch.tensor([2.0]), torch.tensor([1]), out=torch.tensor([-0.0, 1.0]))
        assert torch.signbit(got[0]) and got[1] == 3.0

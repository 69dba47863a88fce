"""Every argument of every pointops / pointops_cuda / torch_scatter stand-in, mutated one at a time.

Each function is first called with valid arguments; then each argument in
turn is replaced by a wrong dtype, shape, size, device, value range or a
non-finite value.  A call must then either succeed with every index it
returns inside the valid range, or raise pcgeom's named error: a ValueError /
TypeError whose message starts with the function's name, or (for a size no
machine holds) a RuntimeError naming the argument and the bytes.  Anything
else -- torch's own error from deep inside, an IndexError, an out-of-range
index written into the caller's tensor -- is a finding.

Run by tests/test_compat_bad_input.py: on the CPU in a child process with
its address space capped (sizes such as ``index.max() = 2**31 - 1`` must
fail, not be paged in), with the meta device standing in for "another
device"; on CUDA, when present, with CPU tensors as the other device.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from pcgeom.compat.pointops_cuda import pointweb as PW
from pcgeom.compat import pointops as P
from pcgeom.compat import pointops_cuda as PC
from pcgeom.compat import torch_scatter as TS

_NAMED = re.compile(r"^`?[A-Za-z_][\w.]*`?( \(PointWeb\))?:|^`[A-Za-z_]\w*` ")
_SIZE = re.compile(r"needs .* and allocating it failed|is too large")


def _tensor_mutations(t: torch.Tensor, other: str, huge: bool):
    out = []
    if t.is_floating_point():
        out += [("long", t.long()), ("int", t.int()), ("double", t.double()), ("half", t.half()),
                ("no rows", t[:0]), ("one row less", t[:-1]), ("one column less", t[..., :-1]),
                ("extra dim", t[None]), ("flat", t.reshape(-1)), ("0-d", t.new_tensor(1.0)),
                ("nan", torch.full_like(t, float("nan"))), ("inf", torch.full_like(t, float("inf"))),
                ("bool", t.bool()), ("other device", t.to(other))]
        if t.dim() == 2:
            out.append(("transposed", t.t()))
    else:
        out += [("float", t.float()), ("long", t.long()), ("int", t.int()), ("short", t.short()),
                ("flipped", t.flip(0)), ("+1000", t + 1000), ("-5", t - 5), ("all -1", t * 0 - 1),
                ("all 0", t * 0), ("no rows", t[:0]), ("one row less", t[:-1]), ("extra dim", t[None]),
                ("flat", t.reshape(-1)), ("0-d", t.new_tensor(3)), ("bool", t.bool()),
                ("uint8", t.to(torch.uint8)), ("other device", t.to(other))]
        if huge:
            out.append(("2**31-1", torch.full_like(t, 2**31 - 1)))
    return out


def _scalar_mutations(v, huge: bool):
    if isinstance(v, bool):
        return [("not", not v), ("None", None), ("int", 1)]
    if isinstance(v, int):
        out = [("0", 0), ("-1", -1), ("+1", v + 1), ("x7+3", v * 7 + 3), ("2.5", 2.5), ("None", None),
               ("str", "3"), ("True", True)]
        return out + ([("2**40", 2**40)] if huge else [])
    if isinstance(v, float):
        return [("-1.0", -1.0), ("0.0", 0.0), ("nan", float("nan")), ("inf", float("inf")),
                ("1e30", 1e30), ("None", None), ("int", 2)]
    if isinstance(v, str):
        return [("unknown", "median"), ("None", None), ("int", 1)]
    return [("None", None)]


def _bad_index(result, bound):
    for t in result if isinstance(result, (tuple, list)) else [result]:
        if (isinstance(t, torch.Tensor) and t.device.type != "meta" and t.numel()
                and not t.is_floating_point() and t.dtype != torch.bool):
            lo, hi = int(t.min()), int(t.max())
            if lo < -1 or hi >= bound:
                return f"index outside [-1, {bound}): min {lo}, max {hi}"
    return None


class Sweep:
    def __init__(self, device: str, other: str, huge: bool):
        self.device, self.other, self.huge = device, other, huge
        self.findings: list[str] = []
        self.named = 0
        self.passed = 0

    def run(self, name, fn, args, bound, outs=()):
        """``bound``: the exclusive upper limit of every index returned or written into ``args[outs]``
        (a callable of the arguments where it depends on them)."""
        limit = bound if callable(bound) else (lambda _: bound)
        fresh = lambda a: a.clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
        r = fn(*[fresh(a) for a in args])  # the valid call must work
        assert _bad_index(r, limit(args)) is None, name
        for i, a in enumerate(args):
            muts = (_tensor_mutations(a, self.other, self.huge) if isinstance(a, torch.Tensor)
                    else _scalar_mutations(a, self.huge))
            for label, m in muts:
                a2 = [fresh(x) for x in args]
                a2[i] = m
                where = f"{name} argument {i} ({label})"
                try:
                    r = fn(*a2)
                except (ValueError, TypeError) as e:
                    if not _NAMED.match(str(e)) or "INTERNAL ASSERT" in str(e):
                        self.findings.append(f"{where}: unnamed {type(e).__name__}: {str(e)[:160]}")
                    else:
                        self.named += 1
                    continue
                except RuntimeError as e:
                    if _SIZE.search(str(e)):  # "<fn>: <arg>=<value> needs ... <bytes>, and allocating it failed"
                        self.named += 1
                    else:
                        self.findings.append(f"{where}: RuntimeError: {str(e)[:160]}")
                    continue
                except Exception as e:  # noqa: BLE001 -- any other exception is a finding
                    self.findings.append(f"{where}: {type(e).__name__}: {str(e)[:160]}")
                    continue
                self.passed += 1
                b = limit(a2)
                msg = _bad_index(r, b) or next((_bad_index(a2[k], b) for k in outs if k != i and _bad_index(a2[k], b)), None)
                if msg:
                    self.findings.append(f"{where}: returned {msg}")


def sweep(device: str = "cpu", other: str = "meta", huge: bool = True) -> Sweep:
    dev = torch.device(device)
    g = torch.Generator().manual_seed(0)

    def R(*s):
        return torch.rand(*s, generator=g).to(dev)

    def I(lo, hi, s):  # noqa: E743
        return torch.randint(lo, hi, s, generator=g, dtype=torch.int32).to(dev)

    def off(*s):
        return torch.tensor(np.cumsum(s), dtype=torch.int32, device=dev)

    S = Sweep(device, other, huge)
    zi = lambda *s: torch.zeros(*s, dtype=torch.int32, device=dev)  # noqa: E731
    zf = lambda *s: torch.zeros(*s, device=dev)  # noqa: E731

    # pointops (Pointcept): 20 points in clouds of 12 and 8, 7 queries in clouds of 4 and 3
    xyz, o, q, qo, feat = R(20, 3), off(12, 8), R(7, 3), off(4, 3), R(20, 5)
    idx = I(0, 20, (7, 4))
    idx[0, 3] = -1
    pidx = I(0, 20, (20, 4))
    S.run("knn_query", P.knn_query, [4, xyz, o, q, qo], 20)
    S.run("knn_query (self)", P.knn_query, [4, xyz, o], 20)
    S.run("ball_query", P.ball_query, [4, 0.5, 0.0, xyz, o, q, qo], 20)
    S.run("random_ball_query", P.random_ball_query, [4, 0.5, 0.0, xyz, o, q, qo], 20)
    S.run("farthest_point_sampling", P.farthest_point_sampling, [xyz, o, off(4, 3)], 20)
    S.run("grouping", P.grouping, [idx, feat, xyz, q, True], 20)
    S.run("grouping2", P.grouping2, [feat, idx], 20)
    S.run("interpolation", P.interpolation, [xyz, q, feat, o, qo], 20)
    S.run("interpolation2", P.interpolation2, [xyz, q, feat, o, qo], 20)
    S.run("subtraction", P.subtraction, [feat, feat, pidx], 20)
    S.run("aggregation", P.aggregation, [feat, R(20, 4, 5), R(20, 4, 1), pidx], 20)
    it = torch.tensor([0, 0, 1, 2, 5], device=dev)
    ir = torch.tensor([1, 3, 2, 2, 19], device=dev)
    S.run("attention_relation_step", P.attention_relation_step, [R(20, 2, 3), R(20, 2, 3), R(3), it, ir], 20)
    S.run("attention_fusion_step", P.attention_fusion_step, [R(5, 2), R(20, 2, 3), it, ir], 20)
    S.run("knn_query_and_group", P.knn_query_and_group, [feat, xyz, o, q, qo, None, 4, True], 20)
    S.run("ball_query_and_group", P.ball_query_and_group, [feat, xyz, o, q, qo, None, 0.5, 0.0, 4, True], 20)
    S.run("query_and_group", P.query_and_group, [4, xyz, q, feat, None, o, qo], 20)
    S.run("offset2batch", P.offset2batch, [o], 20)
    S.run("batch2offset", P.batch2offset, [torch.tensor([0, 0, 1, 1, 1], device=dev)], 20 + 1)

    # pointops_cuda, POSTECH's signatures (preallocated outputs)
    m = 7
    cl = idx.clamp(min=0)
    S.run("furthestsampling_cuda", PC.furthestsampling_cuda,
          [2, 12, xyz, o, off(4, 3), torch.full((20,), 1e10, device=dev), zi(7)], 20, outs=(6,))
    S.run("knnquery_cuda", PC.knnquery_cuda, [m, 4, xyz, q, o, qo, zi(m, 4), zf(m, 4)], 20, outs=(6,))
    S.run("grouping_forward_cuda", PC.grouping_forward_cuda, [m, 4, 5, feat, cl, zf(m, 4, 5)], 20)
    S.run("grouping_backward_cuda", PC.grouping_backward_cuda, [m, 4, 5, R(m, 4, 5), cl, zf(20, 5)], 20)
    S.run("interpolation_forward_cuda", PC.interpolation_forward_cuda, [m, 5, 4, feat, cl, R(m, 4), zf(m, 5)], 20)
    S.run("interpolation_backward_cuda", PC.interpolation_backward_cuda,
          [m, 5, 4, R(m, 5), cl, R(m, 4), zf(20, 5)], 20)
    S.run("subtraction_forward_cuda", PC.subtraction_forward_cuda, [20, 4, 5, feat, feat, pidx, zf(20, 4, 5)], 20)
    S.run("subtraction_backward_cuda", PC.subtraction_backward_cuda,
          [20, 4, 5, pidx, R(20, 4, 5), zf(20, 5), zf(20, 5)], 20)
    S.run("aggregation_forward_cuda", PC.aggregation_forward_cuda,
          [20, 4, 5, 1, feat, R(20, 4, 5), R(20, 4, 1), pidx, zf(20, 5)], 20)
    S.run("aggregation_backward_cuda", PC.aggregation_backward_cuda,
          [20, 4, 5, 1, feat, R(20, 4, 5), R(20, 4, 1), pidx, R(20, 5), zf(20, 5), zf(20, 4, 5), zf(20, 4, 1)], 20)

    # pointops_cuda, PointWeb's batched signatures
    B, N, M, NS, C, NC = 2, 16, 5, 4, 3, 4
    bx, bq, bidx = R(B, N, 3), R(B, M, 3), I(0, N, (B, M, NS))
    S.run("ballquery_cuda", PW.ballquery_cuda, [B, N, M, 0.5, NS, bq, bx, zi(B, M, NS)], N, outs=(7,))
    S.run("knnquery_cuda (PointWeb)", PC.knnquery_cuda, [B, N, M, NS, bx, bq, zi(B, M, NS), zf(B, M, NS)], N,
          outs=(6,))
    S.run("furthestsampling_cuda (PointWeb)", PC.furthestsampling_cuda,
          [B, N, M, bx, torch.full((B, N), 1e10, device=dev), zi(B, M)], N, outs=(5,))
    S.run("nearestneighbor_cuda", PW.nearestneighbor_cuda, [B, N, M, bx, bq, zf(B, N, 3), zi(B, N, 3)], M,
          outs=(6,))
    S.run("grouping_forward_cuda (PointWeb)", PC.grouping_forward_cuda,
          [B, C, N, M, NS, R(B, C, N), bidx, zf(B, C, M, NS)], N)
    S.run("grouping_backward_cuda (PointWeb)", PC.grouping_backward_cuda,
          [B, C, N, M, NS, R(B, C, M, NS), bidx, zf(B, C, N)], N)
    S.run("grouping_int_forward_cuda", PW.grouping_int_forward_cuda,
          [B, C, N, M, NS, I(0, 9, (B, C, N)).long(), bidx, torch.zeros(B, C, M, NS, dtype=torch.long, device=dev)],
          10**9)
    gidx = I(0, N, (B, M))
    S.run("gathering_forward_cuda", PW.gathering_forward_cuda, [B, C, N, M, R(B, C, N), gidx, zf(B, C, M)], N)
    S.run("gathering_backward_cuda", PW.gathering_backward_cuda, [B, C, N, M, R(B, C, M), gidx, zf(B, C, N)], N)
    iidx = I(0, M, (B, N, 3))
    S.run("interpolation_forward_cuda (PointWeb)", PC.interpolation_forward_cuda,
          [B, C, M, N, R(B, C, M), iidx, R(B, N, 3), zf(B, C, N)], M)
    S.run("interpolation_backward_cuda (PointWeb)", PC.interpolation_backward_cuda,
          [B, C, N, M, R(B, C, N), iidx, R(B, N, 3), zf(B, C, M)], M)
    S.run("featuredistribute_cuda", PW.featuredistribute_cuda, [B, N, M, bx, bq, zi(B, M)], N, outs=(5,))
    didx = I(0, N, (B, M))
    S.run("featuregather_forward_cuda", PW.featuregather_forward_cuda, [B, N, M, C, R(B, C, N), didx, zf(B, C, M)], N)
    S.run("featuregather_backward_cuda", PW.featuregather_backward_cuda,
          [B, N, M, C, R(B, C, M), didx, zf(B, C, N)], N)
    ls = I(0, 3, (B, N, NC))
    S.run("labelstat_idx_cuda", PW.labelstat_idx_cuda, [B, N, M, NS, NC, ls, bidx, zi(B, M, NC)], 10**9)
    S.run("labelstat_ballrange_cuda", PW.labelstat_ballrange_cuda, [B, N, M, 0.5, NC, bq, bx, ls, zi(B, M, NC)], 10**9)
    S.run("labelstat_and_ballquery_cuda", PW.labelstat_and_ballquery_cuda,
          [B, N, M, 0.5, NS, NC, bq, bx, ls, zi(B, M, NS), zi(B, M, NC)], N, outs=(9,))

    # torch_scatter: 6 rows into up to 5 slots
    src = R(6, 3)
    arg_bound = lambda a: a[0].shape[0] + 1 if a[0].dim() else 2  # noqa: E731 -- arg = src.size(0) for empty slots
    ix = torch.tensor([0, 1, 1, 3, 0, 2], device=dev)
    for red in ["sum", "mean", "min", "max", "mul"]:
        S.run(f"scatter {red}", TS.scatter, [src, ix, 0, None, 5, red], 10**9)
    S.run("scatter_min", TS.scatter_min, [src, ix, 0, None, 5], arg_bound)
    S.run("scatter_max", TS.scatter_max, [src, ix, 0, None, 5], arg_bound)
    S.run("scatter_sum out=", TS.scatter_sum, [src, ix, 0, zf(4, 3)], 10**9)
    S.run("scatter_softmax", TS.scatter_softmax, [src, ix, 0, None], 10**9)
    S.run("scatter_log_softmax", TS.scatter_log_softmax, [src, ix, 0, 1e-12, None], 10**9)
    S.run("scatter_std", TS.scatter_std, [src, ix, 0, None, None, True], 10**9)
    S.run("scatter_logsumexp", TS.scatter_logsumexp, [src, ix, 0, None, None, 1e-12], 10**9)
    ptr = torch.tensor([0, 2, 2, 5, 6], device=dev)
    sx = ix.sort()[0]
    for red in ["sum", "mean", "min", "max"]:
        S.run(f"segment_csr {red}", TS.segment_csr, [src, ptr, None, red], 7)
        S.run(f"segment_coo {red}", TS.segment_coo, [src, sx, None, None, red], 7)
    S.run("segment_max_csr", TS.segment_max_csr, [src, ptr, None], arg_bound)
    S.run("segment_min_coo", TS.segment_min_coo, [src, sx, None, None], arg_bound)
    S.run("segment_csr out=", TS.segment_csr, [src, ptr, zf(4, 3), "sum"], 7)
    S.run("gather_csr", TS.gather_csr, [R(4, 3), ptr, None], 10**9)
    S.run("gather_coo", TS.gather_coo, [R(4, 3), sx, None], 10**9)
    return S


if __name__ == "__main__":
    import json
    import sys

    s = sweep(*sys.argv[1:3], huge=True)
    print(json.dumps({"findings": s.findings, "named": s.named, "passed": s.passed}))

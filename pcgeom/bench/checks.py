"""Whether each method's answer is right: checks against the pure-torch reference, on a subsample.

pcgeom must equal :mod:`pcgeom.ops.reference` bit for bit (indices and
distances, or the FPS index sequence); KNN peers must return the true k
smallest distances (float64 brute force); FPS peers must return the reference
sequence (fpsample) or the same set of points (open3d, which reorders it).
Each check returns a short verdict string for the report.
"""

from __future__ import annotations

import numpy as np
import torch

from pcgeom.bench.workloads import Inputs
from pcgeom.ops import reference

def _check_knn(inp: Inputs, name: str, out) -> str:
    dist2, idx = out
    k = inp.spec["k"]
    p = inp.points
    q = p if inp.query is None else inp.query
    B, M = q.shape[0], q.shape[1]
    g = torch.Generator().manual_seed(3)
    sel = torch.randperm(M, generator=g)[:48].sort().values
    clouds = range(min(B, 2))
    if name == "pcgeom":
        for b in clouds:
            qs = q[b : b + 1, sel]
            L = torch.tensor([p.shape[1]])
            rd, ri = reference.knn_reference(qs, p[b : b + 1], k, torch.tensor([len(sel)]), L)
            if not (torch.equal(ri[0], idx[b, sel]) and torch.equal(rd[0], dist2[b, sel])):
                return "MISMATCH vs reference"
        return "exact (= reference)"
    for b in clouds:
        q64 = q[b, sel].double()
        p64 = p[b].double()
        true = torch.cdist(q64, p64).pow(2).topk(k, dim=-1, largest=False).values
        got_idx = idx[b, sel].clamp(0, p.shape[1] - 1)
        got = ((q64[:, None] - p64[got_idx]) ** 2).sum(-1).sort(-1).values
        if not torch.allclose(got, true, rtol=1e-5, atol=1e-7):
            return "WRONG distances"
    return "ok (k smallest)"


# --quick checks FPS sequences on a prefix of this length (the reference loop is slow on scenes).
QUICK_FPS_CHECK = 256


def _check_fps(inp: Inputs, name: str, out, fps_prefix: int | None) -> str:
    S = inp.spec["S"]
    p = inp.points[:1]
    n_check = S if fps_prefix is None else min(S, fps_prefix)  # cloud 0
    if name == "open3d" and n_check < S:
        return "not checked (--quick)"
    ref = reference.farthest_point_sample_reference(p, n_check, torch.tensor([p.shape[1]]), torch.tensor([0]))[0]
    if name == "open3d":
        got = out[0]
        want = inp.points[0, ref]
        a = got[np.lexsort(got.numpy().T[::-1])]
        b = want[np.lexsort(want.numpy().T[::-1])]
        return "same set, other order" if torch.equal(a, b) else "DIFFERENT set"
    got = out[0, :n_check]
    if torch.equal(got, ref):
        return "exact (= reference)" if n_check == S else f"exact (first {n_check} = reference)"
    own = ""
    if int(got[0]) != 0:
        # fpsample's bucket variant picks its own start: compare from there.
        ref = reference.farthest_point_sample_reference(p, n_check, torch.tensor([p.shape[1]]), got[:1])[0]
        if torch.equal(got, ref):
            return "exact from its own start" + ("" if n_check == S else f" (first {n_check})")
        own = " (own start)"
    first = int((got != ref).nonzero()[0, 0])
    return f"differs from step {first}{own}"


def _check_group(inp: Inputs, name: str, out) -> str:
    nbhd, centers = out[0], out[1]
    G, k = inp.spec["G"], inp.spec["k"]
    p = inp.points[:1]
    idx = reference.farthest_point_sample_reference(p, G, torch.tensor([p.shape[1]]), torch.tensor([0]))
    c = p[0, idx[0]]
    if not torch.equal(centers[0], c):
        return "different centres"
    _, nn = reference.knn_reference(c[None], p, k, torch.tensor([G]), torch.tensor([p.shape[1]]))
    want = p[0, nn[0]] - c[:, None]
    if torch.equal(nbhd[0], want):
        return "exact (= reference)"
    d_got = (nbhd[0].double() ** 2).sum(-1).sort(-1).values
    d_want = (want.double() ** 2).sum(-1).sort(-1).values
    return "ok (same distances)" if torch.allclose(d_got, d_want, rtol=1e-5, atol=1e-7) else "WRONG"


def check(inp: Inputs, name: str, out, fps_prefix: int | None = None) -> str:
    """The verdict on method `name`'s output `out` for `inp`; FPS sequences are
    checked on their first `fps_prefix` samples when given (``QUICK_FPS_CHECK``
    under ``--quick``), else whole."""
    try:
        if inp.spec["op"] == "fps":
            return _check_fps(inp, name, out, fps_prefix)
        return {"knn": _check_knn, "group": _check_group}[inp.spec["op"]](inp, name, out)
    except Exception as exc:  # a peer returning something unexpected
        return f"check failed: {type(exc).__name__}: {exc}"



def check_grid_cell(q, p, k, out) -> bool:
    """Bit for bit against the reference on the first cloud's first (up to 8) queries.

    q (B, M, D), p (B, N, D); out = pcgeom's (dist2, idx), each (B, M, k)."""
    sel = min(q.shape[1], 8)
    L = torch.tensor([p.shape[1]])
    rd, ri = reference.knn_reference(q[:1, :sel].contiguous(), p[:1], k, torch.tensor([sel]), L)
    return torch.equal(ri[0], out[1][0, :sel]) and torch.equal(rd[0], out[0][0, :sel])

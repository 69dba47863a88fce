"""Generators of the fuzz suite and its settings (short by default, long behind PCGEOM_FUZZ_LONG=1 / --fuzz-long).

The point-set generators are the shapes that found past bugs: repeated positions, a few distinct positions,
collinear and planar sets, integer lattices (exact distance ties), extreme scales (1e+-30 in float32,
1e+-200 in float64: squares that overflow to +inf or underflow to 0), NaN/inf coordinates, N = 0 or 1,
and every floating dtype.  Each draw is a few parameters plus a numpy seed, so a failure prints a
short, reproducible example.  ``as_layout`` hands the same values over as a contiguous, a
non-contiguous or an expanded (stride-0) tensor.
"""

from __future__ import annotations

import collections
import functools
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LONG = os.environ.get("PCGEOM_FUZZ_LONG", "") not in ("", "0")
# Cases per test at weight 1: the short run keeps every fuzz test together under a minute on 2 cores;
# the long run's total (sum over tests of weight * LONG_EXAMPLES) is above 100,000.
SHORT_EXAMPLES = 40
LONG_EXAMPLES = 3500

settings.register_profile(
    "pcgeom-fuzz", max_examples=SHORT_EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=list(HealthCheck), print_blob=True)
# The long run explores (not derandomized): it is a search, run by hand or nightly, not a gate.
settings.register_profile(
    "pcgeom-fuzz-long", max_examples=LONG_EXAMPLES, deadline=None, derandomize=False, database=None,
    suppress_health_check=list(HealthCheck), print_blob=True)
PROFILE = settings.get_profile("pcgeom-fuzz-long" if LONG else "pcgeom-fuzz")

# Examples run per test (counted in the test body, so shrinking and replays count too).
COUNTS: collections.Counter = collections.Counter()


def fuzz(weight: float = 1.0, **strategies):
    """``@given(**strategies)`` under the suite's profile, marked ``fuzz``, with the examples counted.

    ``weight`` scales the number of examples for slow functions (never below 2)."""
    def deco(fn):
        name = f"{fn.__module__.rsplit('.', 1)[-1]}::{fn.__name__}"

        @functools.wraps(fn)
        def counted(*args, **kwargs):
            COUNTS[name] += 1
            return fn(*args, **kwargs)

        test = given(**strategies)(counted)
        test = settings(PROFILE, max_examples=max(2, int(PROFILE.max_examples * weight)))(test)
        return pytest.mark.fuzz(test)
    return deco


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
KINDS = ["uniform", "repeated", "few_distinct", "collinear", "planar", "lattice", "extreme", "nonfinite"]
# Kinds on which every distance is computed exactly (small integers or squares that all overflow /
# underflow), so indices must equal the oracle's bit for bit, ties included.
EXACT_KINDS = {"repeated", "few_distinct", "lattice", "collinear_int"}


def make_points(kind: str, n: int, d: int, dtype: torch.dtype, seed: int) -> np.ndarray:
    """``(n, d)`` float64 values of the given kind, already representable in ``dtype``."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        x = rng.random((n, d)) * (8.0 if dtype in (torch.float16, torch.bfloat16) else 100.0) - 3.0
    elif kind == "repeated":
        x = np.tile(rng.integers(-4, 5, (1, d)).astype(float), (n, 1))
    elif kind == "few_distinct":
        pos = rng.integers(-4, 5, (int(rng.integers(1, 4)), d)).astype(float)
        x = pos[rng.integers(0, len(pos), n)]
    elif kind == "collinear":
        t = rng.integers(-6, 7, (n, 1)).astype(float)
        x = t * rng.integers(-2, 3, (1, d)) + rng.integers(-3, 4, (1, d))
    elif kind == "planar":
        u, v = rng.integers(-5, 6, (n, 1)), rng.integers(-5, 6, (n, 1))
        x = (u * rng.integers(-1, 2, (1, d)) + v * rng.integers(-1, 2, (1, d))).astype(float)
    elif kind == "lattice":
        x = rng.integers(-3, 4, (n, d)).astype(float)
    elif kind == "extreme":
        big = 1e200 if dtype == torch.float64 else 1e30
        scale = big if rng.random() < 0.5 else 1.0 / big
        if dtype in (torch.float16, torch.bfloat16):
            scale = 60000.0 if dtype == torch.float16 and scale > 1 else (1e30 if dtype == torch.bfloat16 and scale > 1 else 1e-4)
        x = (rng.random((n, d)) * 2 - 1) * scale
    elif kind == "nonfinite":
        x = rng.integers(-3, 4, (n, d)).astype(float)
        bad = rng.random((n, d)) < 0.2
        x[bad] = rng.choice([np.nan, np.inf, -np.inf], size=int(bad.sum()))
    else:  # pragma: no cover
        raise AssertionError(kind)
    return torch.from_numpy(x).to(dtype).double().numpy()


def is_exact(kind: str, dtype: torch.dtype, x: np.ndarray) -> bool:
    """Every squared distance and its sum is exact in the accumulation dtype (integers, |x| small)."""
    finite = np.abs(x[np.isfinite(x)])
    if kind in ("repeated", "few_distinct", "lattice", "collinear", "planar", "nonfinite"):
        return bool(np.all(finite <= 64))
    if kind == "extreme" and dtype != torch.float16:
        # float32/bfloat16 at 1e+-30 and float64 at 1e+-200: every nonzero square overflows to +inf
        # or underflows to 0, so the distances are exact too.
        nz = finite[finite > 0]
        return bool(np.all(nz > 1e25) or np.all(nz < 1e-25))
    return False


@st.composite
def clouds(draw, n_min=0, n_max=24, d_choices=(1, 2, 3, 4), kinds=KINDS, dtypes=FLOATS, b_max=3):
    """A padded batch: dict(kind, dtype, x float64 (B, N, D), lengths list[int])."""
    kind = draw(st.sampled_from(kinds))
    dtype = draw(st.sampled_from(dtypes))
    B = draw(st.integers(1, b_max))
    N = draw(st.integers(n_min, n_max))
    D = draw(st.sampled_from(d_choices))
    seed = draw(st.integers(0, 2**32 - 1))
    x = make_points(kind, B * N, D, dtype, seed).reshape(B, N, D)
    lengths = [draw(st.integers(min(n_min, N), N)) for _ in range(B)]
    return dict(kind=kind, dtype=dtype, x=x, lengths=lengths, exact=is_exact(kind, dtype, x), seed=seed)


@st.composite
def packed_clouds(draw, n_max=12, d_choices=(1, 2, 3), kinds=KINDS, dtypes=FLOATS, b_max=4, min_len=0):
    """A packed batch: dict(kind, dtype, x float64 (N_total, D), offsets list[int]) -- empty clouds included
    (repeated offsets)."""
    kind = draw(st.sampled_from(kinds))
    dtype = draw(st.sampled_from(dtypes))
    lens = draw(st.lists(st.integers(min_len, n_max), min_size=1, max_size=b_max))
    D = draw(st.sampled_from(d_choices))
    seed = draw(st.integers(0, 2**32 - 1))
    x = make_points(kind, sum(lens), D, dtype, seed)
    return dict(kind=kind, dtype=dtype, x=x, offsets=list(np.cumsum(lens).astype(int)), lens=lens,
                exact=is_exact(kind, dtype, x), seed=seed)


LAYOUTS = ["contiguous", "noncontiguous", "expanded"]


def as_layout(x: np.ndarray, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """The values of ``x`` as a ``dtype`` tensor in the given memory layout.

    ``noncontiguous``: a strided view (every other element of a wider buffer, last axis first in memory);
    ``expanded``: where all leading rows are equal, a stride-0 ``expand`` of one row (else contiguous)."""
    t = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
    if layout == "noncontiguous" and t.dim() >= 2:
        wide = torch.zeros(t.shape[:-2] + (t.shape[-1], 2 * t.shape[-2]), dtype=dtype)
        wide[..., ::2] = t.transpose(-1, -2)
        return wide[..., ::2].transpose(-1, -2)
    if layout == "expanded" and t.dim() >= 2 and t.shape[-2] >= 1:
        rows = t.reshape(-1, t.shape[-2], t.shape[-1])
        if bool(torch.all((rows == rows[:, :1]) | (torch.isnan(rows) & torch.isnan(rows[:, :1])))):
            return t[..., :1, :].expand(t.shape)
    return t


def lengths_tensor(lengths) -> torch.Tensor:
    return torch.tensor(lengths, dtype=torch.int64)


def named_error(exc: BaseException, *names: str) -> bool:
    """A documented refusal: a ValueError/TypeError whose message names the function or an argument."""
    return isinstance(exc, (ValueError, TypeError)) and any(n in str(exc) for n in names)


# (significand bits, smallest normal exponent, largest finite) of each floating dtype
_GRID = {torch.float16: (11, -14, 65504.0), torch.bfloat16: (8, -126, float(torch.finfo(torch.bfloat16).max)),
         torch.float32: (24, -126, float(np.finfo(np.float32).max)), torch.float64: (53, -1022, float(np.finfo(np.float64).max))}


def round_to_dtype(y: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float64 ``y`` rounded once, to nearest with ties to even, onto ``dtype``'s grid (float64 values).

    Written with frexp/ldexp, not torch's casts: torch takes float64 to float16/bfloat16 through
    float32, which rounds twice on a float32 midpoint of the half-precision grid."""
    y = np.asarray(y, dtype=np.float64)
    if dtype == torch.float64:
        return y
    p, emin, big = _GRID[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.frexp(y)[1]
        q = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))  # the grid spacing at |y| (subnormals included)
        r = np.where(np.isfinite(y), np.round(y / q) * q, y)  # np.round is half to even; y / q is exact
        return np.where(np.isfinite(y) & (np.abs(r) > big), np.copysign(np.inf, y), r)


def dist_oracle(d2_acc: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Euclidean distances from squared distances in the accumulation dtype: the float64 root rounded once to ``dtype``."""
    with np.errstate(invalid="ignore"):
        return round_to_dtype(np.sqrt(np.asarray(d2_acc, dtype=np.float64)), dtype)

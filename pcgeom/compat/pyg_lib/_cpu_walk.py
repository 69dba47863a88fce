"""pyg-lib's CPU uniform random walk, draw for draw, so a seeded CPU run gives pyg-lib's walks.

pyg-lib 0.8's CPU kernel (``csrc/sampler/cpu/random_walk_kernel.cpp`` with
``csrc/random/cpu/rand_engine.h``) walks seed after seed, step after step.  Its
random engine prefetches ``torch.randint(-2**63, 2**63 - 1, (128,))`` from
torch's default CPU generator when it is created and whenever the block is used
up, reads the 128 words last to first, and cuts each word into chunks, low bits
first: 16 bits for a degree below 2**16, 32 bits below 2**32, else 64.  A step
from a node of out-degree ``d > 0`` takes ``chunk % d``; a node without
out-edges repeats itself and draws nothing.

pyg-lib splits more than ``32768 // walk_length`` seeds across threads, each
thread with its own engine racing for the generator, which is not
reproducible; pcgeom always follows the one-engine order (pyg-lib's with
``torch.set_num_threads(1)``, and with any thread count for fewer seeds).

The common case (every degree below 2**16, each draw 16 bits) is vectorised:
the seeds' walks are computed step-major under the guess that each walk draws
at every step; the first seed that reaches a node without out-edges draws
less, so the seeds after it are walked again from the corrected stream
position.  Where such walks are frequent (many nodes without out-edges), the
next seeds are walked one by one in a plain loop instead, which is then the
cheaper.  Degrees of 2**16 or more (mixed chunk widths): the kernel's loop.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cpu_uniform_walk"]

_BLOCK = 128  # words per prefetch
_LO, _HI = -(2**63), 2**63 - 1
_WINDOW = 4096  # seeds walked per speculative pass
_DENSE = 256  # a pass that finalises fewer seeds than this hands the next _LOOP_SEEDS to the plain loop
_LOOP_SEEDS = 2048


def _draw_words(n_blocks: int) -> Tensor:
    """``n_blocks`` prefetches, each read last word first, as one flat stream of words."""
    w = torch.randint(_LO, _HI, (n_blocks * _BLOCK,), dtype=torch.int64)
    return w.view(n_blocks, _BLOCK).flip(1).reshape(-1)


def _advance(n_blocks: int) -> None:
    torch.randint(_LO, _HI, (n_blocks * _BLOCK,), dtype=torch.int64)


def cpu_uniform_walk(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int) -> Tensor:
    """pyg-lib's CPU ``random_walk(p=1, q=1)``: ``(S, walk_length + 1)`` int64 node sequences.

    Args:
        rowptr: int64 ``(N + 1,)`` CSR row pointer (checked by the caller).
        col: int64 ``(E,)`` neighbours.
        seed: int64 ``(S,)`` start nodes.
        walk_length: steps (>= 0).

    Returns:
        The walks; torch's default CPU generator advanced as pyg-lib advances it.
    """
    S, L = seed.numel(), int(walk_length)
    out = torch.empty((S, L + 1), dtype=torch.int64)
    out[:, 0] = seed
    deg = torch.diff(rowptr)
    if S == 0 or L == 0:
        return out  # pyg-lib's parallel_for never runs (S == 0) or divides by zero (L == 0): no draws
    if deg.numel() and int(deg.max()) >= 2**16:
        return _loop_walk(rowptr, col, seed, L, out)
    state = torch.random.get_rng_state()
    max_draws = S * L
    n_blocks = max(1, -(-max_draws // (4 * _BLOCK)))
    words = _draw_words(n_blocks)
    chunks = torch.stack([(words >> (16 * k)) & 0xFFFF for k in range(4)], 1).reshape(-1)
    graph = None  # (rowptr, col) as Python lists, made on first need
    base = 0  # stream position of the first seed not yet final
    i0 = 0
    dense = False  # the last speculative pass found a short walk early: walk the next seeds one by one
    while i0 < S:
        if dense:
            if graph is None:
                graph = (rowptr.tolist(), col.tolist())
            i1 = min(S, i0 + _LOOP_SEEDS)
            rows, base = _loop_block(seed[i0:i1].tolist(), L, graph, chunks[base:base + (i1 - i0) * L].tolist(),
                                     base)
            out[i0:i1, 1:] = torch.tensor(rows, dtype=torch.int64).view(i1 - i0, L)
            i0, dense = i1, False
            continue
        i1 = min(S, i0 + _WINDOW)
        v = seed[i0:i1].clone()
        n = i1 - i0
        # guessed position: every seed before draws at every step
        pos = base + torch.arange(n, dtype=torch.int64) * L
        used = torch.zeros(n, dtype=torch.int64)
        alive = torch.ones(n, dtype=torch.bool)
        walk = torch.empty((n, L), dtype=torch.int64)
        for j in range(L):
            d = deg[v]
            alive &= d > 0
            c = chunks[(pos + used).clamp_max(chunks.numel() - 1)]
            step = rowptr[v] + torch.remainder(c, d.clamp_min(1))
            v = torch.where(alive, col[step.clamp_max(max(col.numel() - 1, 0))] if col.numel() else v, v)
            used += alive.to(torch.int64)
            walk[:, j] = v
        short = torch.nonzero(used < L).flatten()
        last = int(short[0]) if short.numel() else n - 1  # walks up to here are final
        out[i0:i0 + last + 1, 1:] = walk[:last + 1]
        base += L * last + int(used[last])
        i0 += last + 1
        dense = bool(short.numel()) and last < _DENSE
    torch.random.set_rng_state(state)
    _advance(max(1, -(-base // (4 * _BLOCK))))
    return out


def _loop_block(seeds: list, L: int, graph, chunks: list, base: int):
    """Walks ``seeds`` one by one from stream position ``base`` (``chunks`` starts there); 16-bit draws."""
    rp, cl = graph
    t = 0
    rows = []
    for v in seeds:
        for j in range(L):
            lo = rp[v]
            d = rp[v + 1] - lo
            if not d:  # no out-edges: the walk stays here and never draws again
                rows.extend([v] * (L - j))
                break
            v = cl[lo + chunks[t] % d]
            t += 1
            rows.append(v)
    return rows, base + t


def _loop_walk(rowptr: Tensor, col: Tensor, seed: Tensor, L: int, out: Tensor) -> Tensor:
    """The kernel's loop as written, for graphs with a degree of 2**16 or more (mixed chunk widths)."""
    rp, cl = rowptr.tolist(), col.tolist()
    words: list = []
    size = 0
    bits = 0

    def refill():
        nonlocal words, size, bits
        words = [w & (2**64 - 1) for w in torch.randint(_LO, _HI, (_BLOCK,), dtype=torch.int64).tolist()]
        size, bits = _BLOCK - 1, 64

    refill()
    for i, v in enumerate(seed.tolist()):
        for j in range(1, L + 1):
            lo, hi = rp[v], rp[v + 1]
            d = hi - lo
            if d > 0:
                need = 16 if d < 2**16 else (32 if d < 2**32 else 64)
                if bits < need:
                    if size > 0:
                        size, bits = size - 1, 64
                    else:
                        refill()
                mask = 2**64 - 1 if need == 64 else (1 << need) - 1
                v = cl[lo + (words[size] & mask) % d]
                words[size] >>= need
                bits -= need
            out[i, j] = v
    return out

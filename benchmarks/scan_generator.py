"""A procedural urban scan of any size, for the scale benchmark: terrain, buildings, trees, sensor noise.

Nothing is bundled: :func:`generate_scan` draws the scene from a seed and writes it
as a binary little-endian PLY with :class:`pcgeom.io.PlyWriter`, one block of
``2**20`` points at a time, so a 10^8-point file (1.2 GB of float32 ``x, y, z``,
1.4 GB with intensity) is written in about 100 MB of memory.

The scene (all sizes in metres, ``z`` up):

* **terrain**: a smooth height field (a sum of a few long sine waves, a few metres
  of relief) over a square whose side grows with ``sqrt(N)``, so the mean density
  stays about :data:`DENSITY` points per square metre of ground at every size;
* **buildings**: axis-aligned boxes on a jittered grid of 25 m lots, 6-40 m high,
  their four walls and flat roof sampled uniformly by area;
* **vegetation**: trees, noisy ellipsoidal crowns (points scattered through the
  crown volume, denser towards the surface) on a trunk;
* **the scan**: half of the ground points are drawn around a few sensor stations
  with a density falling as ``1 / r**2`` (radius log-uniform, as a terrestrial
  scanner's), the rest uniformly (as an aerial pass); every point gets Gaussian
  range noise (1 cm) and 0.1 % of them are outliers scattered in the air above the scene.

Deterministic: the scene depends only on ``seed`` and ``n`` (each block of
``2**20`` points has its own generator seeded by ``(seed, block)``), so the file
is the same byte for byte on every run.

Run as a script::

    python benchmarks/scan_generator.py scan.ply --points 1e6 --seed 0
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

#: Mean points per square metre of the scene's ground plan.
DENSITY = 1000.0
#: Points generated (and written) per block.
BLOCK = 1 << 20
#: Fractions of the points per surface: terrain, walls, roofs, vegetation; outliers come on top.
_SHARES = np.array([0.50, 0.20, 0.10, 0.20])
_OUTLIERS = 0.001
_NOISE = 0.01


class _Scene:
    """The scene's objects, drawn once from the seed: terrain waves, buildings, trees, sensors."""

    def __init__(self, n: int, seed: int):
        rng = np.random.default_rng([seed, 1 << 40])
        self.side = max(20.0, math.sqrt(n / DENSITY))
        half = self.side / 2
        self.half = half
        # Terrain: a few long waves (wavelengths 40-300 m), a few metres of relief.
        w = rng.uniform(2 * math.pi / 300, 2 * math.pi / 40, size=(6, 1)) * _unit(rng.normal(size=(6, 2)))
        self.wave_k, self.wave_a, self.wave_p = w, rng.uniform(0.3, 2.0, 6), rng.uniform(0, 2 * math.pi, 6)
        # Buildings on 25 m lots (half of them built), trees in the free lots and along the streets.
        lots = max(1, int(self.side // 25))
        cx, cy = np.meshgrid((np.arange(lots) + 0.5) * self.side / lots - half,
                             (np.arange(lots) + 0.5) * self.side / lots - half, indexing="ij")
        cx, cy = cx.ravel(), cy.ravel()
        built = rng.random(cx.size) < 0.5
        built[rng.integers(0, cx.size)] = True  # at least one building, even in a small scene
        bx = cx[built] + rng.uniform(-3, 3, built.sum())
        by = cy[built] + rng.uniform(-3, 3, built.sum())
        bw, bd = rng.uniform(8, 20, (2, built.sum()))
        bh = rng.uniform(6, 40, built.sum())
        self.b = np.stack([bx - bw / 2, by - bd / 2, bw, bd, self.height(bx, by) - 0.5, bh], 1) if built.any() \
            else np.zeros((0, 6))
        wall = 2 * (self.b[:, 2] + self.b[:, 3]) * self.b[:, 5]
        roof = self.b[:, 2] * self.b[:, 3]
        self.wall_cdf, self.roof_cdf = _cdf(wall), _cdf(roof)
        n_trees = max(1, int(self.side * self.side / 150))
        tx, ty = rng.uniform(-half, half, (2, n_trees))
        inside = np.zeros(n_trees, bool)
        for x0, y0, bw_, bd_, _, _ in self.b:  # no tree inside a building
            inside |= (tx > x0 - 2) & (tx < x0 + bw_ + 2) & (ty > y0 - 2) & (ty < y0 + bd_ + 2)
        tx, ty = tx[~inside], ty[~inside]
        if tx.size == 0:
            tx, ty = np.zeros(1), np.zeros(1)
        tr = rng.uniform(1.5, 5.0, tx.size)  # crown radius
        th = self.height(tx, ty) + tr + rng.uniform(2, 6, tx.size)  # crown centre height
        self.t = np.stack([tx, ty, th, tr, tr * rng.uniform(0.8, 1.5, tx.size)], 1)
        self.tree_cdf = _cdf(self.t[:, 3] ** 2 * self.t[:, 4])
        n_sensors = max(2, int(self.side * self.side / 2500))
        self.sensors = rng.uniform(-half * 0.9, half * 0.9, (n_sensors, 2))

    def height(self, x, y):
        """The terrain's height at ``(x, y)``: a smooth sum of sines."""
        ph = np.multiply.outer(x, self.wave_k[:, 0]) + np.multiply.outer(y, self.wave_k[:, 1]) + self.wave_p
        return (np.sin(ph) * self.wave_a).sum(-1)

    def block(self, rng: np.random.Generator, m: int):
        """``m`` points: ``(xyz (m, 3) float64, surface class (m,) uint8)``."""
        kind = np.searchsorted(np.cumsum(_SHARES), rng.random(m) * _SHARES.sum(), side="right").clip(0, 3)
        if self.b.shape[0] == 0:
            kind[(kind == 1) | (kind == 2)] = 0
        xyz = np.empty((m, 3))
        for c, fill in enumerate((self._terrain, self._walls, self._roofs, self._trees)):
            sel = np.flatnonzero(kind == c)
            if sel.size:
                xyz[sel] = fill(rng, sel.size)
        xyz += rng.normal(scale=_NOISE, size=xyz.shape)
        out = rng.random(m) < _OUTLIERS
        k = int(out.sum())
        if k:
            xyz[out] = np.stack([rng.uniform(-self.half, self.half, k), rng.uniform(-self.half, self.half, k),
                                 rng.uniform(0, 60, k)], 1)
            kind[out] = 4
        return xyz, kind.astype(np.uint8)

    def _terrain(self, rng, m):
        near = rng.random(m) < 0.5
        x, y = rng.uniform(-self.half, self.half, (2, m))
        j = int(near.sum())
        if j:  # around a sensor: radius log-uniform in [1 m, side / 2], i.e. density ~ 1 / r^2
            s = self.sensors[rng.integers(0, len(self.sensors), j)]
            r = np.exp(rng.uniform(0.0, math.log(self.half), j))
            a = rng.uniform(0, 2 * math.pi, j)
            # Wrapped into the square (not clipped: that would pile points on its edges).
            x[near] = np.mod(s[:, 0] + r * np.cos(a) + self.half, self.side) - self.half
            y[near] = np.mod(s[:, 1] + r * np.sin(a) + self.half, self.side) - self.half
        return np.stack([x, y, self.height(x, y)], 1)

    def _walls(self, rng, m):
        b = self.b[_pick(rng, self.wall_cdf, m)]
        x0, y0, w, d, z0, h = b.T
        u = rng.random(m) * 2 * (w + d)  # position along the perimeter
        x = np.where(u < w, x0 + u, np.where(u < w + d, x0 + w, np.where(u < 2 * w + d, x0 + w - (u - w - d), x0)))
        y = np.where(u < w, y0, np.where(u < w + d, y0 + (u - w), np.where(u < 2 * w + d, y0 + d,
                                                                             y0 + d - (u - 2 * w - d))))
        return np.stack([x, y, z0 + rng.random(m) * h], 1)

    def _roofs(self, rng, m):
        b = self.b[_pick(rng, self.roof_cdf, m)]
        x0, y0, w, d, z0, h = b.T
        return np.stack([x0 + rng.random(m) * w, y0 + rng.random(m) * d, z0 + h], 1)

    def _trees(self, rng, m):
        t = self.t[_pick(rng, self.tree_cdf, m)]
        x, y, zc, r, rz = t.T
        trunk = rng.random(m) < 0.08
        v = _unit(rng.normal(size=(m, 3)))
        rad = rng.random(m) ** 0.25  # denser towards the crown's surface, as a scanner sees it
        wobble = 1 + 0.15 * np.sin(5 * v[:, 0] + 3 * v[:, 1]) * np.cos(4 * v[:, 2])  # a lumpy, not round, crown
        p = np.stack([x + v[:, 0] * r * rad * wobble, y + v[:, 1] * r * rad * wobble, zc + v[:, 2] * rz * rad], 1)
        base = self.height(x, y)
        ang = rng.uniform(0, 2 * math.pi, m)
        p[trunk] = np.stack([x + 0.2 * np.cos(ang), y + 0.2 * np.sin(ang),
                             base + rng.random(m) * (zc - rz - base).clip(0.5)], 1)[trunk]
        return p


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True).clip(1e-12)


def _cdf(weights):
    c = np.cumsum(weights)
    return c / c[-1] if c.size and c[-1] > 0 else c


def _pick(rng, cdf, m):
    return np.searchsorted(cdf, rng.random(m), side="right").clip(0, max(len(cdf) - 1, 0))


_COLOURS = np.array([[110, 140, 70], [170, 165, 160], [150, 70, 60], [40, 110, 40], [255, 255, 255]], np.int16)
_INTENSITY = np.array([9000, 22000, 30000, 6000, 1000])


def generate_scan(path, n: int, *, seed: int = 0, intensity: bool = True, colors: bool = False,
                  overwrite: bool = False, progress: bool = False) -> str:
    """Writes a procedural scan of ``n`` points to ``path`` (binary little-endian PLY).

    Args:
        path: the PLY file to create (atomically: :class:`pcgeom.io.PlyWriter`).
        n: the number of points, an int >= 0.
        seed: the scene and the sampling; the same ``(seed, n)`` gives the same file.
        intensity: add a ``ushort intensity`` column (by surface, with noise).
        colors: add ``uchar red, green, blue`` (by surface, with noise).
        overwrite: replace an existing file.
        progress: print a line per 10 % written, on stderr.

    Returns:
        ``path``.  Columns: ``float x, y, z`` (float32), then the optional ones.

    Example:
        >>> import os, tempfile
        >>> from pcgeom.io import read_ply
        >>> p = generate_scan(os.path.join(tempfile.mkdtemp(), "scan.ply"), 5000, seed=1)
        >>> cloud = read_ply(p)
        >>> tuple(cloud.points.shape), sorted(cloud.properties)
        ((5000, 3), ['intensity'])
    """
    import torch
    from pcgeom.io import PlyWriter

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"generate_scan: n must be an int >= 0, got {n!r}")
    scene = _Scene(max(n, 1), seed)
    types = {"intensity": "ushort"} if intensity else None
    done, step = 0, max(1, n // 10)
    with PlyWriter(path, count=n, types=types, overwrite=overwrite) as w:
        for b in range((n + BLOCK - 1) // BLOCK):
            m = min(BLOCK, n - b * BLOCK)
            rng = np.random.default_rng([seed, b])
            xyz, kind = scene.block(rng, m)
            props = None
            if intensity:
                val = _INTENSITY[kind] * rng.uniform(0.8, 1.2, m)
                props = {"intensity": torch.from_numpy(val.clip(0, 65535).astype(np.uint16).astype(np.int32))}
            col = None
            if colors:
                c = _COLOURS[kind] + rng.integers(-12, 13, (m, 3))
                col = torch.from_numpy(c.clip(0, 255).astype(np.uint8))
            w.write(torch.from_numpy(xyz.astype(np.float32)), colors=col, properties=props)
            done += m
            if progress and (done // step) != ((done - m) // step):
                print(f"generate_scan: {done:,} / {n:,} points", file=sys.stderr, flush=True)
    return os.fspath(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--points", type=float, required=True, help="number of points (1e7 is fine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--colors", action="store_true")
    ap.add_argument("--no-intensity", action="store_true")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    generate_scan(a.path, int(a.points), seed=a.seed, intensity=not a.no_intensity, colors=a.colors,
                  overwrite=a.overwrite, progress=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Draws docs/images/preparing-scans.png: normals on a bundled scan, and removed outliers in red.

Left: the Stanford Bunny (bundled), 4,000 points, with the normals of
``pcgeom.estimate_normals(k=20, viewpoint=...)`` drawn as short segments
(coloured by orientation).  Right: the same scan with 400 uniform noise
points added; ``remove_statistical_outliers(k=20, std_ratio=2)`` keeps the
grey points and removes the red ones.

    python scripts/make_preprocess_picture.py [--out docs/images/preparing-scans.png]
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Line3DCollection  # noqa: E402

import pcgeom  # noqa: E402
import pcgeom.data  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None) -> pathlib.Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "images" / "preparing-scans.png"))
    args = ap.parse_args(argv)
    pts = pcgeom.data.load("bunny", n_points=4000, seed=0)
    # The bunny is y-up; the camera looks from +z towards the centre.
    eye = pts.mean(0) + torch.tensor([0.0, 0.0, 2.0])
    normals, curvature = pcgeom.estimate_normals(pts, k=20, viewpoint=eye)

    g = torch.Generator().manual_seed(1)
    lo, hi = pts.min(0).values, pts.max(0).values
    noise = lo - 0.1 + (hi - lo + 0.2) * torch.rand(400, 3, generator=g)
    noisy = torch.cat([pts, noise])
    keep = pcgeom.remove_statistical_outliers(noisy, k=20, std_ratio=2.0)

    def view(p):  # matplotlib's z axis up: show (x, z, y) so that the bunny stands
        return p[:, 0].numpy(), p[:, 2].numpy(), p[:, 1].numpy()

    fig = plt.figure(figsize=(12, 6.2), dpi=110)
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    x, y, z = view(pts)
    ax.scatter(x, y, z, s=1.0, c="0.75", depthshade=False)
    sel = torch.arange(0, len(pts), 4)
    tip = pts[sel] + 0.045 * normals[sel]
    seg_a = torch.stack([torch.as_tensor(v) for v in view(pts[sel])], 1)
    seg_b = torch.stack([torch.as_tensor(v) for v in view(tip)], 1)
    colours = (normals[sel] * 0.5 + 0.5).clamp(0, 1).numpy()
    ax.add_collection3d(Line3DCollection(torch.stack([seg_a, seg_b], 1).numpy(), colors=colours, linewidths=1.1))
    ax.set_title(f"estimate_normals(k=20, viewpoint=...)\n{len(pts):,} bunny points, every fourth normal drawn")
    ax2 = fig.add_subplot(1, 2, 2, projection="3d")
    x, y, z = view(noisy[keep])
    ax2.scatter(x, y, z, s=1.5, c="0.6", depthshade=False, label=f"kept ({int(keep.sum()):,})")
    x, y, z = view(noisy[~keep])
    ax2.scatter(x, y, z, s=6, c="#d62728", depthshade=False, label=f"removed ({int((~keep).sum()):,})")
    ax2.legend(loc="upper left")
    ax2.set_title("remove_statistical_outliers(k=20, std_ratio=2.0)\nthe bunny + 400 uniform noise points")
    for a_, cloud in ((ax, pts), (ax2, noisy)):
        a_.view_init(elev=10, azim=-80)
        a_.set_box_aspect((1, 1, 1))
        a_.set_axis_off()
        lim = (float(cloud.min()), float(cloud.max()))
        a_.set_xlim(*lim), a_.set_ylim(*lim), a_.set_zlim(*lim)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=0.9, wspace=0)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()

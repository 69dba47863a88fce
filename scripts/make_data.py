#!/usr/bin/env python
"""Rebuilds the bundled scans in ``pcgeom/data/scans/`` from Debian's ``libcgal-demo`` package.

The scans come from CGAL's example data, which Debian ships (as a tarball
inside the documentation folder) in the architecture-independent
``libcgal-demo`` package.  The package is only downloaded and unpacked here,
never installed, so this runs anywhere Debian's archive is reachable::

    python scripts/make_data.py                    # apt-get download libcgal-demo, convert
    python scripts/make_data.py --deb libcgal-demo_5.5.1-2_all.deb   # use a .deb you have

What the conversion does, per scan (see ``data/README.md``):

* meshes (``.off``): keep every vertex (all are used by faces) and give each an
  area-weighted vertex normal computed from its triangles, oriented outwards
  (the mesh's signed volume decides);
* ``kitten.xyz``: points with the normals the file carries;
* centre the bounding box at the origin and scale its longest side to 1
  (every scan is already y-up, so nothing is rotated);
* store ``x y z nx ny nz`` as float32 binary little-endian PLY via ``pcgeom.io.write_ply``.

The output is deterministic: rerunning on the same ``.deb`` gives identical files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

# name -> (member of CGAL's data.tar.gz, kind)
SCANS = {
    "bunny": ("data/meshes/bunny00.off", "off"),
    "armadillo": ("data/meshes/armadillo.off", "off"),
    "chinese_dragon": ("data/meshes/ChineseDragon-10kv.off", "off"),
    "kitten": ("data/points_3/kitten.xyz", "xyz"),
}
DATA_TARBALL = "usr/share/doc/libcgal-dev/data.tar.gz"
# The package the committed files were made from (Debian 12 "bookworm").
KNOWN_DEB = ("libcgal-demo_5.5.1-2_all.deb", "78b09b23d4d6d1bf15552a1060b419ab3fc09918486462faed197e5fc6ac3735")
REPO = Path(__file__).resolve().parents[1]


def download_deb(folder: Path) -> Path:
    subprocess.run(["apt-get", "download", "libcgal-demo"], cwd=folder, check=True)
    debs = sorted(folder.glob("libcgal-demo_*_all.deb"))
    if not debs:
        sys.exit("apt-get download libcgal-demo produced no .deb (is a Debian archive configured? try apt-get update)")
    return debs[-1]


def deb_data_tar(deb: Path) -> tarfile.TarFile:
    """Opens the data.tar.* member of a .deb (an ar archive) without dpkg."""
    blob = deb.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        sys.exit(f"{deb} is not a Debian package (no ar magic)")
    pos = 8
    while pos + 60 <= len(blob):
        head = blob[pos : pos + 60]
        name = head[:16].decode().strip().rstrip("/")
        size = int(head[48:58].decode().strip())
        body = blob[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        pos += 60 + size + (size & 1)
    sys.exit(f"{deb} has no data.tar member")


def cgal_members(deb: Path, wanted: list[str]) -> dict[str, bytes]:
    outer = deb_data_tar(deb)
    member = next((m for m in outer.getmembers() if m.name.lstrip("./") == DATA_TARBALL), None)
    if member is None:
        sys.exit(f"{deb} has no {DATA_TARBALL}")
    inner = tarfile.open(fileobj=io.BytesIO(gzip.decompress(outer.extractfile(member).read())), mode="r:")
    found = {m.name.lstrip("./"): m for m in inner.getmembers()}
    missing = [w for w in wanted if w not in found]
    if missing:
        sys.exit(f"CGAL's data tarball lacks {missing}")
    return {w: inner.extractfile(found[w]).read() for w in wanted}


def parse_off(text: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [ln.split("#", 1)[0].split() for ln in text.splitlines()]
    rows = [r for r in rows if r]
    if rows[0][0] != "OFF":
        raise ValueError("not an OFF file")
    head = rows[0][1:] if len(rows[0]) > 1 else rows[1]
    body = rows[1:] if len(rows[0]) > 1 else rows[2:]
    nv, nf = int(head[0]), int(head[1])
    verts = np.array(body[:nv], dtype=np.float64)[:, :3]
    faces = body[nv : nv + nf]
    if any(int(f[0]) != 3 for f in faces):
        raise ValueError("only triangle meshes are expected")
    return verts, np.array([f[1:4] for f in faces], dtype=np.int64)


def vertex_normals(verts: np.ndarray, faces: np.ndarray) -> np.ndarray:
    a, b, c = (verts[faces[:, i]] for i in range(3))
    face_n = np.cross(b - a, c - a)  # length = 2 * area: area weighting for free
    signed_volume = np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0
    if signed_volume < 0:  # inward-wound mesh: flip so normals point out
        face_n = -face_n
    acc = np.zeros_like(verts)
    for i in range(3):
        np.add.at(acc, faces[:, i], face_n)
    length = np.linalg.norm(acc, axis=1, keepdims=True)
    if (length == 0).any():
        raise ValueError(f"{int((length == 0).sum())} vertices have no well-defined normal")
    return acc / length


def normalise(points: np.ndarray) -> np.ndarray:
    lo, hi = points.min(0), points.max(0)
    return (points - (lo + hi) / 2) / (hi - lo).max()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deb", type=Path, help="use this libcgal-demo .deb instead of downloading it")
    parser.add_argument("--out", type=Path, default=REPO / "pcgeom" / "data" / "scans")
    parser.add_argument("--overwrite", action="store_true", help="replace existing PLY files")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    import torch

    from pcgeom.io import write_ply

    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb or download_deb(Path(tmp))
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        print(f"source: {deb.name} sha256 {digest}")
        if (deb.name, digest) != KNOWN_DEB:
            print(f"note: the committed scans were made from {KNOWN_DEB[0]} (sha256 {KNOWN_DEB[1]}); "
                  "another CGAL release may give different files", file=sys.stderr)
        blobs = cgal_members(deb, [m for m, _ in SCANS.values()])
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (member, kind) in SCANS.items():
        text = blobs[member].decode("ascii")
        if kind == "off":
            verts, faces = parse_off(text)
            normals = vertex_normals(verts, faces)
        else:
            table = np.loadtxt(io.StringIO(text), dtype=np.float64)
            verts, normals = table[:, :3], table[:, 3:6]
            normals = normals / np.linalg.norm(normals, axis=1, keepdims=True)
        pts = normalise(verts)
        path = write_ply(
            args.out / f"{name}.ply",
            torch.from_numpy(pts.astype(np.float32)),
            normals=torch.from_numpy(normals.astype(np.float32)),
            overwrite=args.overwrite,
        )
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {len(pts)} points from {member} "
              f"({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

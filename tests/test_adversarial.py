"""Adversarial use of the public ops and the CLI: forked workers, threads, odd layouts, interrupted runs.

Each test compares against the same call made the plain way (contiguous input,
one thread, the parent process), or against a float64 brute force.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import pcgeom
import pcgeom.data

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.ops  # run on the native and on the pure-torch path


def _cloud(b=2, n=300, d=3, seed=0):
    return torch.randn(b, n, d, generator=torch.Generator().manual_seed(seed))


def _brute_knn(q, p, k):
    d = torch.cdist(q.double(), p.double()) ** 2
    return d.topk(k, dim=-1, largest=False, sorted=True)


# ---------------------------------------------------------------- fork and threads


@pytest.mark.slow
@pytest.mark.parametrize("pure", [False, True])
def test_fork_started_dataloader_workers_after_the_parent_used_the_ops(tmp_path, pure):
    code = textwrap.dedent("""
        import torch, pcgeom
        from torch.utils.data import DataLoader, Dataset
        pts = torch.randn(4, 200, 3, generator=torch.Generator().manual_seed(1))
        parent = [pcgeom.knn(pts[i:i+1], pts[i:i+1], 8).idx for i in range(4)]  # used before the fork
        parent_fps = [pcgeom.farthest_point_sample(pts[i:i+1], 16) for i in range(4)]
        class D(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i):
                c = pts[i:i+1]
                return i, pcgeom.knn(c, c, 8).idx[0], pcgeom.farthest_point_sample(c, 16)[0]
        loader = DataLoader(D(), batch_size=None, num_workers=2, multiprocessing_context="fork")
        seen = 0
        for i, idx, fps in loader:
            assert torch.equal(idx, parent[i][0]) and torch.equal(fps, parent_fps[i][0]), i
            seen += 1
        assert seen == 4
        print("ok", pcgeom.backend_info()["extension_loaded"])
    """)
    env = {**os.environ, "PCGEOM_DISABLE_EXT": "1" if pure else "0"}
    if not pure:
        env.pop("PCGEOM_DISABLE_EXT")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[0] == "ok"
    if pure:
        assert run.stdout.split()[1] == "False"


def test_concurrent_threads_give_the_sequential_answers():
    clouds = [_cloud(1, 400, 3, seed=s) for s in range(8)]

    def work(c):
        return (pcgeom.knn(c, c, 12), pcgeom.farthest_point_sample(c, 32),
                pcgeom.ball_query(c, c, 0.5, 6), pcgeom.group_patches(c, 8, 16, return_index=True)[3])

    sequential = [work(c) for c in clouds]
    results = [None] * len(clouds)
    errors = []

    def run(i):
        try:
            for _ in range(3):
                results[i] = work(clouds[i])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clouds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for seq, got in zip(sequential, results):
        assert torch.equal(seq[0].idx, got[0].idx) and torch.equal(seq[0].dist2, got[0].dist2)
        assert torch.equal(seq[1], got[1]) and torch.equal(seq[2].idx, got[2].idx) and torch.equal(seq[3], got[3])


# ---------------------------------------------------------------- layouts


def _layouts(t):
    """The same values as expanded, transposed-back, strided and sliced views."""
    yield "contiguous", t
    yield "transposed", t.transpose(1, 2).contiguous().transpose(1, 2)
    yield "strided", torch.stack([t, torch.full_like(t, 7.0)], -1)[..., 0]
    yield "sliced", torch.cat([t, t], 1)[:, : t.shape[1]]
    if t.shape[0] == 1:
        yield "expanded", t[0:1].expand(3, -1, -1)


def test_knn_ball_query_gather_fps_on_non_contiguous_and_expanded_inputs():
    base = _cloud(1, 257, 3, seed=3)
    ref = _brute_knn(base, base, 9)
    ref_bq = pcgeom.ball_query(base, base, 0.6, 5)
    ref_fps = pcgeom.farthest_point_sample(base, 20)
    for name, t in _layouts(base):
        got = pcgeom.knn(t, t, 9)
        b = t.shape[0]
        assert torch.equal(got.idx, ref.indices.expand(b, -1, -1)), name
        assert torch.allclose(got.dist2.double(), ref.values.expand(b, -1, -1), rtol=1e-5, atol=1e-5), name
        assert torch.equal(pcgeom.ball_query(t, t, 0.6, 5).idx, ref_bq.idx.expand(b, -1, -1)), name
        assert torch.equal(pcgeom.farthest_point_sample(t, 20), ref_fps.expand(b, -1)), name
        g = pcgeom.knn_gather(t, got.idx)
        assert torch.equal(g, base[0][ref.indices[0]].expand(b, -1, -1, -1)), name
        # Non-contiguous indices too.
        idx_nc = torch.stack([got.idx, got.idx], -1)[..., 1]
        assert torch.equal(pcgeom.knn_gather(t, idx_nc), g), name


def test_composites_on_non_contiguous_and_expanded_inputs():
    base = _cloud(1, 300, 3, seed=4)
    ref_g = pcgeom.group_patches(base, 6, 10, return_index=True)
    y = _cloud(1, 111, 3, seed=5)
    ref_c = pcgeom.chamfer_distance(base, y)
    ref_grid = pcgeom.grid_subsample(base[0], 0.5)
    for name, t in _layouts(base):
        got = pcgeom.group_patches(t, 6, 10, return_index=True)
        assert torch.equal(got[3], ref_g[3].expand(t.shape[0], -1, -1)), name
        yy = y.expand(t.shape[0], -1, -1)
        assert torch.allclose(pcgeom.chamfer_distance(t, yy), ref_c), name
        g = pcgeom.grid_subsample(t[0], 0.5)
        assert all(torch.equal(a, b) for a, b in zip(g, ref_grid) if isinstance(a, torch.Tensor)), name


def test_zero_size_inputs():
    e = torch.empty(0, 5, 3)
    assert pcgeom.knn(e, e, 2).idx.shape == (0, 5, 2)
    assert pcgeom.ball_query(e, e, 0.1, 2).idx.shape == (0, 5, 2)
    assert pcgeom.farthest_point_sample(e, 2).shape == (0, 2)
    q = torch.empty(2, 0, 3)
    p = _cloud(2, 10)
    assert pcgeom.knn(q, p, 3).idx.shape == (2, 0, 3)
    assert pcgeom.ball_query(q, p, 0.3, 3).idx.shape == (2, 0, 3)
    assert pcgeom.knn_gather(p, torch.empty(2, 0, 3, dtype=torch.int64)).shape == (2, 0, 3, 3)
    assert pcgeom.grid_subsample(torch.empty(0, 3), 0.5)[0].shape == (0, 3)
    # Expanded zero-stride query over a real gallery.
    one = p[:, :1].expand(2, 4, 3)
    got = pcgeom.knn(one, p, 2)
    assert (got.idx[:, :1] == got.idx).all() and torch.equal(got.idx[:, 0], _brute_knn(p[:, :1], p, 2).indices[:, 0])


# ---------------------------------------------------------------- interrupted and full-disk CLI runs


def _group_cmd(src, out):
    return [sys.executable, "-m", "pcgeom", "group", str(src), "--centers", "8", "--k", "16", "--out", str(out),
            "--device", "cpu"]


def _outputs(out: Path):
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) if out.exists() else []


def _check_complete_or_absent(out: Path):
    """Every output present is complete (a readable .ply with its .pt), nothing temporary is left visible."""
    from pcgeom.io import read_ply

    for p in out.rglob("*_patches.pt"):
        res = torch.load(p, weights_only=True)
        assert res["idx"].shape == (8, 16)
        assert read_ply(p.with_suffix(".ply")).points.shape[0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_group_interrupted_leaves_no_half_written_output_and_a_rerun_completes(tmp_path, sig):
    from tests._pause_hook import pause_env, wait_for

    src = tmp_path / "in"
    src.mkdir()
    n = 6
    for i in range(n):
        shutil.copy(pcgeom.data.path("bunny"), src / f"s{i:02d}.ply")
    out = tmp_path / "out"
    # The run pauses after its second file (test hook); the signal then lands mid-run on any machine.
    env, paused = pause_env(tmp_path, ROOT, after=2)
    proc = subprocess.Popen(_group_cmd(src, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(paused, proc)
        proc.send_signal(sig)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    visible = [p for p in _outputs(out) if not p.startswith(".")]
    assert visible == [f"s{i:02d}_patches.{e}" for i in range(2) for e in ("ply", "pt")]  # the two finished files
    _check_complete_or_absent(out)
    rerun = subprocess.run(_group_cmd(src, out) + ["--resume"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _outputs(out) == sorted([f"s{i:02d}_patches.{e}" for i in range(n) for e in ("ply", "pt")])
    _check_complete_or_absent(out)


@pytest.mark.slow
def test_group_on_a_full_disk_leaves_no_half_written_output(tmp_path):
    # RLIMIT_FSIZE stands in for a full disk: every write past the limit fails with EFBIG.
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(pcgeom.data.path("kitten"), src / "a.ply")
    out = tmp_path / "out"

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    run = subprocess.run(_group_cmd(src, out), capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "a.ply:" in run.stderr and "1 failed" in run.stderr
    assert _outputs(out) == [], _outputs(out)  # neither a partial file nor the private folder
    rerun = subprocess.run(_group_cmd(src, out), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _outputs(out) == ["a_patches.ply", "a_patches.pt"]
    _check_complete_or_absent(out)

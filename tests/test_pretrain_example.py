"""examples/point_mae_pretrain.py: a few steps single-process and with 2 DDP processes (gloo).

The model is shrunk (16 patches of 16 points, 32-wide tokens) so that the two
runs take a few seconds; the asserted properties are the real ones: the
Chamfer loss goes down, a checkpoint is written and never silently replaced,
and the DDP replicas hold bit-identical parameters after training.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "point_mae_pretrain.py"
SMALL = [
    "--steps", "20", "--batch-size", "4", "--points", "256", "--groups", "16", "--group-size", "16",
    "--dim", "32", "--depth", "1", "--decoder-depth", "1", "--heads", "2", "--log-every", "10",
]


def _load_example():
    spec = importlib.util.spec_from_file_location("point_mae_pretrain", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _decreases(out):
    """Training loss (first vs last 5 steps) and the fixed held-out batch's loss both go down."""
    losses, ev = out["losses"], out["eval_loss"]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    ok = last < 0.9 * first and ev["after"] < 0.8 * ev["before"]
    return ok, f"training {first:.4g} -> {last:.4g}, held-out {ev['before']:.4g} -> {ev['after']:.4g}"


@pytest.fixture
def one_thread():
    # The shrunk model's ops are tiny: intra-op threads only add fork/join cost,
    # which explodes when other jobs share the cores.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_pretrain_single_process(tmp_path, monkeypatch, one_thread):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    ex = _load_example()
    ckpt = tmp_path / "mae.pt"
    out = ex.main(SMALL + ["--checkpoint", str(ckpt), "--device", "cpu"])
    losses = out["losses"]
    assert len(losses) == 20 and all(torch.isfinite(torch.tensor(losses)))
    ok, msg = _decreases(out)
    assert ok, f"loss did not decrease: {msg}"
    saved = torch.load(ckpt, weights_only=False)
    assert saved["losses"] == losses and saved["world_size"] == 1 and saved["step"] == 20
    assert saved["eval_loss"] == out["eval_loss"]
    model = ex.PointMAE(16, 16, 32, 1, 1, 2)
    model.load_state_dict(saved["model"])  # the checkpoint restores the architecture it came from

    # never overwrite without --overwrite, and leave the file untouched
    before = ckpt.read_bytes()
    with pytest.raises(SystemExit, match="already exists; pass --overwrite"):
        ex.main(SMALL + ["--checkpoint", str(ckpt), "--device", "cpu", "--steps", "1"])
    assert ckpt.read_bytes() == before
    ex.main(SMALL + ["--checkpoint", str(ckpt), "--device", "cpu", "--steps", "1", "--overwrite"])
    assert torch.load(ckpt, weights_only=False)["step"] == 1


@pytest.mark.slow
def test_pretrain_ddp_two_processes(tmp_path):
    ckpt = tmp_path / "ddp.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(SCRIPT), *SMALL, "--checkpoint", str(ckpt), "--device", "cpu", "--save-every-rank",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout
    r0 = torch.load(ckpt.with_name("ddp.rank0.pt"), weights_only=False)
    r1 = torch.load(ckpt.with_name("ddp.rank1.pt"), weights_only=False)
    assert r0["world_size"] == r1["world_size"] == 2
    # replicas stay in sync: every parameter and optimizer moment identical on both ranks
    assert r0["model"].keys() == r1["model"].keys()
    for name in r0["model"]:
        assert torch.equal(r0["model"][name], r1["model"][name]), name
    for s0, s1 in zip(r0["optimizer"]["state"].values(), r1["optimizer"]["state"].values()):
        assert torch.equal(s0["exp_avg"], s1["exp_avg"])
    # ... while each rank saw different data (otherwise being in sync would prove nothing)
    assert r0["local_losses"][0] != r1["local_losses"][0]
    assert r0["losses"] == r1["losses"]  # the logged loss is the mean over ranks
    mean = [(a + b) / 2 for a, b in zip(r0["local_losses"], r1["local_losses"])]
    assert torch.allclose(torch.tensor(r0["losses"]), torch.tensor(mean), rtol=1e-6)
    assert r0["eval_loss"] == r1["eval_loss"]  # same held-out batch, same weights
    ok, msg = _decreases(r0)
    assert ok, f"loss did not decrease: {msg}"
    main = torch.load(ckpt, weights_only=False)
    for name in main["model"]:
        assert torch.equal(main["model"][name], r0["model"][name])

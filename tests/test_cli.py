"""The pcgeom command line end to end on the bundled scans: exit codes, outputs, no overwriting, bad files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pcgeom.data
from pcgeom.cli import main
from pcgeom.io import read_ply, write_ply
from pcgeom.vis import patch_colors

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--n-points", "2048", "--centers", "8", "--k", "32", "--size", "320x240"]


@pytest.fixture(autouse=True)
def _mesa_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MESA_SHADER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mesa"))


def _check_patch_ply(path, n, G, k):
    cloud = read_ply(path)
    assert cloud.points.shape == (n, 3) and cloud.normals is not None
    labels = cloud.properties["patch"]
    assert labels.dtype == torch.int32 and labels.min() >= -1 and labels.max() == G - 1
    # Every patch keeps at least one of its k points; at most G * k points are coloured.
    assert len(torch.unique(labels[labels >= 0])) == G
    assert 0 < int((labels >= 0).sum()) <= G * k
    pal = torch.from_numpy(patch_colors(G) * 255).round().to(torch.uint8)
    member = labels >= 0
    assert torch.equal(cloud.colors[member], pal[labels[member].long()])
    assert (cloud.colors[~member] == 204).all()
    return cloud


def test_demo_writes_outputs_and_never_overwrites(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *SMALL]) == 0
    text = capsys.readouterr().out
    assert "backend" in text and "group_patches" in text and "ms" in text
    assert "bunny: 2,048 of 37,706 points" in text
    ply, png = out / "bunny_patches.ply", out / "bunny_patches.png"
    cloud = _check_patch_ply(ply, 2048, 8, 32)
    # The demo's points are the bundled scan's (subset with the default seed).
    assert torch.equal(cloud.points, pcgeom.data.load("bunny", n_points=2048))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = (ply.read_bytes(), png.read_bytes())

    assert main(["demo", "--out", str(out), *SMALL, "--k", "16"]) == 1
    err = capsys.readouterr().err
    assert "already exist" in err and "--overwrite" in err and "--out" in err
    assert (ply.read_bytes(), png.read_bytes()) == before

    assert main(["demo", "--out", str(out), *SMALL, "--k", "16", "--overwrite", "--renderer", "matplotlib"]) == 0
    assert "matplotlib" in capsys.readouterr().out
    _check_patch_ply(ply, 2048, 8, 16)


def test_demo_other_scan_and_bad_arguments(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--scan", "kitten", "--n-points", "100", "--centers", "4",
                 "--k", "200", "--renderer", "matplotlib"]) == 1
    assert "must not exceed the 100 points" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    for bad in (["--centers", "0"], ["--scan", "teapot"], ["--size", "big"], ["--renderer", "vtk"]):
        with pytest.raises(SystemExit) as exc:
            main(["demo", "--out", str(tmp_path), *bad])
        assert exc.value.code == 2


def _inputs(tmp_path):
    src = tmp_path / "in"
    (src / "nested").mkdir(parents=True)
    shutil.copy(pcgeom.data.path("kitten"), src / "kitten.ply")
    write_ply(src / "nested" / "dragon.ply", pcgeom.data.load("chinese_dragon", n_points=3000))
    (src / "broken.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 99\n"
                                     b"property float x\nproperty float y\nproperty float z\nend_header\n" + bytes(30))
    (src / "notes.txt").write_text("not a cloud, ignored")
    return src


def test_group_processes_good_files_and_reports_bad_ones(tmp_path, capsys):
    src = _inputs(tmp_path)
    out = tmp_path / "out"
    tiny = tmp_path / "tiny.ply"
    write_ply(tiny, torch.rand(10, 3))
    rc = main(["group", str(src), str(tiny), str(tmp_path / "missing.ply"), "--centers", "16", "--k", "24",
               "--out", str(out), "--png", "--renderer", "matplotlib"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "3 failed" in err
    assert "broken.ply: truncated file or wrong element count" in err
    assert "tiny.ply: 10 points, fewer than --centers 16" in err
    assert "missing.ply: no such file or folder" in err
    expected = {"kitten_patches.ply", "kitten_patches.pt", "kitten_patches.png",
                "nested/dragon_patches.ply", "nested/dragon_patches.pt", "nested/dragon_patches.png"}
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} == expected

    kitten = pcgeom.data.load("kitten")
    _check_patch_ply(out / "kitten_patches.ply", len(kitten), 16, 24)
    res = torch.load(out / "kitten_patches.pt", weights_only=True)
    assert set(res) == {"centers", "center_idx", "idx", "neighborhoods"}
    assert res["idx"].shape == (16, 24) and res["centers"].shape == (16, 3)
    assert torch.equal(res["centers"], kitten[res["center_idx"]])
    assert torch.equal(res["neighborhoods"], kitten[res["idx"]] - res["centers"][:, None])
    # The neighbours are each centre's 24 nearest points (float64 brute force; ties are measure-zero here).
    d = torch.cdist(res["centers"].double(), kitten.double())
    nearest = d.topk(24, largest=False).indices.sort(1).values
    assert torch.equal(res["idx"].sort(1).values, nearest)


def test_group_never_overwrites(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(pcgeom.data.path("kitten"), src / "a.ply")
    out = tmp_path / "out"
    args = ["group", str(src), "--centers", "8", "--k", "16", "--out", str(out)]
    assert main(args) == 0
    ply = out / "a_patches.ply"
    before = ply.read_bytes()
    capsys.readouterr()
    assert main([*args[:3], "4", *args[4:]]) == 1
    err = capsys.readouterr().err
    assert "output exists" in err and "pass --overwrite" in err
    assert ply.read_bytes() == before
    assert main([*args[:3], "4", *args[4:], "--overwrite"]) == 0
    assert read_ply(ply).properties["patch"].max() == 3


def test_group_without_inputs(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["group", str(tmp_path / "empty"), "--centers", "4", "--k", "4", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "holds no .ply files" in err and "no PLY files to process" in err
    with pytest.raises(SystemExit) as exc:
        main(["group", str(tmp_path), "--k", "4", "--out", str(tmp_path / "o")])  # --centers missing
    assert exc.value.code == 2


@pytest.mark.slow
def test_python_dash_m(tmp_path):
    env = {**os.environ, "MESA_SHADER_CACHE_DIR": str(tmp_path / "mesa")}
    run = subprocess.run([sys.executable, "-m", "pcgeom", "demo", "--out", str(tmp_path / "d"), *SMALL,
                          "--renderer", "matplotlib"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "d" / "bunny_patches.png").is_file()
    assert "wrote" in run.stdout and "group_patches" in run.stdout


def test_doctor_still_works(capsys):
    assert main(["doctor"]) == 0
    assert "native library" in capsys.readouterr().out


def test_group_output_inside_input_folder(tmp_path, capsys):
    src = tmp_path / "scans"
    src.mkdir()
    shutil.copy(pcgeom.data.path("kitten"), src / "k.ply")
    args = ["group", str(src), "--centers", "4", "--k", "8", "--out", str(src / "patches")]
    assert main(args) == 0
    assert main([*args, "--overwrite"]) == 0  # its own outputs are not inputs
    assert sorted(p.name for p in (src / "patches").iterdir()) == ["k_patches.ply", "k_patches.pt"]
    assert "1 of 1 file grouped" in capsys.readouterr().out


def test_demo_scan_choices_are_the_bundled_scans():
    from pcgeom.cli import build_parser

    demo = build_parser()._subparsers._group_actions[0].choices["demo"]
    scan = next(a for a in demo._actions if a.dest == "scan")
    assert sorted(scan.choices) == pcgeom.data.names()


def test_group_resume_skips_finished_files_and_redoes_the_rest(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a", "b", "c"):
        shutil.copy(pcgeom.data.path("kitten"), src / f"{name}.ply")
    out = tmp_path / "out"
    args = ["group", str(src), "--centers", "8", "--k", "16", "--out", str(out)]
    assert main(args) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    # An interrupted run: b's .pt (written last) missing, c's outputs gone, a stale private folder.
    (out / "b_patches.pt").unlink()
    (out / "b_patches.ply").write_bytes(b"left by a killed run")
    (out / "c_patches.ply").unlink()
    (out / "c_patches.pt").unlink()
    (out / ".b_patches.pcgeom-partial").mkdir()
    (out / ".b_patches.pcgeom-partial" / "b_patches.ply").write_bytes(b"ply\n")
    assert main(args) == 1  # without --resume: unchanged, existing outputs are never replaced
    captured = capsys.readouterr()
    assert "1 of 3 files grouped" in captured.out  # c
    assert "b_patches.ply (pass --overwrite to replace)" in captured.err and "a_patches" in captured.err
    (out / "c_patches.pt").unlink()
    assert main([*args, "--resume"]) == 0
    text = capsys.readouterr().out
    assert "2 of 3 files grouped" in text and "1 already done" in text
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first  # nothing temporary left either
    assert main([*args, "--resume"]) == 0
    assert "0 of 3 files grouped" in capsys.readouterr().out
    # Finished outputs with other settings are not silently kept.
    assert main([*args[:3], "4", *args[4:], "--resume"]) == 1
    assert "from a run with other settings (8 patches x 16 neighbours)" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_group_failure_leaves_no_partial_output(tmp_path, capsys):
    bad = tmp_path / "nan.ply"
    pts = pcgeom.data.load("kitten", n_points=500).clone()
    pts[7, 1] = float("nan")
    write_ply(bad, pts)
    out = tmp_path / "out"
    assert main(["group", str(bad), "--centers", "4", "--k", "8", "--out", str(out)]) == 1
    assert "1 points have NaN or infinite coordinates" in capsys.readouterr().err
    assert not out.exists() or not list(out.rglob("*"))


def test_group_rank_share_is_a_deterministic_partition():
    from pcgeom.cli.group import rank_share as _rank_share

    for n in (0, 1, 5, 12):
        for world in (1, 2, 3, 8):
            shares = [_rank_share(n, r, world) for r in range(world)]
            assert sorted(i for s in shares for i in s) == list(range(n))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
            assert shares == [_rank_share(n, r, world) for r in range(world)]


@pytest.mark.slow
def test_group_reports_a_tiny_hostile_file_and_processes_the_rest(tmp_path):
    # The ~100-byte PLY of the report (an element without properties declaring 10^12 rows) sorted
    # *before* the good files: it is reported, the others are grouped, the exit status is 1.
    src = tmp_path / "in"
    src.mkdir()
    (src / "a_hostile.ply").write_bytes(
        b"ply\nformat binary_little_endian 1.0\nelement blank 1000000000000\nelement vertex 1\n"
        b"property float x\nproperty float y\nproperty float z\nproperty list uchar int ring\nend_header\n" + bytes(13))
    assert len((src / "a_hostile.ply").read_bytes()) < 200
    shutil.copy(pcgeom.data.path("kitten"), src / "b.ply")
    shutil.copy(pcgeom.data.path("kitten"), src / "c.ply")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "pcgeom", "group", str(src), "--centers", "4", "--k", "8",
                          "--out", str(out), "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "2 of 3 files grouped" in run.stdout
    assert "1 failed" in run.stderr and "a_hostile.ply: truncated file or wrong element count" in run.stderr
    assert "1000000000000 blank" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["b_patches.ply", "b_patches.pt", "c_patches.ply", "c_patches.pt"]


@pytest.mark.parametrize("argv, says", [
    (["demo", "--device", ""], "argument --device: expected auto, cpu, cuda or cuda:N, got ''"),
    (["demo", "--device", "nope"], "argument --device: expected auto, cpu, cuda or cuda:N"),
    (["demo", "--size", "0x0"], "argument --size: expected WIDTH and HEIGHT from 16 to 8192"),
    (["demo", "--seed", "99999999999999999999999"], "argument --seed: expected an integer in [-2**63, 2**64)"),
    (["demo", "--out", ""], "argument --out: expected a file or folder name, got ''"),
    (["group", "", "--out", "x", "--centers", "2", "--k", "2"], "argument INPUT: expected a file or folder name"),
    (["preprocess", "a.ply", "--out", " ", "--voxel", "1"], "argument --out: expected a file or folder name"),
    (["preprocess", "a.ply", "--out", "o", "--normals", "4", "--viewpoint", "nan,0,0"], "argument --viewpoint"),
    (["compat", "enable", "--site-dir", ""], "argument --site-dir: expected a file or folder name, got ''"),
])
def test_hostile_option_values_are_argparse_errors(argv, says, capsys):
    # an empty --out or --site-dir ("$DIR" unset) would otherwise mean the current folder or this environment
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and says in err and "Traceback" not in err


def test_demo_n_points_beyond_the_scan_is_a_message(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--n-points", "99999999"]) == 1
    assert "--n-points 99999999 exceeds the 37,706 points of scan bunny" in capsys.readouterr().err

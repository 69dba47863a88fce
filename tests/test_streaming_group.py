"""pcgeom.streaming.group_streamed and ``pcgeom group`` above its memory budget: the in-memory outputs, exactly.

Every comparison is against the in-memory ``pcgeom group`` run on the same file (itself tested in
test_cli.py and, through group_patches, against float64 brute force in test_grouping.py): the
PLY byte for byte, the ``.pt`` tensors with ``torch.equal``.  Small ``block_points`` and
``chunk_points`` force many tiles and chunks on clouds of a few thousand points, so tile edges,
halos smaller than a patch, empty tiles and chunk boundaries inside patches are all crossed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from pcgeom.cli import main
from pcgeom.io import read_ply, write_ply
from pcgeom.streaming.group import group_streamed, in_memory_bytes, streamed_bytes

ROOT = Path(__file__).resolve().parents[1]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _in_memory(src, out, G, k):
    """The reference: today's in-memory command (a budget far above the file)."""
    assert main(["group", str(src), "--centers", str(G), "--k", str(k), "--out", str(out), "--memory", "1000"]) == 0
    return out / f"{Path(src).stem}_patches.ply", out / f"{Path(src).stem}_patches.pt"


def _same_outputs(ply_a, pt_a, ply_b, pt_b):
    assert Path(ply_a).read_bytes() == Path(ply_b).read_bytes()
    a, b = torch.load(pt_a, weights_only=True), torch.load(pt_b, weights_only=True)
    assert sorted(a) == sorted(b) == ["center_idx", "centers", "idx", "neighborhoods"]
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def _check(tmp_path, pts, G, k, *, block_points, chunk_points, **columns):
    src = tmp_path / "scan.ply"
    write_ply(src, pts, **columns)
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", G, k)
    (tmp_path / "str").mkdir()
    got = group_streamed(src, tmp_path / "str" / "scan_patches.ply", tmp_path / "str" / "scan_patches.pt", G, k,
                         block_points=block_points, chunk_points=chunk_points)
    _same_outputs(ref_ply, ref_pt, got.ply, got.pt)
    return torch.load(got.pt, weights_only=True)


def _lattice(n_side, dtype=torch.float32):
    r = torch.arange(n_side, dtype=dtype)
    return torch.cartesian_prod(r, r, r)


def _twins():
    return torch.tensor([[-1e-22, 0, 0], [0, 0, 0], [2e-23, 0, 0]] + [[5 + i, 0, 0] for i in range(5)])


CASES = {
    # name: (points, G, k, block_points, chunk_points)
    "uniform": (lambda: torch.rand(3000, 3, generator=_gen(0)), 32, 16, 64, 700),
    "one_centre": (lambda: torch.rand(2000, 3, generator=_gen(1)), 1, 50, 64, 333),
    "k_equals_n": (lambda: torch.rand(300, 3, generator=_gen(2)), 5, 300, 16, 64),
    "one_tile": (lambda: torch.rand(1500, 3, generator=_gen(3)), 24, 20, 1 << 16, 1 << 16),
    # integer lattice: exact distance ties everywhere and points exactly on the tiles' median cuts
    "lattice_ties": (lambda: _lattice(12), 40, 27, 32, 500),
    # halos far smaller than a patch: tiles of 8 points, patches of 200
    "tiny_tiles": (lambda: torch.rand(2500, 3, generator=_gen(4)), 8, 200, 8, 100),
    # exact duplicates: five copies of every point, shuffled; zero-distance ties inside every patch
    "duplicates": (lambda: torch.rand(400, 3, generator=_gen(5)).repeat(5, 1)[torch.randperm(2000, generator=_gen(6))],
                   30, 12, 32, 250),
    # two points whose squared distance underflows to 0 (distinct, yet a "duplicate" to the kernels): FPS picks
    # the higher-indexed one as a centre, the plain KNN puts the lower one first, group_patches moves the centre up
    "underflow_twins": (_twins, 8, 3, 2, 3),
    # ... and with k = 1 the lower twin fills the whole patch: the centre replaces it
    "underflow_twins_k1": (_twins, 8, 1, 2, 3),
    # three tight clusters far apart: most of space is empty, tiles hug the clusters
    "clusters": (lambda: torch.cat([torch.randn(900, 3, generator=_gen(7)) * 0.01 + torch.tensor(c, dtype=torch.float32)
                                    for c in ([0, 0, 0], [50, 0, 0], [0, 0, -80])]), 12, 40, 32, 400),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_equals_in_memory(tmp_path, case):
    make, G, k, block, chunk = CASES[case]
    res = _check(tmp_path, make(), G, k, block_points=block, chunk_points=chunk)
    assert res["idx"].shape == (G, k) and torch.equal(res["idx"][:, 0], res["center_idx"])


def test_columns_of_several_types_colours_normals_and_a_patch_column(tmp_path):
    n = 2500
    g = _gen(8)
    pts = torch.rand(n, 3, generator=g, dtype=torch.float64)  # double coordinates: read and written as double
    props = {
        "intensity": torch.randint(0, 60000, (n,), generator=g, dtype=torch.int32),
        "cls": torch.randint(-100, 100, (n,), generator=g, dtype=torch.int8),
        "t": torch.rand(n, generator=g, dtype=torch.float64),
        "patch": torch.full((n,), 7, dtype=torch.int16),  # replaced by the patch labels
    }
    src = tmp_path / "scan.ply"
    write_ply(src, pts, colors=torch.randint(0, 65535, (n, 3), generator=g, dtype=torch.int32),
              normals=torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1),
              properties=props, types={"red": "ushort", "green": "ushort", "blue": "ushort",
                                       "intensity": "ushort", "t": "double"})
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", 16, 24)
    (tmp_path / "str").mkdir()
    got = group_streamed(src, tmp_path / "str" / "a.ply", tmp_path / "str" / "a.pt", 16, 24,
                         block_points=50, chunk_points=333)
    _same_outputs(ref_ply, ref_pt, got.ply, got.pt)
    cloud = read_ply(got.ply, dtype=torch.float64)
    assert torch.equal(cloud.points, pts) and cloud.colors.dtype == torch.uint8
    assert cloud.properties["patch"].dtype == torch.int32 and int(cloud.properties["patch"].max()) == 15


def _write_big_endian(path, pts, extra):
    """A binary_big_endian PLY (write_ply writes little-endian only)."""
    names = ["x", "y", "z"] + list(extra)
    cols = [pts[:, i].numpy().astype(">f4") for i in range(3)] + [v for v in extra.values()]
    rec = np.empty(len(pts), dtype=[(nm, c.dtype.newbyteorder(">") if c.dtype.byteorder != ">" else c.dtype)
                                    for nm, c in zip(names, cols)])
    for nm, c in zip(names, cols):
        rec[nm] = c
    kinds = {"f4": "float", "i2": "short", "u1": "uchar", "f8": "double", "i4": "int"}
    head = "ply\nformat binary_big_endian 1.0\nelement vertex %d\n" % len(pts)
    head += "".join(f"property {kinds[rec.dtype[nm].str[1:]]} {nm}\n" for nm in names) + "end_header\n"
    path.write_bytes(head.encode() + rec.tobytes())


@pytest.mark.parametrize("fmt", ["ascii", "binary_big_endian"])
def test_ascii_and_big_endian_inputs(tmp_path, fmt):
    n = 1800
    pts = torch.rand(n, 3, generator=_gen(9))
    src = tmp_path / "scan.ply"
    if fmt == "ascii":
        write_ply(src, pts, normals=torch.rand(n, 3, generator=_gen(10)),
                  properties={"s": torch.arange(n, dtype=torch.int16)}, binary=False)
    else:
        _write_big_endian(src, pts, {"s": np.arange(n, dtype=">i2"), "d": np.linspace(0, 1, n).astype(">f8")})
    assert fmt.encode() in src.read_bytes()[:40]
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", 20, 30)
    (tmp_path / "str").mkdir()
    got = group_streamed(src, tmp_path / "str" / "a.ply", tmp_path / "str" / "a.pt", 20, 30,
                         block_points=40, chunk_points=256)
    _same_outputs(ref_ply, ref_pt, got.ply, got.pt)


def _gap_budget(src):
    """A --memory (GB) between the streamed path's need and the in-memory estimate: forces streaming."""
    n = read_ply(src).points.shape[0]
    low, high = streamed_bytes(n) + (1 << 20), in_memory_bytes(src)
    assert low < high
    return (low + high) / 2 / 1e9


def _scan(path, n=40_000, seed=11):
    g = _gen(seed)
    write_ply(path, torch.rand(n, 3, generator=g), colors=torch.randint(0, 256, (n, 3), generator=g, dtype=torch.uint8),
              normals=torch.rand(n, 3, generator=g))


def test_cli_streams_above_its_budget_with_the_same_outputs(tmp_path, monkeypatch):
    import pcgeom.streaming.group as SG

    src = tmp_path / "scan.ply"
    _scan(src)
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", 64, 32)
    calls = []
    real = SG.group_streamed
    monkeypatch.setattr("pcgeom.streaming.group.group_streamed", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    out = tmp_path / "str"
    assert main(["group", str(src), "--centers", "64", "--k", "32", "--out", str(out), "--png",
                 "--renderer", "matplotlib", "--memory", f"{_gap_budget(src):.9f}"]) == 0
    assert len(calls) == 1 and calls[0]["memory_bytes"] > 0  # the streamed path ran
    _same_outputs(ref_ply, ref_pt, out / "scan_patches.ply", out / "scan_patches.pt")
    assert (out / "scan_patches.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["scan_patches.ply", "scan_patches.png", "scan_patches.pt"]

    # --resume: a finished streamed run is skipped; a missing output is redone (streamed again)
    (out / "scan_patches.ply").unlink()
    assert main(["group", str(src), "--centers", "64", "--k", "32", "--out", str(out), "--png", "--resume",
                 "--renderer", "matplotlib", "--memory", f"{_gap_budget(src):.9f}"]) == 0
    assert len(calls) == 2
    _same_outputs(ref_ply, ref_pt, out / "scan_patches.ply", out / "scan_patches.pt")
    assert main(["group", str(src), "--centers", "64", "--k", "32", "--out", str(out), "--png", "--resume",
                 "--memory", f"{_gap_budget(src):.9f}"]) == 0
    assert len(calls) == 2


def test_budget_too_small_is_refused_naming_needed_and_given(tmp_path, capsys):
    src = tmp_path / "scan.ply"
    _scan(src, n=3000)
    out = tmp_path / "out"
    assert main(["group", str(src), "--centers", "8", "--k", "8", "--out", str(out), "--memory", "0.0001"]) == 1
    err = capsys.readouterr().err
    assert "memory budget of 0.0001 GB is too small" in err and "3,000 points need about 0.00119 GB" in err
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(ValueError, match="memory budget of 1e-06 GB is too small"):
        group_streamed(src, tmp_path / "a.ply", tmp_path / "a.pt", 8, 8, memory_bytes=1000)


def test_bad_inputs_are_reported_with_nothing_written(tmp_path, capsys):
    _scan(tmp_path / "good.ply", n=3000)
    raw = (tmp_path / "good.ply").read_bytes()
    (tmp_path / "short.ply").write_bytes(raw[:-1000])  # ends early
    text = ("ply\nformat ascii 1.0\nelement vertex 5000\n"
            "property float x\nproperty float y\nproperty float z\nend_header\n")
    (tmp_path / "count.ply").write_text(text + "".join(f"{i} {i % 7} {i % 5}\n" for i in range(3000)))  # 3000 != 5000
    (tmp_path / "few.ply").write_text(text.replace("5000", "3") + "0 0 0\n1 1 1\n2 2 2\n")
    nan = torch.rand(3000, 3, generator=_gen(12))
    nan[17, 1] = float("nan")
    write_ply(tmp_path / "nan.ply", nan)
    out = tmp_path / "out"
    files = [str(tmp_path / f"{s}.ply") for s in ("count", "few", "nan", "short")]
    assert main(["group", *files, "--centers", "8", "--k", "8", "--out", str(out), "--memory", "0.001"]) == 1
    err = capsys.readouterr().err
    assert "4 failed" in err
    assert "short.ply: " in err and "truncated" in err
    assert "count.ply: " in err and "5000" in err
    assert "few.ply: 3 points, fewer than --centers 8 / --k 8" in err
    assert "nan.ply: 1 points have NaN or infinite coordinates" in err
    assert not out.exists() or list(out.rglob("*")) == []
    for f in files[:2] + files[3:]:
        with pytest.raises(ValueError):
            group_streamed(f, tmp_path / "a.ply", tmp_path / "a.pt", 8, 8, block_points=64, chunk_points=1000)
        assert not (tmp_path / "a.ply").exists() and not (tmp_path / "a.pt").exists()


_INTERRUPT = textwrap.dedent("""
    import os, signal, sys
    import torch, pcgeom.streaming.group as SG
    from pcgeom.cli import main
    sig, where = getattr(signal, sys.argv[1]), sys.argv[2]
    write, save, seen = SG.PlyWriter.write, torch.save, []
    def chunk(self, *a, **kw):
        write(self, *a, **kw)
        seen.append(1)
        if where == "ply" and len(seen) == 3:  # mid-file: three chunks of the coloured PLY are on disk
            os.kill(os.getpid(), sig)
    def pt(obj, f, *a, **kw):
        if where == "pt":  # the PLY is finished, the .pt not yet
            os.kill(os.getpid(), sig)
        return save(obj, f, *a, **kw)
    SG.PlyWriter.write, torch.save = chunk, pt
    sys.exit(main(sys.argv[3:]))
""")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["ply", "pt"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_interrupted_run_leaves_no_output_under_its_name(tmp_path, sig, where):
    src = tmp_path / "scan.ply"
    _scan(src)
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", 32, 16)
    out = tmp_path / "out"
    args = ["group", str(src), "--centers", "32", "--k", "16", "--out", str(out), "--memory", f"{_gap_budget(src):.9f}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _INTERRUPT, sig, where, *args], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []
    assert "scan_patches.ply" not in names and "scan_patches.pt" not in names, names
    if sig == "SIGINT":  # cleaned up on the way out
        assert names == [], names
    else:  # only hidden temporaries can be left, never a final name
        assert names and all(".pcgeom-partial" in n for n in names), names
    # a rerun with --resume finishes the file (and removes what the killed run left)
    assert main([*args, "--resume"]) == 0
    _same_outputs(ref_ply, ref_pt, out / "scan_patches.ply", out / "scan_patches.pt")
    assert sorted(p.name for p in out.rglob("*")) == ["scan_patches.ply", "scan_patches.pt"]


_LIMITED = textwrap.dedent("""
    import resource, sys
    from pcgeom.cli import main
    import torch, numpy, tqdm, pcgeom.streaming, pcgeom.vis  # before the limit: their mappings are not the data
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    limit = vm + int(float(sys.argv[1]) * 1e6)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.exit(main(sys.argv[2:]))
""")


def _lidar(path, n, seed):
    """A scan with the columns of a LiDAR export: 65 bytes a row (float xyz and normals, uchar colours,
    ushort intensity, double GPS time and three more doubles, uchar return and class, short angle)."""
    g = _gen(seed)
    props = {"intensity": torch.randint(0, 65535, (n,), generator=g, dtype=torch.int32),
             "gps_time": torch.rand(n, generator=g, dtype=torch.float64),
             "return_number": torch.randint(0, 5, (n,), generator=g, dtype=torch.uint8),
             "classification": torch.randint(0, 20, (n,), generator=g, dtype=torch.uint8),
             "scan_angle": torch.randint(-90, 90, (n,), generator=g, dtype=torch.int16),
             **{f"d{i}": torch.rand(n, generator=g, dtype=torch.float64) for i in range(3)}}
    write_ply(path, torch.rand(n, 3, generator=g), colors=torch.randint(0, 256, (n, 3), generator=g, dtype=torch.uint8),
              normals=torch.rand(n, 3, generator=g), properties=props, types={"intensity": "ushort"})


@pytest.mark.slow
def test_under_an_address_space_limit_only_the_streamed_path_finishes(tmp_path):
    """10^6 points of 65-byte rows (65 MB), 180 MB of address space above the imports (one thread, two
    malloc arenas, so the process's own reservations do not vary).  Measured peaks above the imports:
    in-memory 226 MB of address space (it holds every column, decoded and re-encoded), streamed 136 MB
    (coordinates and O(N) index arrays, 48 bytes a point, plus small chunks).  The in-memory run fails
    for want of memory; the streamed run finishes with the outputs of the in-memory run without a limit."""
    n = 1_000_000
    src = tmp_path / "big.ply"
    _lidar(src, n, seed=13)
    ref_ply, ref_pt = _in_memory(src, tmp_path / "mem", 256, 32)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    common = [sys.executable, "-c", _LIMITED, "180", "group", str(src), "--centers", "256", "--k", "32"]
    mem = subprocess.run(common + ["--out", str(tmp_path / "a"), "--memory", "1000"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert mem.returncode != 0 and "memory" in (mem.stdout + mem.stderr).lower(), mem.stdout + mem.stderr
    assert not (tmp_path / "a" / "big_patches.pt").exists() and not (tmp_path / "a" / "big_patches.ply").exists()
    st = subprocess.run(common + ["--out", str(tmp_path / "b"), "--memory", "0.06"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert st.returncode == 0, st.stdout + st.stderr
    _same_outputs(ref_ply, ref_pt, tmp_path / "b" / "big_patches.ply", tmp_path / "b" / "big_patches.pt")


@pytest.mark.slow
def test_torchrun_ranks_share_the_files_on_the_streamed_path(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        _scan(src / f"s{i}.ply", seed=20 + i)
    budget = f"{_gap_budget(src / 's0.ply'):.9f}"
    opts = ["--centers", "32", "--k", "16"]
    assert main(["group", str(src), "--out", str(tmp_path / "ref"), *opts, "--memory", "1000"]) == 0
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    hook = tmp_path / "hook"  # every rank records that it took the streamed path, and for which file
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import os, pcgeom.streaming.group as S
        real = S.group_streamed
        def group_streamed(src, *a, **kw):
            open(os.path.join({str(tmp_path)!r}, "streamed-" + os.environ["RANK"] + "-" + os.path.basename(src)),
                 "w").close()
            return real(src, *a, **kw)
        S.group_streamed = group_streamed
    """))
    env["PYTHONPATH"] = f"{hook}{os.pathsep}{ROOT}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "pcgeom",
           "group", str(src), "--out", str(out), *opts, "--memory", budget]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "3 of 3 files grouped" in r.stdout and "on 2 ranks" in r.stdout
    assert sorted(p.name for p in tmp_path.glob("streamed-*")) == [
        "streamed-0-s0.ply", "streamed-0-s2.ply", "streamed-1-s1.ply"]
    for i in range(3):
        _same_outputs(tmp_path / "ref" / f"s{i}_patches.ply", tmp_path / "ref" / f"s{i}_patches.pt",
                      out / f"s{i}_patches.ply", out / f"s{i}_patches.pt")


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "lots"])
def test_memory_must_be_a_positive_number_of_gb(tmp_path, capsys, bad):
    with pytest.raises(SystemExit) as exc:
        main(["group", str(tmp_path / "a.ply"), "--centers", "1", "--k", "1", "--out", str(tmp_path), "--memory", bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --memory: expected a number of GB > 0, got" in err and bad in err

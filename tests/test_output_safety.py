"""The output-safety rule (pcgeom.io.output) for every command that writes.

An output that resolves to an input is refused by name, with or without --overwrite; --out must be a
folder; writes are atomic and leave no temporary file; new files follow the umask; one file that cannot
be processed (even for lack of memory) is reported and the run goes on.
"""

from __future__ import annotations

import os
import stat

import pytest
import torch

import pcgeom.data
from pcgeom import cli
from pcgeom.io import read_ply, write_ply
from pcgeom.io.output import InputGuard, is_partial, publish, temporary_path, write_atomic


@pytest.fixture
def scans(tmp_path):
    src = tmp_path / "scans"
    src.mkdir()
    bunny = pcgeom.data.load("bunny", n_points=2000, seed=0)
    write_ply(src / "a.ply", bunny)
    write_ply(src / "b.ply", bunny[:1500])
    return src, bunny


def _leftovers(folder):
    return [p for p in folder.rglob("*") if is_partial(p)]


@pytest.mark.parametrize("overwrite", [False, True])
def test_preprocess_never_replaces_its_single_file_input(scans, capsys, overwrite):
    src, bunny = scans
    argv = ["preprocess", str(src / "a.ply"), "--out", str(src), "--voxel", "0.2"] + (["--overwrite"] if overwrite else [])
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "refusing to write" in err and "it is the input" in err and str(src / "a.ply") in err
    assert torch.equal(read_ply(src / "a.ply").points, bunny)  # 2,000 points, untouched
    assert not _leftovers(src)


def test_preprocess_refuses_an_input_reached_through_a_symlink(scans, tmp_path, capsys):
    src, bunny = scans
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(src / "a.ply", out / "a.ply")  # the output name is a link to the input
    assert cli.main(["preprocess", str(src / "a.ply"), "--out", str(out), "--voxel", "0.2", "--overwrite"]) == 1
    assert "it is the input" in capsys.readouterr().err
    assert torch.equal(read_ply(src / "a.ply").points, bunny)


def test_group_refuses_an_output_that_is_an_input(scans, capsys):
    src, bunny = scans
    # a_patches.ply is both an input and a's output name when --out is the inputs' folder
    write_ply(src / "a_patches.ply", bunny[:1000])
    before = (src / "a_patches.ply").read_bytes()
    rc = cli.main(["group", str(src / "a.ply"), str(src / "a_patches.ply"), "--out", str(src),
                   "--centers", "8", "--k", "16", "--overwrite"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "it is the input" in err and "a_patches.ply" in err
    assert (src / "a_patches.ply").read_bytes() == before


def test_demo_refuses_to_write_over_its_bundled_scan(tmp_path, capsys, monkeypatch):
    scan = tmp_path / "bunny_patches.ply"  # pretend the bundled scan sits where the demo writes
    scan.write_bytes(b"precious")
    monkeypatch.setattr(pcgeom.data, "path", lambda name: scan)
    assert cli.main(["demo", "--out", str(tmp_path), "--overwrite"]) == 1
    assert "it is the input" in capsys.readouterr().err
    assert scan.read_bytes() == b"precious"


@pytest.mark.parametrize("command", [["preprocess", "--voxel", "0.2"], ["group", "--centers", "8", "--k", "16"]])
def test_out_naming_a_file_says_it_must_be_a_folder(scans, tmp_path, capsys, command):
    src, _ = scans
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("mine")
    assert cli.main([command[0], str(src), "--out", str(not_a_folder), *command[1:]]) == 1
    err = capsys.readouterr().err
    assert "must be a folder" in err and "Errno" not in err
    assert not_a_folder.read_text() == "mine"


def test_out_equal_to_the_input_folder_is_named_as_such(scans, capsys):
    src, _ = scans
    assert cli.main(["preprocess", str(src), "--out", str(src), "--voxel", "0.2"]) == 1
    err = capsys.readouterr().err
    assert "holds no .ply files" not in err
    assert "this folder is --out, and its 2 .ply files all lie under --out" in err
    assert "outputs would replace" not in err  # for group they would not; the reason given is true for both


def test_a_folder_inside_out_is_read_and_only_a_real_replacement_is_refused(scans, capsys):
    src, bunny = scans  # scans/a.ply, scans/b.ply
    raw = src / "raw"
    (raw / "raw").mkdir(parents=True)
    write_ply(raw / "c.ply", bunny[:1200])
    # raw/raw/c.ply's output is scans/raw/c.ply: an input, so that one file is refused by name
    write_ply(raw / "raw" / "c.ply", bunny[:1100])
    before = (raw / "c.ply").read_bytes()
    assert cli.main(["preprocess", str(raw), "--out", str(src), "--voxel", "0.01"]) == 1
    cap = capsys.readouterr()
    assert "1 of 2 files written" in cap.out
    assert f"refusing to write {raw / 'c.ply'}: it is the input {raw / 'c.ply'}" in cap.err
    assert "outputs would replace" not in cap.err and "all lie" not in cap.err
    assert len(read_ply(src / "c.ply").points) > 0 and (raw / "c.ply").read_bytes() == before
    assert torch.equal(read_ply(src / "a.ply").points, bunny)  # the scans beside raw/ are not touched


def test_preprocess_scans_raw_into_scans_as_the_files_one_by_one(scans, tmp_path, capsys):
    src, bunny = scans
    raw = src / "raw"
    raw.mkdir()
    write_ply(raw / "c.ply", bunny[:1200])
    write_ply(raw / "d.ply", bunny[:900])
    assert cli.main(["preprocess", str(raw), "--out", str(src), "--voxel", "0.01"]) == 0
    assert "2 of 2 files written" in capsys.readouterr().out
    one = tmp_path / "one"
    assert cli.main(["preprocess", str(raw / "c.ply"), str(raw / "d.ply"), "--out", str(one), "--voxel", "0.01"]) == 0
    for name in ("c.ply", "d.ply"):
        assert (src / name).read_bytes() == (one / name).read_bytes()


def test_preprocess_reports_a_file_too_large_for_memory_and_goes_on(scans, tmp_path, capsys, monkeypatch):
    src, bunny = scans
    import pcgeom.io as pio

    real = pio.read_ply

    def read(path, *a, **k):
        if os.path.basename(path) == "a.ply":
            raise MemoryError("cannot allocate 18.0 GiB")
        return real(path, *a, **k)

    monkeypatch.setattr(pio, "read_ply", read)
    out = tmp_path / "out"
    assert cli.main(["preprocess", str(src), "--out", str(out), "--voxel", "0.01"]) == 1
    cap = capsys.readouterr()
    assert "1 of 2 files written" in cap.out
    assert "a.ply: MemoryError" in cap.err and "18.0 GiB" in cap.err
    assert (out / "b.ply").exists() and not (out / "a.ply").exists()


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_preprocess_and_group_outputs_follow_the_umask(scans, tmp_path, mask):
    src, _ = scans
    old = os.umask(mask)
    try:
        assert cli.main(["preprocess", str(src / "a.ply"), "--out", str(tmp_path / "pre"), "--voxel", "0.01"]) == 0
        assert cli.main(["group", str(src / "a.ply"), "--out", str(tmp_path / "grp"), "--centers", "8", "--k", "16"]) == 0
    finally:
        os.umask(old)
    for f in [tmp_path / "pre" / "a.ply", tmp_path / "grp" / "a_patches.ply", tmp_path / "grp" / "a_patches.pt"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f
    assert not _leftovers(tmp_path)


def test_write_atomic_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")

    def half(tmp):
        with open(tmp, "xb") as f:
            f.write(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half, overwrite=True)
    assert target.read_bytes() == b"old" and not _leftovers(tmp_path)
    with pytest.raises(FileExistsError, match="--overwrite"):
        write_atomic(target, lambda tmp: tmp.write_bytes(b"new"), overwrite=False)
    write_atomic(target, lambda tmp: tmp.write_bytes(b"new"), overwrite=True)
    assert target.read_bytes() == b"new" and not _leftovers(tmp_path)


def test_publish_without_overwrite_never_clobbers_a_file_that_appeared(tmp_path):
    target = tmp_path / "y.ply"
    tmp = temporary_path(target)
    assert is_partial(tmp) and tmp.suffix == ".ply" and tmp.parent == tmp_path
    tmp.write_bytes(b"mine")
    target.write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        publish(tmp, target, overwrite=False)
    assert target.read_bytes() == b"theirs"


def test_input_guard_sees_hard_links_and_relative_spellings(tmp_path, monkeypatch):
    a = tmp_path / "a.ply"
    a.write_bytes(b"x")
    os.link(a, tmp_path / "hard.ply")
    monkeypatch.chdir(tmp_path)
    guard = InputGuard(["a.ply"])
    for spelling in [a, tmp_path / "hard.ply", tmp_path / "." / "a.ply"]:
        with pytest.raises(ValueError, match="it is the input"):
            guard.check("t", spelling)
    guard.check("t", tmp_path / "b.ply")  # not an input: no error


def test_ascii_row_errors_speak_ply_not_numpy(tmp_path):
    head = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
    short = tmp_path / "short.ply"
    short.write_text(head + "1 2 3\n1 2\n1 2 3\n")
    with pytest.raises(ValueError, match=r"vertex row 1: 2 values where the header declares 3 \(x y z\)") as e:
        read_ply(short)
    assert "usecols" not in str(e.value)
    word = tmp_path / "word.ply"
    word.write_text(head + "1 2 3\n1 2 3\n1 oops 3\n")
    with pytest.raises(ValueError, match=r"vertex row 2: y is 'oops', not a number"):
        read_ply(word)


def test_sharded_save_over_the_gallery_it_was_loaded_from(tmp_path):
    # load_sharded memory-maps the shards: saving back onto the same folder must replace the files
    # atomically (new inodes), so the loaded classifier's rows stay intact and the new files are whole.
    from pcgeom.nn import KNNClassifier

    g = torch.Generator().manual_seed(0)
    feats, labels = torch.randn(40, 5, generator=g), torch.randint(0, 3, (40,), generator=g)
    old = os.umask(0o027)
    try:
        path = KNNClassifier(feats, labels, 3).save_sharded(tmp_path / "gallery")
        back = KNNClassifier.load_sharded(path)
        back.add(torch.ones(2, 5), torch.tensor([0, 1]))
        back.save_sharded(path, overwrite=True)
    finally:
        os.umask(old)
    again = KNNClassifier.load_sharded(path)
    assert torch.equal(again.features[:40], feats) and len(again) == 42
    assert torch.equal(back.features[:40], feats)
    for f in path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o640, f
    assert not _leftovers(path)

"""Fuzz round 4 (issue #39): PLY column types through ``pcgeom preprocess`` and ``pcgeom group``, and hostile
option values for every CLI subcommand.

PLY files are written by hand (``tests.test_cli_preprocess.raw_ply``, not pcgeom.io) with every PLY scalar type,
both spellings, for the coordinates, the colours and extra properties, in binary little/big-endian and ASCII;
each column of the outputs must have its input's type and, row for row, its exact value.  Option values
(negative, zero, huge, malformed, empty, non-finite) must end in argparse's clean error (exit 2, no traceback)
or a run that ends normally (exit 0 or 1 with the reason on stderr); ``pcgeom bench`` values that parse are
checked for range instead of run (a run is a benchmark of minutes).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import strategies as st  # noqa: E402

from pcgeom import bench, cli  # noqa: E402
from pcgeom.io import read_ply_types  # noqa: E402
from tests.fuzz.strategies import fuzz  # noqa: E402
from tests.test_cli_preprocess import PLY_TYPES, _check_kept, raw_ply  # noqa: E402

pytestmark = pytest.mark.slow  # whole command runs, files on disk

FORMATS = ["binary_little_endian", "binary_big_endian", "ascii"]


def _values(t: str, n: int, rng) -> np.ndarray:
    """``n`` values of PLY type ``t``: its extremes first, then random ones over its whole range."""
    code = PLY_TYPES[t]
    if code[0] == "f":
        info = np.finfo(code)
        ends = np.array([info.max, -info.max, info.tiny, -0.0, 1.0], dtype=code)
        body = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(code)
    else:
        info = np.iinfo(code)
        ends = np.array([info.min, info.max, 0], dtype=code)
        body = rng.integers(int(info.min), int(info.max) + 1, n, dtype=np.int64).astype(code)
    return np.concatenate([ends, body])[:n]


def _run(argv) -> tuple[object, str]:
    """``pcgeom argv`` in this process: (exit status, stderr); argparse's exit is caught, any other exception fails."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:
            rc = exc.code
    return rc, err.getvalue()


@fuzz(weight=0.5, fmt=st.sampled_from(FORMATS), xyz=st.sampled_from(["float", "double", "float32", "float64", "int",
                                                                      "short", "int32", "int16"]),
      colour=st.sampled_from([None, *PLY_TYPES]), extra=st.lists(st.sampled_from(list(PLY_TYPES)), max_size=6),
      n=st.integers(6, 60), seed=st.integers(0, 2**32 - 1))
def test_fuzz_ply_types_survive_preprocess_and_group(fmt, xyz, colour, extra, n, seed):
    rng = np.random.default_rng(seed)
    # distinct coordinates on a 1e-2 lattice (exact in every coordinate type), so every point is kept
    lattice = rng.permutation(20**3)[:n]
    grid = np.stack([lattice // 400, lattice // 20 % 20, lattice % 20], 1)
    pts = grid if PLY_TYPES[xyz][0] in "iu" else grid * np.float32(0.01).astype(PLY_TYPES[xyz])
    cols = [(c, xyz, pts[:, i].astype(PLY_TYPES[xyz])) for i, c in enumerate("xyz")]
    if colour is not None:
        cols += [(c, colour, _values(colour, n, rng)) for c in ("red", "green", "blue")]
    cols += [(f"p{i}_{t}", t, _values(t, n, rng)) for i, t in enumerate(extra)]
    with tempfile.TemporaryDirectory() as d:
        src = raw_ply(Path(d) / "scan.ply", cols, fmt)
        rc, err = _run(["preprocess", str(src), "--out", f"{d}/pre", "--voxel", "0.001", "--device", "cpu"])
        assert rc == 0, err
        _, rows = _check_kept(cols, Path(d) / "pre" / "scan.ply")
        assert sorted(rows.tolist()) == list(range(n))
        rc, err = _run(["group", str(src), "--out", f"{d}/grp", "--centers", "2", "--k", "3", "--device", "cpu"])
        assert rc == 0, err
        _, rows = _check_kept(cols, Path(d) / "grp" / "scan_patches.ply", skip=("red", "green", "blue"))
        assert sorted(rows.tolist()) == list(range(n))
        assert read_ply_types(Path(d) / "grp" / "scan_patches.ply")["patch"] == "int"


HOSTILE = ["-3", "0", "-0", "1", "3", "99999999999999999999", "1e309", "1e-300", "nan", "inf", "-inf", "", " ",
           "abc", ",", ",,", "1,2", "0,0", "-1,2", "1,2,3", "nan,0,0", "1,2,3,4", "0x0", "16x16", "-5x10",
           "1x1x0x3x1", "0x0x0x0x0", "2x2x4x3x2", "99999x99999", "3.5", "cpu", "cuda:7", "knn-mae", "cube", "--"]
# The options of each subcommand and the valid command line each value is put into.
OPTIONS = {
    "preprocess": ["--voxel", "--remove-statistical", "--remove-radius", "--normals", "--viewpoint", "--device",
                   "--out", "INPUT"],
    "group": ["--centers", "--k", "--device", "--out", "--renderer", "INPUT"],
    "demo": ["--n-points", "--centers", "--k", "--seed", "--size", "--scan", "--device", "--renderer", "--out"],
    "compat": ["--site-dir", "ACTION"],
    "doctor": ["EXTRA"],
    "bench": ["--workloads", "--datasets", "--repeats", "--threads", "--slow", "--grid-budget", "--grid-cells"],
}


def _argv(command: str, option: str, value: str, d: str) -> list[str]:
    src = f"{d}/in.ply"
    base = {
        "preprocess": ["preprocess", src, "--out", f"{d}/out", "--voxel", "0.01", "--normals", "4",
                       "--viewpoint", "0,0,2", "--device", "cpu"],
        "group": ["group", src, "--out", f"{d}/out", "--centers", "4", "--k", "8", "--device", "cpu"],
        "demo": ["demo", "--out", f"{d}/demo", "--n-points", "512", "--centers", "4", "--k", "8", "--size", "16x16",
                 "--renderer", "matplotlib", "--device", "cpu"],
        "compat": ["compat", "status", "--site-dir", f"{d}/site"],
        "doctor": ["doctor"],
        "bench": ["bench", "--quick"],
    }[command]
    if option == "INPUT":
        return [base[0], value, *base[2:]]
    if option == "ACTION":
        return ["compat", value, *base[2:]]
    if option == "EXTRA":
        return [*base, value]
    if option in base:
        i = base.index(option)
        return [*base[:i + 1], value, *base[i + 2:]]
    return [*base, option, value]


@pytest.mark.parametrize("command", sorted(OPTIONS))
@fuzz(weight=1.0, data=st.data())
def test_fuzz_option_values_end_in_a_clean_error_or_a_normal_run(command, data):
    option = data.draw(st.sampled_from(OPTIONS[command]), label="option")
    value = data.draw(st.sampled_from(HOSTILE) | st.text(st.characters(codec="ascii"), max_size=12), label="value")
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # relative names (--out 3, --site-dir abc) land in the temporary folder
        try:
            pts = np.random.default_rng(0).random((64, 3)).astype("f4")
            raw_ply(Path(d) / "in.ply", [(c, "float", pts[:, i]) for i, c in enumerate("xyz")])
            argv = _argv(command, option, value, d)
            if command == "bench":  # parse only: an accepted value would start a benchmark of minutes
                try:
                    args = bench.parser().parse_args(argv[1:])
                except SystemExit as exc:
                    rc, err = exc.code, ""
                else:
                    rc, err = 0, ""
                    assert args.workloads and args.datasets and (args.repeats or 1) >= 1
                    assert 1 <= (args.threads or 1) <= bench.MAX_THREADS and (args.slow or 0) >= 0
                    assert args.grid_budget > 0 and (args.grid_cells is None or args.grid_cells)
            else:
                rc, err = _run(argv)
        finally:
            os.chdir(here)
    assert "Traceback" not in err, (argv, err)
    if rc == 2:
        assert command == "bench" or "error" in err or err.startswith("pcgeom"), (argv, err)
    elif rc not in (0, None):
        assert rc == 1 or isinstance(rc, str), (argv, rc, err)
        assert rc != 1 or err.strip(), (argv, "exit 1 without a reason")

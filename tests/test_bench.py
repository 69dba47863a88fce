"""pcgeom.bench: the shared timers and memory probe, the answer checks, the vendored-code helper, the factories."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import conftest
from pcgeom import bench
from pcgeom.bench import peers, timing, workloads


def test_interleaved_warms_up_then_calls_every_method_once_per_round_in_order():
    calls = []
    times = timing.interleaved([("a", lambda: calls.append("a")), ("b", lambda: calls.append("b"))], 3)
    assert calls == ["a", "b"] * 4  # one warm-up round, then 3 timed rounds
    assert list(times) == ["a", "b"] and all(len(v) == 3 and min(v) >= 0 for v in times.values())
    calls.clear()
    timing.interleaved({"a": lambda: calls.append("a")}, 2, warmup=False)
    assert calls == ["a", "a"]


def test_time_pair_and_timed_call_and_call_timer_measure_the_calls():
    ta, tb, rounds = timing.time_pair(lambda: None, lambda: sum(range(20_000)), budget_s=0.0)
    assert rounds == 3 and 0 <= ta < tb
    out, t = timing.timed_call(lambda: 7)
    assert out == 7 and t >= 0
    ct = timing.CallTimer()
    f = ct.wrap(lambda x: x + 1)
    assert f(1) == 2 and f(2) == 3 and ct.t > 0
    assert timing.median_ms(lambda: None, 3) >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs is Linux only")
def test_peak_memory_sees_a_large_temporary_allocation():
    with timing.PeakMemory("cpu") as small:
        pass
    with timing.PeakMemory("cpu") as big:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del x
    assert big.extra_bytes >= 48 * 2**20 > small.extra_bytes
    assert timing.status_kib("VmRSS") > 0 and timing.status_kib("NoSuchField") is None


def test_fps_check_verdicts_and_the_quick_prefix():
    inp = workloads.make_inputs("fps-mae", "cube", small=True)
    good = bench.methods_for(inp)["pcgeom"]()
    assert bench.check(inp, "pcgeom", good) == "exact (= reference)"
    assert bench.check(inp, "pcgeom", good, fps_prefix=4) == "exact (first 4 = reference)"
    bad = good.clone()
    bad[0, 3] = bad[0, 2]
    assert bench.check(inp, "pcgeom", bad) == "differs from step 3"


def test_use_vendored_puts_the_folder_first_once(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(FileNotFoundError, match="checkout"):
        bench.use_vendored("no-such-folder")
    if not os.path.isdir(os.path.join(peers.UPSTREAM, "pointnet2_pytorch")):
        pytest.skip("pcgeom is an installed wheel here: the vendored upstream code is in a checkout only")
    path = bench.use_vendored("pointnet2_pytorch", standins=True)
    assert sys.path[0] == path and path.endswith("pointnet2_pytorch") and sys.path[-1].endswith("_standins")
    bench.use_vendored("pointnet2_pytorch")
    assert sys.path.count(path) == 1


def test_tests_and_benchmarks_share_one_set_of_factories():
    for name in ("random_cloud", "lattice_cloud", "surface_cloud", "clustered_cloud"):
        assert getattr(conftest, name) is getattr(workloads, name) is getattr(bench, name)
    x = workloads.random_cloud(2, 5, seed=3)
    assert x.shape == (2, 5, 3) and x.dtype == torch.float32
    assert torch.equal(x, workloads.random_cloud(2, 5, seed=3))


def _bench_exit(argv, capsys):
    """``pcgeom bench argv``'s exit status and stderr; the refusals end in argparse's exit 2."""
    try:
        rc = bench.main(argv)
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("selection", [["--workloads", ","], ["--workloads", ""], ["--datasets", " , "]])
def test_an_empty_selection_is_refused_and_the_results_file_kept(tmp_path, monkeypatch, capsys, selection):
    # A checkout's layout, so the default --output is its benchmarks/RESULTS.md.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "pcgeom"\n')
    (tmp_path / "benchmarks").mkdir()
    results = tmp_path / "benchmarks" / "RESULTS.md"
    results.write_text("# the committed results\n")
    monkeypatch.chdir(tmp_path)
    rc, err = _bench_exit([*selection, "--quick", "--no-scaling", "--no-memory"], capsys)
    assert rc == 2 and "expected at least one" in err and "Traceback" not in err
    assert results.read_text() == "# the committed results\n"


@pytest.mark.parametrize("argv, says", [
    (["--threads", "-3"], "--threads: expected an integer from 1 to 1024, got -3"),
    (["--threads", "0"], "--threads: expected an integer from 1 to 1024, got 0"),
    (["--repeats", "-1"], "--repeats: expected a positive integer, got -1"),
    (["--repeats", "x"], "--repeats: expected a positive integer, got 'x'"),
    (["--grid-budget", "-1"], "--grid-budget: expected a finite number of seconds > 0, got -1"),
    (["--grid-budget", "inf"], "--grid-budget: expected a finite number of seconds > 0, got inf"),
    (["--slow", "-0.5"], "--slow: expected a finite number of seconds >= 0, got -0.5"),
    (["--grid", "--grid-cells", "abc"], "expected cells BxMxNxDxk of five positive integers"),
    (["--grid", "--grid-cells", "1x1x0x3x1"], "cell '1x1x0x3x1': B, M, N, D and k must all be >= 1"),
    (["--grid", "--grid-cells", "0x0x0x0x0"], "cell '0x0x0x0x0': B, M, N, D and k must all be >= 1"),
    (["--grid", "--grid-cells", "1x1x8x3x9"], "k=9 exceeds N=8"),
    (["--grid", "--grid-cells", "1x2x3"], "five positive integers"),
    (["--grid", "--grid-cells", ","], "expected at least one cell"),
    (["--grid", "--grid-cells", "99999999x1x99999999x512x1"], "more than half of this machine's"),
    (["--workloads", "knn-mae,nope"], "unknown workload 'nope'"),
])
def test_bad_option_values_are_argparse_errors(argv, says, capsys):
    rc, err = _bench_exit(argv, capsys)
    assert rc == 2 and says in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("pcgeom bench: error: argument")


def test_the_parsed_selections_and_cells():
    args = bench.parser().parse_args(["--workloads", " knn-mae,,fps-mae,knn-mae ", "--grid-cells", "2x3x4x5x4,"])
    assert args.workloads == ["knn-mae", "fps-mae"] and args.datasets == list(workloads.DATASETS)
    assert args.grid_cells == [(2, 3, 4, 5, 4)]
    assert bench.parser().parse_args([]).grid_cells is None  # the whole grid


def test_nothing_measured_never_replaces_the_results_file(tmp_path, monkeypatch, capsys):
    results = tmp_path / "RESULTS.md"
    results.write_text("kept\n")
    monkeypatch.setattr(bench, "run_grid", lambda cells, budget: [])  # a grid run that measured nothing
    rc = bench.main(["--grid", "--grid-cells", "1x1x4x3x1", "--output", str(results), "--threads", str(torch.get_num_threads())])
    assert rc == 1 and "nothing was measured" in capsys.readouterr().err
    assert results.read_text() == "kept\n"

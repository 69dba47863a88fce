"""pcgeom.distributed and the sharded KNNClassifier on real gloo process groups (2 and 3 CPU ranks,
loopback only), and ``pcgeom group`` under torchrun with a rank killed mid-run.

Starting a process group costs seconds on a busy machine, so each group runs many checks: the
worker functions below run in every rank (spawned with torch.multiprocessing, ``spawn`` start
method) and assert there; a failing assertion in any rank fails the test with that rank's
traceback.  Every wait is bounded, so a hang fails instead of blocking CI.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import pcgeom
from pcgeom import _collectives as collectives
from pcgeom import distributed as PD
from pcgeom.nn import KNNClassifier

ROOT = Path(__file__).resolve().parents[1]
GROUP_TIMEOUT_S = 240  # a whole process group's checks; generous for a shared 2-core machine


def _entry(rank: int, world: int, store: str, name: str, args: tuple) -> None:
    import faulthandler

    faulthandler.enable()  # a native crash in a rank shows where it happened
    if Path("/sys/class/net/lo").exists():
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    torch.set_num_threads(1)
    import torch.distributed as dist

    # A file rendezvous: no fixed port that another job on the machine could take first.
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        globals()[name](rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Every check passed.  Skip the interpreter's teardown: on this machine it intermittently
    # aborted in native code ("terminate called without an active exception", no Python frame)
    # after everything had finished, which would fail a test whose checks all passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_group(world: int, name: str, *args) -> None:
    """Runs worker ``name(rank, world, *args)`` on ``world`` gloo ranks; re-raises a rank's failure."""
    import torch.multiprocessing as mp

    import tempfile

    store = os.path.join(tempfile.mkdtemp(prefix="pcgeom-pg-"), "store")
    ctx = mp.start_processes(_entry, args=(world, store, name, args), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + GROUP_TIMEOUT_S
    try:
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"process group of {world} ranks running {name} did not finish in {GROUP_TIMEOUT_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


# --------------------------------------------------------------------- helpers used inside the ranks
def _split(t: torch.Tensor, sizes: list[int], rank: int) -> torch.Tensor:
    start = sum(sizes[:rank])
    return t[start:start + sizes[rank]]


def _raises(fn, exc_type, match: str):
    with pytest.raises(exc_type, match=match):
        fn()


def _gallery(n: int, d: int, seed: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    gal = torch.rand(n, d, generator=g, dtype=torch.float64)
    q = torch.rand(9, d, generator=g, dtype=torch.float64)
    q[:3] = gal[[0, n // 2, n - 1]]  # exact hits: distance-0 ties with their duplicates below
    return gal.to(dtype), q.to(dtype)


def _with_cross_shard_duplicates(gal: torch.Tensor) -> torch.Tensor:
    """Duplicated rows spread over the whole gallery, so equal distances straddle every shard boundary."""
    n = gal.shape[0]
    gal = gal.clone()
    for src, dst in ((0, n - 1), (0, n // 2), (1, n - 2), (n // 2, 2), (n // 3, n - 3)):
        gal[dst] = gal[src]
    return gal


def _size_cases(n: int, world: int) -> list[list[int]]:
    if world == 2:
        return [[n - 7, 7], [0, n], [n, 0], [n // 2, n - n // 2]]
    return [[4, 0, n - 4], [0, 0, n], [n // 3, n // 3, n - 2 * (n // 3)], [n - 2, 1, 1]]


def _check_equal(q, gal, shard, k, **kw):
    d, i = PD.knn(q, shard, k, **kw)
    d0, i0 = pcgeom.knn(q[None], gal[None], k)
    assert d.dtype == d0.dtype and i.dtype == torch.int64
    assert torch.equal(i, i0[0]), (k, kw, i, i0[0])
    # Bitwise (NaN-aware): same distance bits in every slot.
    assert torch.equal(d.view(-1).isnan(), d0[0].view(-1).isnan())
    assert torch.equal(torch.nan_to_num(d, nan=-1.0), torch.nan_to_num(d0[0], nan=-1.0)), (k, kw)


def _normalize(x: torch.Tensor) -> torch.Tensor:
    # The classifier's cosine normalisation (tested against the classifier itself below).
    return KNNClassifier(x, torch.zeros(len(x), dtype=torch.int64), 1, num_classes=1, metric="cosine").features


def _knn_checks(rank: int, world: int) -> None:
    n = 37
    paths = ((3, 0), (8, 1), (130, 2))  # D for the tree / scan / blocked kernel paths, seed
    for dtype, cases in ((torch.float32, paths), (torch.float16, paths), (torch.bfloat16, paths[1:2]),
                         (torch.float64, paths[2:])):
        for d, seed in cases:
            gal, q = _gallery(n, d, seed, dtype)
            gal = _with_cross_shard_duplicates(gal)
            for sizes in _size_cases(n, world):
                shard = _split(gal, sizes, rank)
                for k in (1, 4, 8, n, n + 6):  # k > some shards, k = and > the whole gallery
                    _check_equal(q, gal, shard, k)

    # Lattice points: many exact distance ties, resolved by global index across shards.
    axes = torch.arange(4, dtype=torch.float32)
    lattice = torch.stack(torch.meshgrid(axes, axes, axes, indexing="ij"), -1).reshape(-1, 3)
    lattice = lattice[torch.randperm(64, generator=torch.Generator().manual_seed(3))]
    lq = torch.tensor([[1.5, 1.5, 1.5], [0.0, 0.0, 0.0], [2.0, 1.0, 3.0]])
    for sizes in _size_cases(64, world):
        for k in (5, 12, 64, 70):
            _check_equal(lq, lattice, _split(lattice, sizes, rank), k)

    # +inf and NaN distances: real +inf neighbours come before the padding of a short shard,
    # NaN after +inf; float16 distances that overflow to inf keep their float32 order.
    gal, q = _gallery(n, 8, 4)
    gal[3] = float("inf")
    gal[30] = float("nan")
    q[5, 0] = float("nan")
    for sizes in _size_cases(n, world):
        for k in (2, 9, n, n + 4):
            _check_equal(q, gal, _split(gal, sizes, rank), k)
    big, bq = _gallery(n, 8, 5)
    big, bq = (big * 200).half(), (bq * 200).half()
    for sizes in _size_cases(n, world):
        _check_equal(bq, big, _split(big, sizes, rank), n + 2)

    # The shard is searched in slices; tiny slices must not change a bit.
    gal, q = _gallery(200, 16, 6)
    saved = PD.SEARCH_CHUNK_BYTES
    PD.SEARCH_CHUNK_BYTES = 16 * 4 * 5  # 5 rows per slice
    try:
        for sizes in _size_cases(200, world):
            for k in (1, 7, 60):
                _check_equal(q, gal, _split(gal, sizes, rank), k)
    finally:
        PD.SEARCH_CHUNK_BYTES = saved

    # Cosine: the classifier's normalisation, then the L2 search.
    for dtype in (torch.float32, torch.float16):
        gal, q = _gallery(n, 12, 7, dtype)
        gal = _with_cross_shard_duplicates(gal)
        gal[5] = 0  # a zero row stays zero
        gn, qn = _normalize(gal), _normalize(q)
        for sizes in _size_cases(n, world):
            shard = _split(gal, sizes, rank)
            for k in (3, n + 1):
                d, i = PD.knn(q, shard, k, metric="cosine")
                d0, i0 = pcgeom.knn(qn[None], gn[None], k)
                assert torch.equal(i, i0[0]) and torch.equal(d, d0[0])
    # ... whose ranking is cosine similarity's (float64 brute force; no ties in random data).
    gal, q = _gallery(n, 12, 8)
    q[:3] *= 3.0  # scaled copies of gallery rows: still their nearest by cosine
    cos = torch.nn.functional.normalize(q.double(), dim=1) @ torch.nn.functional.normalize(gal.double(), dim=1).T
    _, i = PD.knn(q, _split(gal, _size_cases(n, world)[0], rank), 5, metric="cosine")
    assert torch.equal(i, cos.topk(5, dim=1).indices)

    # No queries.
    _, i = PD.knn(torch.empty(0, 8), _split(gal[:, :8], _size_cases(n, world)[0], rank), 3)
    assert i.shape == (0, 3)


def _error_checks(rank: int, world: int) -> None:
    gal, q = _gallery(30, 8, 9)
    shard = _split(gal, _size_cases(30, world)[0], rank)
    last = world - 1
    other = rf"rank {last} of {world} rejected"

    # Ranks that disagree: the same error on every rank.
    _raises(lambda: PD.knn(q[:, :4] if rank == last else q, shard[:, :4] if rank == last else shard, 3),
            ValueError, r"same number of features D.*rank 0: 8.*rank %d: 4" % last)
    _raises(lambda: PD.knn(q.double() if rank == last else q, shard.double() if rank == last else shard, 3),
            TypeError, r"same dtype.*torch.float32.*torch.float64")
    _raises(lambda: PD.knn(q, shard, 3 if rank == 0 else 4), ValueError, r"same k, got rank 0: 3, rank 1: 4")
    _raises(lambda: PD.knn(q[:5] if rank == last else q, shard, 3), ValueError, r"same number of queries M")
    _raises(lambda: PD.knn(q + (1 if rank == last else 0), shard, 3), ValueError,
            r"same queries.*all_gather them first")
    _raises(lambda: PD.knn(q, shard, 3, metric="cosine" if rank == last else "l2"), ValueError, "same metric")

    # One rank's bad argument: that rank gets the precise error, the others name it.
    def local_error(bad_shard, exc, match):
        if rank == last:
            _raises(lambda: PD.knn(q, bad_shard, 3), exc, match)
        else:
            _raises(lambda: PD.knn(q, shard, 3), RuntimeError, other)

    local_error(shard.to("meta"), ValueError, r"shard must be on the device of query \(cpu\), got meta")
    local_error(shard[:, :5], ValueError, r"shard must have shape \(N_r, 8\) with the D of query, got")
    local_error(shard.half(), TypeError, "query and shard must have the same dtype")
    local_error(shard[None], ValueError, r"shard must have shape \(N_r, D\)")
    local_error(shard.long(), TypeError, "shard must be float16, bfloat16, float32 or float64")
    if rank == last:
        _raises(lambda: PD.knn(q, shard, 0), ValueError, "k must be >= 1, got 0")
        _raises(lambda: PD.knn(q, shard, 3, metric="dot"), ValueError, "metric must be one of")
    else:
        _raises(lambda: PD.knn(q, shard, 3), RuntimeError, other)
        _raises(lambda: PD.knn(q, shard, 3), RuntimeError, other)

    # The group is still usable after all of that.
    _check_equal(q, gal, shard, 4)


def _classifier_checks(rank: int, world: int, save_to: str | None, load_from: str | None) -> None:
    import torch.distributed as dist

    group = dist.group.WORLD
    n, d, C = 60, 16, 4
    gal, _ = _gallery(n, d, 10)
    gal = _with_cross_shard_duplicates(gal)
    labels = torch.randint(0, C, (n,), generator=torch.Generator().manual_seed(11))
    _, q = _gallery(25, d, 12)
    q[:4] = gal[[0, 1, n // 2, n - 1]]

    def same(a: KNNClassifier, b: KNNClassifier, query, ks=(1, 5, 17)):
        for k in ks:
            da, ia = a.kneighbors(query, k)
            db, ib = b.kneighbors(query, k)
            assert torch.equal(ia, ib) and torch.equal(da, db), (k, ia, ib)
        assert torch.equal(a.predict_proba(query), b.predict_proba(query))
        assert torch.equal(a(query), b(query))
        pa, ca = a.predict(query, return_confidence=True)
        pb, cb = b.predict(query, return_confidence=True)
        assert torch.equal(pa, pb) and torch.equal(ca, cb)
        da, ia = a.kneighbors(query, 7)
        assert torch.equal(a.vote(da, ia, weights="distance"), b.vote(da, ia, weights="distance"))

    for metric in ("l2", "cosine"):
        for weights in ("uniform", "distance", "softmax"):
            opts = dict(weights=weights, metric=metric, temperature=0.3)
            single = KNNClassifier(gal, labels, 5, **opts)
            sharded = KNNClassifier.from_full_gallery(gal, labels, 5, process_group=group, **opts)
            assert len(sharded) == n and sum(sharded.shard_sizes) == n and sharded.num_classes == C
            assert sharded.shard_sizes[rank] == len(sharded.features)
            same(sharded, single, q)
    # Uneven hand-made shards, one of them empty; float16 (float32 distances recomputed by the holder).
    for dtype in (torch.float32, torch.float16):
        for sizes in _size_cases(n, world):
            single = KNNClassifier(gal.to(dtype), labels, 5, weights="softmax")
            sharded = KNNClassifier(_split(gal, sizes, rank).to(dtype), _split(labels, sizes, rank), 5,
                                    weights="softmax", process_group=group)
            assert sharded.shard_sizes == tuple(sizes) and sharded.shard_offset == sum(sizes[:rank])
            same(sharded, single, q.to(dtype))

    # add(): the rank holding the fewest rows takes the items (ties to the lowest rank); the global
    # gallery is then the rank-ordered concatenation of the shards, whatever the order of the adds.
    sizes = _size_cases(n, world)[0]
    sharded = KNNClassifier(_split(gal, sizes, rank), _split(labels, sizes, rank), 5, process_group=group)
    extra, _ = _gallery(12, d, 13)
    extra_labels = torch.arange(12) % C
    expect = list(sizes)
    for s in range(0, 12, 4):
        target = min(range(world), key=lambda r: (expect[r], r))
        sharded.add(extra[s:s + 4], extra_labels[s:s + 4])
        expect[target] += 4
        assert sharded.shard_sizes == tuple(expect) and len(sharded.features) == expect[rank]
    feats = [None] * world
    dist.all_gather_object(feats, (sharded.features, sharded.labels))
    single = KNNClassifier(torch.cat([f for f, _ in feats]), torch.cat([lab for _, lab in feats]), 5)
    same(sharded, single, torch.cat([q, extra[:3]]))
    if rank == world - 1:
        _raises(lambda: sharded.add(extra[:1] + 1, extra_labels[:1]), ValueError, "same new items")
    else:
        _raises(lambda: sharded.add(extra[:1], extra_labels[:1]), ValueError, "same new items")
    _raises(lambda: sharded.kneighbors(q, n + 13), ValueError,
            rf"k={n + 13} is larger than the gallery \({n + 12} items across {world} ranks\)")
    if rank == 0:
        _raises(lambda: sharded.predict(q[:, :3]), ValueError, "query must have shape")
    else:
        _raises(lambda: sharded.predict(q), RuntimeError, f"rank 0 of {world} rejected")
    _raises(lambda: KNNClassifier(gal[:, : 8 + rank], labels, 3, process_group=group), ValueError,
            "same number of features D")
    _raises(lambda: KNNClassifier(gal, labels, 3, num_classes=C + rank, process_group=group), ValueError,
            "same num_classes")
    if rank == 0:
        _raises(lambda: KNNClassifier(gal, labels - 1, 3, process_group=group), ValueError, "must be class indices >= 0")
        _raises(lambda: KNNClassifier(torch.nn.Parameter(gal), labels, 3, process_group=group), TypeError, "plain tensor")
    else:
        for _ in range(2):
            _raises(lambda: KNNClassifier(gal, labels, 3, process_group=group), RuntimeError, "rank 0 of")

    # state_dict per rank round trip (same world size); sizes are re-learned collectively.
    fresh = KNNClassifier(gal[:0], labels[:0], 5, num_classes=C, process_group=group)
    fresh.load_state_dict(sharded.state_dict())
    assert fresh.shard_sizes == sharded.shard_sizes
    same(fresh, single, q)

    if save_to is not None:
        path = Path(save_to)
        sharded.k = 4
        sharded.weights = "distance"
        sharded.save_sharded(path)
        assert sorted(p.name for p in path.iterdir()) == ["manifest.json"] + [
            f"shard-{r:05d}-of-{world:05d}.pt" for r in range(world)]
        _raises(lambda: sharded.save_sharded(path), FileExistsError, "pass overwrite=True")
        sharded.save_sharded(path, overwrite=True)
        # The single-process reference for the loaders.
        torch.save({"features": single.features, "labels": single.labels, "query": q}, path.parent / "single.pt")
    if load_from is not None:
        ref = torch.load(Path(load_from).parent / "single.pt", weights_only=True)
        loaded = KNNClassifier.load_sharded(load_from, process_group=group)
        assert loaded.k == 4 and loaded.weights == "distance" and loaded.num_classes == C
        assert len(loaded) == len(ref["labels"]) and loaded.shard_sizes == tuple(
            b - a for a, b in (collectives.bounds(len(ref["labels"]), r, world) for r in range(world)))
        single = KNNClassifier(ref["features"], ref["labels"], 4, weights="distance")
        same(loaded, single, ref["query"])


def _world_checks(rank: int, world: int, save_to: str | None = None, load_from: str | None = None) -> None:
    _knn_checks(rank, world)
    _error_checks(rank, world)
    _classifier_checks(rank, world, save_to, load_from)


# --------------------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def saved_on_three_ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("sharded") / "gallery"
    _run_group(3, "_world_checks", str(path), None)
    return path


@pytest.mark.slow
def test_three_ranks_search_classifier_and_save(saved_on_three_ranks):
    manifest = json.loads((saved_on_three_ranks / "manifest.json").read_text())
    assert [s["file"] for s in manifest["shards"]] == [f"shard-{r:05d}-of-00003.pt" for r in range(3)]
    assert manifest["rows"] == sum(s["rows"] for s in manifest["shards"]) == 72
    assert not [p for p in saved_on_three_ranks.iterdir() if p.name.startswith(".")]  # no temp file left


@pytest.mark.slow
def test_two_ranks_search_classifier_and_load_a_three_rank_save(saved_on_three_ranks):
    _run_group(2, "_world_checks", None, str(saved_on_three_ranks))


@pytest.mark.slow
def test_load_sharded_in_one_process(saved_on_three_ranks, tmp_path):
    ref = torch.load(saved_on_three_ranks.parent / "single.pt", weights_only=True)
    loaded = KNNClassifier.load_sharded(saved_on_three_ranks)
    assert loaded.process_group is None and loaded.shard_sizes == (72,)
    assert torch.equal(loaded.features, ref["features"]) and torch.equal(loaded.labels, ref["labels"])
    single = KNNClassifier(ref["features"], ref["labels"], 4, weights="distance")
    assert torch.equal(loaded.predict_proba(ref["query"]), single.predict_proba(ref["query"]))
    # ... and a single-process save is a one-shard gallery that loads the same way.
    out = single.save_sharded(tmp_path / "one")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "shard-00000-of-00001.pt"]
    again = KNNClassifier.load_sharded(out)
    assert torch.equal(again.features, single.features) and again.k == 4
    (out / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="incomplete save"):
        KNNClassifier.load_sharded(out)


def test_errors_without_a_process_group():
    q = torch.rand(4, 3)
    with pytest.raises(RuntimeError, match="process group is not initialised.*init_process_group"):
        PD.knn(q, q, 2)
    with pytest.raises(RuntimeError, match="not initialised"):
        KNNClassifier(q, torch.zeros(4, dtype=torch.int64), 2, process_group=object())
    with pytest.raises(RuntimeError, match="not initialised"):
        PD.shard_bounds(10)


def test_shard_bounds_split_evenly_in_order():
    for n in (0, 1, 7, 10, 11):
        for world in (1, 2, 3, 4):
            bounds = [collectives.bounds(n, r, world) for r in range(world)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [b - a for a, b in bounds]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
            assert sizes == [len(t) for t in torch.arange(n).tensor_split(world)]


def test_checksum_is_order_and_bit_sensitive():
    x = torch.rand(100, 8)
    assert collectives.checksum(x) == collectives.checksum(x.clone())
    assert collectives.checksum(x) != collectives.checksum(x.flip(0))
    y = x.clone()
    y[50, 3] = torch.nextafter(y[50, 3], torch.tensor(2.0))
    assert collectives.checksum(x) != collectives.checksum(y)
    assert collectives.checksum(x.double()) != collectives.checksum(x.double() * -1)


# ------------------------------------------------------------------------- pcgeom group under torchrun
def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _rank_pid(launcher: int, rank: int) -> int | None:
    for pid in _children(launcher):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    return None


def _outputs(out: Path, *, finished_only: bool = False) -> dict[str, object]:
    """Every file under ``out``, ``.pt`` files loaded.

    ``finished_only`` skips the hidden ``.pcgeom-partial`` folders *before*
    reading them: a rank killed mid-write leaves a truncated file there, and
    loading it would raise EOFError (it is never an output name).
    """
    res = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if finished_only and ".pcgeom-partial" in rel:
            continue
        if p.is_file():
            res[rel] = torch.load(p, weights_only=True) if p.suffix == ".pt" else p.read_bytes()
    return res


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank's process through /proc")
def test_group_under_torchrun_killed_rank_then_rerun(tmp_path):
    from pcgeom.cli import main
    import pcgeom.data
    from pcgeom.io import write_ply

    src = tmp_path / "in"
    src.mkdir()
    bunny = pcgeom.data.load("bunny")
    names = [f"f{i:02d}" for i in range(20)]
    for i, name in enumerate(names):
        write_ply(src / f"{name}.ply", bunny[torch.randperm(len(bunny), generator=torch.Generator().manual_seed(i))])
    # Sorted position 3: processed by rank 1 of 2; rank 0 must still report it.
    (src / "f03_bad.ply").write_bytes(b"not a ply file")
    opts = ["--centers", "32", "--k", "64"]

    # The uninterrupted reference: one process.
    ref_out = tmp_path / "ref"
    assert main(["group", str(src), "--out", str(ref_out), *opts]) == 1
    ref = _outputs(ref_out)
    assert len(ref) == 2 * len(names)

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "pcgeom", "group", str(src), "--out", str(out), *opts]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    # Rank 1 processes sorted positions 1, 3, 5, ...: f01, f03_bad, f04, f06, ...  A test hook pauses it after
    # its first file, so the kill lands mid-run by construction (watching for f01's output raced rank 1).
    from tests._pause_hook import pause_env, wait_for

    pause, paused = pause_env(tmp_path, ROOT, after=1, rank=1)
    run = subprocess.Popen(cmd, env={**pause, **{k: v for k, v in env.items() if k != "PYTHONPATH"}},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        wait_for(paused, run)
        assert (out / "f01_patches.pt").exists()
        pid = _rank_pid(run.pid, 1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # mid-run: rank 1 has 9 more files to go
        run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode != 0
    # A SIGKILLed rank cannot remove the hidden temp folder of the file it was writing: that folder is never an
    # output name, and the rerun below must clear it.
    partial = _outputs(out, finished_only=True)
    assert set(partial) < set(ref)  # unfinished, and nothing half-written under an output name
    for name, value in partial.items():  # every output present is complete and final
        if name.endswith(".pt"):
            assert all(torch.equal(value[key], ref[name][key]) for key in ref[name])
        else:
            assert value == ref[name], name
    # What a kill during a write leaves: a private folder (made by hand: the kill above lands between
    # files), which the rerun must clean up.
    stale = out / ".f05_patches.pcgeom-partial"
    stale.mkdir(exist_ok=True)
    (stale / "f05_patches.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\n")

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert rerun.returncode != 0  # the bad file, reported by rank 0 although rank 1 processed it
    assert "f03_bad.ply: not a PLY file" in rerun.stderr
    assert "already done, on 2 ranks" in rerun.stdout and "pcgeom group: 1 failed:" in rerun.stderr
    assert rerun.stdout.count("pcgeom group:") == 1  # one combined report
    again = _outputs(out)
    assert set(again) == set(ref)
    for name, value in ref.items():
        if name.endswith(".pt"):
            assert all(torch.equal(value[key], again[name][key]) for key in value)
        else:
            assert again[name] == value, name
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporary file or folder left

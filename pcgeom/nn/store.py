"""Storing the classifier's gallery: the ``state_dict`` extra state and the sharded folder.

Two formats, one set of checks: a ``state_dict`` (the gallery as buffers plus a
versioned extra state, :func:`extra_state` / :func:`read_extra_state`) and a
folder of per-rank shard files plus a manifest (:func:`save_sharded` /
:func:`load_sharded`) that reloads on any number of ranks.  A gallery being
loaded either way passes the constructor's checks (:func:`check_loaded_gallery`)
before anything is copied, and shard files are read tensors-only: no pickled
code is ever run.
"""

from __future__ import annotations

import json
import numbers
import re
from pathlib import Path

import torch

from pcgeom import _collectives as C
from pcgeom import _validation as V
from pcgeom.io.output import write_atomic
from pcgeom.nn.checks import as_labels, check_features, check_label_range

#: The extra-state version this pcgeom writes.
STATE_VERSION = 1
_STATE_VERSIONS_READ = (1,)  # extra-state versions this pcgeom can load
_MANIFEST = "manifest.json"
_SHARDED_FORMAT = "pcgeom.nn.KNNClassifier/sharded"
_SHARDED_VERSION = 1
_SHARD_FILE = re.compile(r"shard-\d{5}-of-\d{5}\.pt")


# ------------------------------------------------------------------ state_dict
def extra_state(num_classes: int, metric: str, group: C.Group | None, shard_sizes) -> dict:
    """The ``state_dict`` extra state: version, ``num_classes``, ``metric`` (and, sharded, where this shard sits)."""
    state = {"version": STATE_VERSION, "num_classes": num_classes, "metric": metric}
    if group is not None:
        # Informational: which part of the gallery this rank's state_dict holds.
        state["shard"] = {"rank": group.rank, "world_size": group.world, "shard_sizes": list(shard_sizes)}
    return state


def read_extra_state(state, metric: str) -> int:
    """The ``num_classes`` of a saved extra state, after checking it fits a classifier using ``metric``."""
    if not isinstance(state, dict) or "num_classes" not in state or "metric" not in state:
        raise ValueError(f"KNNClassifier.load_state_dict: unrecognised extra state {state!r}")
    check_state_version("KNNClassifier.load_state_dict", state)
    if state["metric"] != metric:
        raise ValueError(
            f"KNNClassifier.load_state_dict: the state_dict was saved with metric={state['metric']!r}, "
            f"this classifier uses metric={metric!r}"
        )
    nc = state["num_classes"]
    if isinstance(nc, bool) or not isinstance(nc, numbers.Integral) or nc < 1:
        raise ValueError(f"KNNClassifier.load_state_dict: bad num_classes {nc!r} in the state_dict")
    return int(nc)


def check_state_version(fn: str, extra) -> None:
    """A state_dict's extra state must carry a version this pcgeom reads.

    A newer pcgeom may change what the state means; loading it silently would
    give a classifier that looks right and is not.  (A state without the key
    is left to the other checks: every version written so far has one.)
    """
    if isinstance(extra, dict) and "version" in extra:
        v = extra["version"]
        if isinstance(v, bool) or not isinstance(v, int) or v not in _STATE_VERSIONS_READ:
            reads = " or ".join(str(r) for r in _STATE_VERSIONS_READ)
            raise ValueError(f"{fn}: the state_dict's extra state has version {v!r}; this pcgeom reads version "
                             f"{reads} (saved by a newer pcgeom, or damaged)")


def check_loaded_gallery(fn: str, features, labels, extra, num_classes: int) -> None:
    """What the constructor checks, for a gallery that is being loaded (state_dict or shards).

    Raises the constructor's errors (named ``fn``) before anything is copied:
    ``TypeError`` for non-floating features or non-integer labels (float labels
    would otherwise be truncated silently), ``ValueError`` for a wrong shape or
    labels outside ``[0, num_classes)`` (else a bare scatter error in
    :meth:`KNNClassifier.predict`).  ``num_classes`` is the saved one when the
    extra state holds a valid value.
    """
    if isinstance(extra, dict):
        nc = extra.get("num_classes")
        if isinstance(nc, numbers.Integral) and not isinstance(nc, bool) and nc >= 1:
            num_classes = int(nc)
    if features is not None:
        if not isinstance(features, torch.Tensor):
            raise TypeError(f"{fn}: features must be a torch.Tensor of shape (N, D), got {type(features).__name__}")
        check_features(fn, "features", features)
    if labels is not None:
        if not isinstance(labels, torch.Tensor):
            raise TypeError(f"{fn}: labels must be an integer tensor of class indices, got {type(labels).__name__}")
        n = features.shape[0] if isinstance(features, torch.Tensor) else labels.shape[0] if labels.dim() else -1
        lab = as_labels(fn, "labels", labels, n, labels.device)
        check_label_range(fn, "labels", lab, num_classes)


# ------------------------------------------------------------- sharded folder
def _load_shard(fn: str, f: Path) -> dict:
    """``torch.load`` of one shard with ``weights_only=True``: tensors only, no pickled code is ever run.

    A truncated, damaged or foreign file (a pickle that would run code is
    refused by the weights-only unpickler) raises ``ValueError`` naming it.
    """
    try:
        data = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{fn}: shard {f} is missing (incomplete copy of the folder?)") from None
    except Exception as exc:  # UnpicklingError (code refused), RuntimeError (truncated zip), ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{fn}: cannot load shard {f}: not a complete tensors-only file written by "
                         f"save_sharded (truncated, damaged, or holding objects other than tensors; nothing "
                         f"in it was run): {type(exc).__name__}: {first}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{fn}: shard {f} holds a {type(data).__name__}, not the dict save_sharded writes")
    return data


def save_sharded(path, overwrite, grp: C.Group, features: torch.Tensor, labels: torch.Tensor, *,
                 metric: str, num_classes: int, k: int, weights: str, temperature: float) -> Path:
    """Writes this rank's rows as one shard of the folder ``path``; rank 0 writes the manifest.

    **Collective** over ``grp`` (:func:`pcgeom._collectives.single` for one
    process).  The layout, the write order and the arguments are those of
    :meth:`pcgeom.nn.KNNClassifier.save_sharded`; the settings go into the manifest.
    """
    fn = "KNNClassifier.save_sharded"
    op = "KNNClassifier.save_sharded"
    path = Path(path)

    def check():
        if not isinstance(overwrite, bool):
            raise TypeError(f"{fn}: overwrite must be a bool, got {overwrite!r}")
        if path.exists() and not path.is_dir():
            raise FileExistsError(f"{fn}: {path} exists and is not a folder")
        if (path / _MANIFEST).exists() and not overwrite:
            raise FileExistsError(f"{fn}: {path} already holds a saved gallery ({_MANIFEST}); "
                                  "pass overwrite=True to replace it")
        return None, []

    def start():
        if grp.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            (path / _MANIFEST).unlink(missing_ok=True)
        return None, []

    name = f"shard-{grp.rank:05d}-of-{grp.world:05d}.pt"

    def write():
        # The folder's old shards are this gallery's own earlier outputs (overwrite=True was checked).
        write_atomic(path / name, lambda tmp: torch.save(
            {"features": features.detach().cpu(), "labels": labels.cpu()}, tmp), overwrite=True)
        return None, [features.shape[0]]

    C.agree(fn, grp, op, check)
    C.agree(fn, grp, op, start)  # also a barrier: the folder exists, the old manifest is gone
    _, facts = C.agree(fn, grp, op, write)
    rows = [int(n) for n in facts[:, 0].tolist()]

    def finish():
        if grp.rank == 0:
            manifest = {
                "format": _SHARDED_FORMAT, "version": _SHARDED_VERSION, "rows": sum(rows),
                "dim": int(features.shape[1]), "dtype": str(features.dtype).removeprefix("torch."),
                "metric": metric, "num_classes": num_classes, "k": k,
                "weights": weights, "temperature": temperature,
                "shards": [{"file": f"shard-{r:05d}-of-{grp.world:05d}.pt", "rows": n} for r, n in enumerate(rows)],
            }
            write_atomic(path / _MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n"),
                         overwrite=True)
            keep = {s["file"] for s in manifest["shards"]}
            for f in path.iterdir():
                if _SHARD_FILE.fullmatch(f.name) and f.name not in keep:
                    f.unlink()
        return None, []

    C.agree(fn, grp, op, finish)  # when it returns on any rank, the save is complete
    return path


def load_sharded(path, grp: C.Group, device) -> tuple[dict, torch.Tensor, torch.Tensor, list[int]]:
    """Reads this rank's rows of a folder written by :func:`save_sharded`.

    **Collective** over ``grp``.  The saved gallery is split evenly again
    (:func:`pcgeom._collectives.bounds`); this rank reads only the shard files
    that overlap its rows, memory-mapped, and checks them as the constructor
    would.  Errors are those listed by :meth:`pcgeom.nn.KNNClassifier.load_sharded`.

    Returns:
        ``(manifest, features (n_r, D), labels (n_r,) int64, sizes)`` with
        ``sizes`` every rank's row count; the tensors on ``device``.
    """
    fn = "KNNClassifier.load_sharded"
    path = Path(path)

    def read():
        mpath = path / _MANIFEST
        if not mpath.is_file():
            raise FileNotFoundError(f"{fn}: {mpath} not found: not a folder written by save_sharded, or an "
                                    "incomplete save (the manifest is written last)")
        try:
            m = json.loads(mpath.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{fn}: {mpath} is not valid JSON (truncated or damaged save?): {exc}") from None
        if not isinstance(m, dict) or m.get("format") != _SHARDED_FORMAT:
            raise ValueError(f"{fn}: {mpath} is not a KNNClassifier manifest (format {m.get('format')!r})"
                             if isinstance(m, dict) else f"{fn}: {mpath} is not a KNNClassifier manifest")
        if m.get("version") != _SHARDED_VERSION:
            raise ValueError(f"{fn}: {mpath} has format version {m.get('version')!r}; this pcgeom reads "
                             f"version {_SHARDED_VERSION}")
        for key in ("dtype", "dim", "rows", "shards", "k", "num_classes", "weights", "temperature", "metric"):
            if key not in m:
                raise ValueError(f"{fn}: {mpath} lacks the key {key!r} (truncated or damaged save?)")
        dtype = getattr(torch, str(m["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{fn}: {mpath}: unknown dtype {m['dtype']!r}")
        D, rows = int(m["dim"]), int(m["rows"])
        lo, hi = C.bounds(rows, grp.rank, grp.world)
        feats, labs, start = [], [], 0
        for s in m["shards"]:
            n = int(s["rows"])
            a, b = max(lo, start), min(hi, start + n)
            if a < b:
                f = path / s["file"]
                data = _load_shard(fn, f)
                ft, lt = data.get("features"), data.get("labels")
                if (not isinstance(ft, torch.Tensor) or ft.shape != (n, D) or ft.dtype != dtype
                        or not isinstance(lt, torch.Tensor) or lt.shape != (n,)):
                    raise ValueError(f"{fn}: {f} does not hold the {n} x {D} {m['dtype']} rows and {n} labels "
                                     f"that {mpath} lists")
                nc = V.check_int(fn, "num_classes (manifest)", m["num_classes"], minimum=1)
                # The shard's errors name its file: the constructor's messages, after it.
                check_loaded_gallery(f"{fn}: shard {f}", ft, lt, None, nc)
                feats.append(ft[a - start:b - start].to(device, copy=True))
                labs.append(lt[a - start:b - start].to(device=device, dtype=torch.int64, copy=True))
            start += n
        if start != rows:
            raise ValueError(f"{fn}: {mpath}: its shards hold {start} rows, not the {rows} it lists")
        features = torch.cat(feats) if feats else torch.empty((0, D), dtype=dtype, device=device)
        labels = torch.cat(labs) if labs else torch.empty((0,), dtype=torch.int64, device=device)
        return (m, features, labels), []

    (m, features, labels), _ = C.agree(fn, grp, "KNNClassifier.load_sharded", read)
    rows = int(m["rows"])
    sizes = [b - a for a, b in (C.bounds(rows, r, grp.world) for r in range(grp.world))]
    return m, features, labels, sizes

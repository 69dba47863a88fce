"""``pcgeom.nn.KNNClassifier``: a k-nearest-neighbour classifier / retrieval index
over feature vectors that lives inside a PyTorch pipeline.

The neighbour search is :func:`pcgeom.knn` (exact, memory-bounded, ties to the
lower index); everything after it -- the vote, the weights, the confidence -- is
plain torch on ``(B, k)`` tensors, so the module runs on any device, under
``torch.compile`` and with autograd.
"""

from __future__ import annotations

import json
import numbers
import re
from pathlib import Path

import torch
from torch import nn

from pcgeom import _validation as V
from pcgeom import distributed as _dist
from pcgeom.io.output import write_atomic
from pcgeom.ops.knn import KNNResult, knn

_WEIGHTS = ("uniform", "distance", "softmax")
_METRICS = ("l2", "cosine")
_STATE_VERSION = 1
_STATE_VERSIONS_READ = (1,)  # extra-state versions this pcgeom can load
_MANIFEST = "manifest.json"
_SHARDED_FORMAT = "pcgeom.nn.KNNClassifier/sharded"
_SHARDED_VERSION = 1
_SHARD_FILE = re.compile(r"shard-\d{5}-of-\d{5}\.pt")


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




def _check_choice(fn: str, name: str, value, choices) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name} must be one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{fn}: {name} must be one of {choices}, got {value!r}")
    return value


def _check_features(fn: str, name: str, t) -> None:
    V.check_tensor(fn, name, t, 2, "(N, D)")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if t.shape[1] < 1:
        raise ValueError(f"{fn}: {name} must have at least one feature (D >= 1), got shape {V.shape_str(t)}")


def _as_labels(fn: str, name: str, labels, n: int, device) -> torch.Tensor:
    """Integer class indices ``(n,)`` as int64 on ``device`` (range checked by the caller)."""
    if not isinstance(labels, torch.Tensor):
        try:
            labels = torch.as_tensor(labels)
        except Exception as exc:
            raise TypeError(
                f"{fn}: {name} must be an integer tensor of class indices with shape ({n},), "
                f"got {type(labels).__name__}"
            ) from exc
    if labels.dtype not in V.INT_DTYPES:
        raise TypeError(
            f"{fn}: {name} must hold integer class indices (int8/16/32/64 or uint8), got dtype {labels.dtype}"
        )
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(
            f"{fn}: {name} must have shape ({n},), one label per feature row, got {V.shape_str(labels)}"
        )
    return labels.to(device=device, dtype=torch.int64)


def _check_label_range(fn: str, name: str, labels: torch.Tensor, num_classes: int) -> None:
    if labels.numel() == 0:
        return
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        bad = int(labels.argmin()) if lo < 0 else int(labels.argmax())
        raise ValueError(
            f"{fn}: {name} must be class indices in [0, num_classes={num_classes}), "
            f"got {name}[{bad}]={int(labels[bad])}"
        )


def _check_state_version(fn: str, extra) -> None:
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


def _check_loaded_gallery(fn: str, features, labels, extra, num_classes: int) -> None:
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
        _check_features(fn, "features", features)
    if labels is not None:
        if not isinstance(labels, torch.Tensor):
            raise TypeError(f"{fn}: labels must be an integer tensor of class indices, got {type(labels).__name__}")
        n = features.shape[0] if isinstance(features, torch.Tensor) else labels.shape[0] if labels.dim() else -1
        lab = _as_labels(fn, "labels", labels, n, labels.device)
        _check_label_range(fn, "labels", lab, num_classes)


class KNNClassifier(nn.Module):
    r"""Exact k-nearest-neighbour classifier over a gallery of feature vectors.

    The gallery (``features``, ``labels``) is held as module state, so it moves
    with ``.to()``, is saved in ``state_dict`` and can grow with :meth:`add`.
    Calling the module returns the (weighted) class vote of the ``k`` nearest
    gallery items of each query; the vote is differentiable, so the classifier
    can sit at the end of a network trained end to end (soft-KNN / NCA-style).

    **Neighbour search.**  :func:`pcgeom.knn` on the whole gallery: exact,
    memory-bounded (never a ``B x N`` distance matrix, so galleries of
    ``10**6 x 128`` are fine), squared Euclidean distances accumulated in
    float32 (float64 for float64 features), **ties to the lower gallery index**.
    With ``metric="cosine"`` queries and gallery rows are L2-normalised first
    (rows of zeros stay zero) and the distance is ``|a - b|^2 = 2 - 2 cos(a, b)``,
    so the nearest neighbours are the most cosine-similar ones.

    **Vote.**  With neighbour distances ``d_j`` (squared, ``j = 1..k``) and
    labels ``y_j``, ``scores[b, c] = sum_j w_j [y_j == c]`` where the weights,
    normalised to sum to 1 over the k neighbours, are

    * ``"uniform"``: ``w_j = 1 / k`` (the vote counts divided by k, exact);
    * ``"distance"``: ``w_j ∝ 1 / sqrt(d_j)`` (inverse Euclidean distance, as in
      scikit-learn); if some neighbours are at distance 0, they share the vote
      and the others get weight 0;
    * ``"softmax"``: ``w = softmax(-d / temperature)`` over the k neighbours
      (negative **squared** distances).

    ``scores`` is therefore a probability vector per query.  **Vote ties between
    classes go to the lowest class index** (``argmax`` returns the first
    maximum), which is also scikit-learn's rule; neighbour ties go to the lower
    gallery index (:func:`pcgeom.knn`).  With these rules predictions equal
    scikit-learn's ``KNeighborsClassifier(algorithm="brute")`` whenever no two
    gallery items are at the same distance from a query; at distance ties
    scikit-learn's neighbour order is unspecified.

    **Gradients.**  The neighbour *selection* is piecewise constant; the
    distances to the selected neighbours are differentiable with respect to the
    query and the gallery features, so ``"distance"`` and ``"softmax"``
    scores have gradients.  ``"uniform"`` scores are vote counts, piecewise
    constant: they carry no autograd graph (``requires_grad=False``), so a loss
    built on them fails loudly instead of training nothing.  The gallery is held
    in one of three ways:

    * a plain tensor (the default): registered as a **buffer**, not trained;
    * a tensor that **requires grad** (e.g. the embeddings of a support batch
      just computed by your network): kept as given in the buffer slot, graph
      included, so gradients reach whatever produced it.  Build a fresh
      classifier for each step (construction only validates and stores; there
      is no index to build).  ``state_dict`` stores detached values (and a
      format version: ``load_state_dict`` refuses, by name, a version this
      pcgeom does not read);
    * an ``nn.Parameter`` (learned prototypes): registered as a **parameter**,
      so optimisers see it.  With ``metric="cosine"`` it is normalised at every
      call instead of once.  :meth:`add` is refused (it would replace the
      parameter an optimiser holds).

    Only the ``k`` selected gallery rows enter the graph, so a backward pass
    through a large buffer gallery costs ``O(B k D)``.

    **Memory.**  The gallery is searched in slices of ``search_chunk_bytes``
    (32 MiB by default: 65,536 rows of 128 float32 features) whose results are
    merged exactly; no ``B x N`` matrix is formed, and whatever working copies
    the search kernel makes are bounded by the slice.  Measured on CPU: about
    65 MiB beyond the gallery for a search over ``10**6 x 128`` float32.

    **Precision.**  float16/bfloat16 features are searched with float32
    accumulation; distances, weights and scores are float32 (float64 for float64
    features).  For float16/bfloat16 the distances to the selected neighbours are
    recomputed in float32 (no float16 overflow); for float32/float64 they are
    exactly :func:`pcgeom.knn`'s.

    **Confidence.**  :meth:`confidence` returns
    ``1 - sqrt(d_same / d_other)`` clamped to ``[0, 1]``, where ``d_same`` is the
    squared distance to the nearest of the k neighbours that has the predicted
    label and ``d_other`` to the nearest of the k that has another label.  When
    all k neighbours agree, the nearest other-class item is at least as far as
    the k-th neighbour, so ``d_other`` is taken as the k-th distance and the value
    is a lower bound.  0 means an other-class item is as close as the predicted
    class (or closer); values near 1 mean other classes are much farther away.
    It needs ``k >= 2`` to say anything (with ``k = 1`` it is always 0).  Reject
    the lowest-confidence predictions to trade coverage for accuracy.

    Args:
        features: ``(N, D)`` float16/bfloat16/float32/float64 gallery features
            (``N = 0`` is allowed: grow it with :meth:`add` or load a state_dict).
        labels: ``(N,)`` integer class indices in ``[0, num_classes)`` (a tensor,
            or anything ``torch.as_tensor`` accepts); stored as int64 on the
            device of ``features``.  Map arbitrary labels to indices first, e.g.
            with ``np.unique(y, return_inverse=True)``.
        k: number of neighbours, an int >= 1; must not exceed the gallery size
            when the classifier is called.
        num_classes: number of classes C; default ``labels.max() + 1`` (required
            for an empty gallery).
        weights: ``"uniform"``, ``"distance"`` or ``"softmax"`` (see above).
        temperature: softmax temperature > 0, in units of squared distance.
        metric: ``"l2"`` or ``"cosine"``.
        process_group: a ``torch.distributed`` process group (e.g.
            ``torch.distributed.group.WORLD``) to shard the gallery across; see
            below.  ``None`` (the default): an ordinary single-process classifier.

    **Sharded gallery** (``process_group=...``).  Each rank passes its own shard
    (``features``/``labels`` are this rank's rows; ``N_r = 0`` is fine) and the
    gallery is the rank-ordered concatenation of the shards, rank ``r``'s row
    ``i`` having global index ``N_0 + ... + N_{r-1} + i``.  The search is
    :func:`pcgeom.distributed.knn`, so ``kneighbors``, ``forward``,
    ``predict_proba``, ``predict``, ``confidence`` and ``vote`` return on every
    rank exactly what a single-process classifier over the concatenated gallery
    returns (indices are global).  They are **collective** (every rank calls
    them, with the same queries), carry no autograd graph, and a bad argument on
    one rank raises on every rank.  The construction is collective too: the
    ranks must agree on D, dtype, metric and ``num_classes`` (default: the
    largest label on any rank + 1).  The gallery must be a plain tensor (no
    Parameter, no grad).  :meth:`from_full_gallery` splits one full gallery
    across the group; :meth:`add` appends to the rank holding the fewest rows;
    :meth:`save_sharded` / :meth:`load_sharded` store one file per shard plus a
    manifest and reload it on any number of ranks.  ``len()`` is the whole
    gallery's size; :attr:`shard_sizes` and :attr:`shard_offset` say where the
    rows are.

    ``k``, ``weights`` and ``temperature`` can be changed later by assigning the
    attributes (they are validated again); ``metric`` and ``num_classes`` are
    fixed.

    Example:
        >>> import torch
        >>> from pcgeom.nn import KNNClassifier
        >>> feats = torch.tensor([[0.0, 0], [0.1, 0], [1, 1], [1.1, 1]])
        >>> clf = KNNClassifier(feats, torch.tensor([0, 0, 1, 1]), k=3)
        >>> clf.predict(torch.tensor([[0.05, 0.0], [0.9, 1.0]])).tolist()
        [0, 1]
        >>> clf(torch.tensor([[0.05, 0.0]]))   # vote shares (B, C)
        tensor([[0.6667, 0.3333]])
        >>> clf.add(torch.tensor([[5.0, 5.0]]), torch.tensor([1]))
        >>> len(clf)
        5
    """

    features: torch.Tensor
    labels: torch.Tensor

    #: The gallery is searched in slices of at most this many bytes (counted in
    #: the accumulation dtype), so the memory a search needs beyond the gallery
    #: itself stays a small multiple of this plus ``O(B k)``, whatever N is.
    #: Set it on an instance to trade memory for fewer kernel calls.
    search_chunk_bytes: int = 32 * 2**20

    def __init__(
        self,
        features,
        labels,
        k: int = 5,
        *,
        num_classes: int | None = None,
        weights: str = "uniform",
        temperature: float = 1.0,
        metric: str = "l2",
        process_group=None,
    ) -> None:
        super().__init__()
        self._group = None  # pcgeom.distributed._Group of a sharded gallery
        self._shard_sizes: list[int] | None = None  # every rank's shard size (sharded only)
        if process_group is not None:
            self._init_sharded(features, labels, k, num_classes, weights, temperature, metric, process_group)
            return
        fn = "KNNClassifier"
        self._metric = _check_choice(fn, "metric", metric, _METRICS)
        self.k = k
        self.weights = weights
        self.temperature = temperature
        _check_features(fn, "features", features)
        n = features.shape[0]
        labels = _as_labels(fn, "labels", labels, n, features.device)
        if num_classes is None:
            if n == 0:
                raise ValueError(f"{fn}: num_classes must be given when the gallery is empty (features has shape {V.shape_str(features)})")
            # max(.., 1): negative labels are then reported by the range check.
            num_classes = max(int(labels.max()) + 1, 1)
        self._num_classes = V.check_int(fn, "num_classes", num_classes, minimum=1)
        _check_label_range(fn, "labels", labels, self._num_classes)

        if isinstance(features, nn.Parameter):
            self.register_parameter("features", features)
        else:
            self.register_buffer("features", self._normalized(features))
        self.register_buffer("labels", labels)

    def _init_sharded(self, features, labels, k, num_classes, weights, temperature, metric, process_group) -> None:
        fn = "KNNClassifier"
        g = _dist._resolve(fn, process_group)

        def local():
            self._metric = _check_choice(fn, "metric", metric, _METRICS)
            self.k = k
            self.weights = weights
            self.temperature = temperature
            _check_features(fn, "features", features)
            if isinstance(features, nn.Parameter) or features.requires_grad:
                raise TypeError(
                    f"{fn}: a sharded gallery (process_group=...) must be a plain tensor: it is searched without "
                    "autograd, so a Parameter or a tensor that requires grad would train nothing; pass "
                    "features.detach()"
                )
            n = features.shape[0]
            lab = _as_labels(fn, "labels", labels, n, features.device)
            nc = -1
            if num_classes is not None:
                nc = V.check_int(fn, "num_classes", num_classes, minimum=1)
                _check_label_range(fn, "labels", lab, nc)
            elif n and int(lab.min()) < 0:
                bad = int(lab.argmin())
                raise ValueError(f"{fn}: labels must be class indices >= 0, got labels[{bad}]={int(lab[bad])}")
            facts = [features.shape[1], _dist._dtype_code(features.dtype), _METRICS.index(self._metric), nc,
                     int(lab.max()) if n else -1, n, _dist._device_code(features.device)]
            return lab, facts

        lab, facts = _dist._agree(fn, g, "KNNClassifier", local)
        D, dts, mets, ncs, tops, sizes, devs = (facts[:, j].tolist() for j in range(7))
        _dist._same(fn, "number of features D (features.shape[1])", D)
        _dist._same(fn, "features dtype", [str(_dist._DTYPES[c]) for c in dts], TypeError)
        _dist._same(fn, "metric", [_METRICS[c] for c in mets])
        _dist._same(fn, "num_classes", [None if c < 0 else c for c in ncs])
        _dist._same(fn, "device type", [_dist._device_name(c) for c in devs])
        nc = ncs[0]
        if nc < 0:
            if sum(sizes) == 0:
                raise ValueError(f"{fn}: num_classes must be given when the gallery is empty on every rank")
            nc = max(tops) + 1
        self._num_classes = int(nc)
        self._group = g
        self._shard_sizes = [int(n) for n in sizes]
        self.register_buffer("features", self._normalized(features))
        self.register_buffer("labels", lab)

    @classmethod
    def from_full_gallery(cls, features, labels, k: int = 5, *, process_group=None, **options) -> "KNNClassifier":
        """A sharded classifier from the whole gallery, which every rank passes.

        **Collective.**  Rank ``r`` keeps rows
        ``pcgeom.distributed.shard_bounds(N, group=process_group)`` of it (as
        even a split as possible, in order, so the global indices are the rows
        of the full gallery), copied, so the full tensors can be freed
        afterwards.  For galleries too large for one process, build each rank's
        shard yourself and call ``KNNClassifier(shard, shard_labels, k,
        process_group=group)``, or :meth:`load_sharded` a saved one.

        Args:
            features: ``(N, D)`` the whole gallery, identical on every rank.
            labels: ``(N,)`` its class indices.
            k: number of neighbours.
            process_group: the group to shard across (``None``: no sharding, a
                single-process classifier over the whole gallery).
            **options: ``num_classes``, ``weights``, ``temperature``, ``metric``.

        Example (every rank)::

            clf = KNNClassifier.from_full_gallery(feats, labels, k=5, process_group=dist.group.WORLD)
            pred = clf.predict(queries)   # queries identical on every rank
        """
        if process_group is None:
            return cls(features, labels, k, **options)
        g = _dist._resolve("KNNClassifier.from_full_gallery", process_group)
        if isinstance(features, torch.Tensor) and features.dim() == 2:
            try:
                lab = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
            except Exception:
                lab = None
            # Slice only consistent inputs; anything else goes to the constructor whole, so every rank
            # reports the same error.
            if lab is not None and lab.dim() == 1 and lab.shape[0] == features.shape[0]:
                lo, hi = _dist._bounds(features.shape[0], g.rank, g.world)
                features, labels = features[lo:hi].clone(), lab[lo:hi].clone()
        return cls(features, labels, k, process_group=process_group, **options)

    # ------------------------------------------------------------------ config
    @property
    def k(self) -> int:
        """Number of neighbours that vote (int >= 1)."""
        return self._k

    @k.setter
    def k(self, value) -> None:
        self._k = V.check_int("KNNClassifier", "k", value, minimum=1)

    @property
    def weights(self) -> str:
        """Vote weighting: ``"uniform"``, ``"distance"`` or ``"softmax"``."""
        return self._weights

    @weights.setter
    def weights(self, value) -> None:
        self._weights = _check_choice("KNNClassifier", "weights", value, _WEIGHTS)

    @property
    def temperature(self) -> float:
        """Softmax temperature (> 0, squared-distance units)."""
        return self._temperature

    @temperature.setter
    def temperature(self, value) -> None:
        t = V.check_float("KNNClassifier", "temperature", value)
        if not t > 0 or t == float("inf"):
            raise ValueError(f"KNNClassifier: temperature must be a finite float > 0, got {t}")
        self._temperature = t

    @property
    def metric(self) -> str:
        """``"l2"`` or ``"cosine"`` (fixed at construction)."""
        return self._metric

    @property
    def num_classes(self) -> int:
        """Number of classes C: the width of the score matrix."""
        return self._num_classes

    def __len__(self) -> int:
        """Gallery size: the whole gallery's (all shards) when sharded."""
        if self._group is not None:
            return sum(self._shard_sizes)
        return int(self.features.shape[0])

    @property
    def process_group(self):
        """The process group the gallery is sharded across, or ``None``."""
        return None if self._group is None else self._group.handle

    @property
    def shard_sizes(self) -> tuple[int, ...]:
        """Rows held by each rank, in rank order (``(len(self),)`` when not sharded)."""
        if self._group is None:
            return (len(self),)
        return tuple(self._shard_sizes)

    @property
    def shard_offset(self) -> int:
        """Global index of this rank's first gallery row (0 when not sharded)."""
        if self._group is None:
            return 0
        return sum(self._shard_sizes[: self._group.rank])

    def extra_repr(self) -> str:
        n, d = self.features.shape
        where = f"gallery=({n}, {d})"
        if self._group is not None:
            g = self._group
            where = (f"gallery=({len(self)}, {d}) in {g.world} shards (rank {g.rank}: rows "
                     f"{self.shard_offset}..{self.shard_offset + n})")
        return (
            f"{where}, num_classes={self._num_classes}, k={self._k}, weights={self._weights!r}, "
            f"temperature={self._temperature}, metric={self._metric!r}, dtype={self.features.dtype}"
        )

    # ----------------------------------------------------------------- gallery
    def _normalized(self, x: torch.Tensor) -> torch.Tensor:
        if self._metric != "cosine":
            return x
        # One implementation for the single-process and the sharded search.
        return _dist._normalize_rows(x)

    def _gallery(self) -> torch.Tensor:
        if isinstance(self.features, nn.Parameter):
            return self._normalized(self.features)
        return self.features

    def add(self, features, labels) -> None:
        """Appends items to the gallery.

        Args:
            features: ``(n, D)`` tensor with the gallery's D, dtype and device.
                If it requires grad, the gallery does from then on.
            labels: ``(n,)`` integer class indices in ``[0, num_classes)``.

        New items get the next gallery indices (so on distance ties, older items
        win).  Not available for an ``nn.Parameter`` gallery.

        Sharded gallery: **collective**, every rank passes the same items (checked),
        and the rank holding the fewest rows (ties: the lowest rank) appends them
        all.  Global indices follow rank order, so the new items are numbered
        after that rank's old rows and, unless it is the last rank, the rows of
        the later ranks move up by ``n``; on distance ties the new items then win
        against those later rows.  The answers stay those of a single-process
        classifier over the concatenated shards.
        """
        fn = "KNNClassifier.add"
        if self._group is not None:
            self._add_sharded(fn, features, labels)
            return
        if isinstance(self.features, nn.Parameter):
            raise TypeError(
                f"{fn}: the gallery is an nn.Parameter (learned prototypes); growing it would replace the "
                "tensor an optimiser holds. Build a new KNNClassifier instead"
            )
        labels = self._check_new_items(fn, features, labels)
        self.features = torch.cat([self.features, self._normalized(features)], 0)
        self.labels = torch.cat([self.labels, labels], 0)

    def _check_new_items(self, fn: str, features, labels) -> torch.Tensor:
        """Validates items for :meth:`add` against the gallery; returns the labels as int64."""
        _check_features(fn, "features", features)
        g = self.features
        if features.shape[1] != g.shape[1]:
            raise ValueError(
                f"{fn}: features must have shape (n, {g.shape[1]}) to match the gallery, got {V.shape_str(features)}"
            )
        if features.dtype != g.dtype:
            raise TypeError(f"{fn}: features must have the gallery's dtype {g.dtype}, got {features.dtype}")
        if features.device != g.device:
            raise ValueError(f"{fn}: features must be on the gallery's device {g.device}, got {features.device}")
        labels = _as_labels(fn, "labels", labels, features.shape[0], g.device)
        _check_label_range(fn, "labels", labels, self._num_classes)
        return labels

    def _add_sharded(self, fn: str, features, labels) -> None:
        grp = self._group

        def local():
            lab = self._check_new_items(fn, features, labels)
            g = self.features
            facts = [features.shape[0], _dist._checksum(features), _dist._checksum(lab), g.shape[0]]
            return lab, facts

        lab, facts = _dist._agree(fn, grp, "KNNClassifier.add", local)
        ns, fsums, lsums, sizes = (facts[:, j].tolist() for j in range(4))
        _dist._same(fn, "number of new items", ns)
        if len(set(fsums)) > 1 or len(set(lsums)) > 1:
            raise ValueError(f"{fn}: every rank must pass the same new items (features and labels), but their "
                             "values differ between ranks; all_gather them first if each rank has its own")
        # The rank holding the fewest rows takes them all (ties: the lowest rank).
        target = min(range(grp.world), key=lambda r: (sizes[r], r))
        if grp.rank == target:
            self.features = torch.cat([self.features, self._normalized(features)], 0)
            self.labels = torch.cat([self.labels, lab], 0)
        sizes[target] += ns[0]
        self._shard_sizes = [int(n) for n in sizes]

    # ------------------------------------------------------------------ search
    def _check_query(self, fn: str, query) -> torch.Tensor:
        g = self.features
        V.check_tensor(fn, "query", query, 2, f"(B, {g.shape[1]})")
        if query.shape[1] != g.shape[1]:
            raise ValueError(
                f"{fn}: query must have shape (B, D) with the gallery's D={g.shape[1]}, got {V.shape_str(query)}"
            )
        if query.dtype != g.dtype:
            raise TypeError(
                f"{fn}: query must have the gallery's dtype {g.dtype}, got {query.dtype} "
                "(convert one of them: .to(dtype) on the query or on the classifier)"
            )
        if query.device != g.device:
            raise ValueError(f"{fn}: query must be on the gallery's device {g.device}, got {query.device}")
        return self._normalized(query)

    def _select(self, q: torch.Tensor, g: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """pcgeom.knn over gallery slices of at most ``search_chunk_bytes``, merged.

        A search kernel may keep per-call copies of the points it searches (a
        transposed or float32 copy): slicing bounds them by the chunk, whatever
        the gallery size.  Each slice's results are sorted by (distance, index)
        and the slices are in index order, so a stable sort of the concatenation
        by distance is the (distance, global index) order of one big search:
        the answer is bit-identical.
        """
        n, D = g.shape
        rows = max(k, self.search_chunk_bytes // (D * torch.finfo(V.acc_dtype(g.dtype)).bits // 8))
        if n <= rows:
            d, i = knn(q[None], g[None], k)
            return d[0], i[0]
        ds, ids = [], []
        for s in range(0, n, rows):
            e = min(n, s + rows)
            d, i = knn(q[None], g[None, s:e], min(k, e - s))
            ds.append(d[0])
            ids.append(i[0] + s)
        d, i = torch.cat(ds, 1), torch.cat(ids, 1)
        order = torch.sort(d, dim=1, stable=True).indices[:, :k]  # NaN sorts last, as in pcgeom.knn
        return d.gather(1, order), i.gather(1, order)

    def _search(self, fn: str, query, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._group is not None:
            return self._search_sharded(fn, query, k)
        q = self._check_query(fn, query)
        g = self._gallery()
        n = g.shape[0]
        if k > n:
            raise ValueError(
                f"{fn}: k={k} is larger than the gallery ({n} items); add items with add() or lower k"
            )
        B, D = q.shape
        # Select on detached tensors: pcgeom.knn's backward would build a dense
        # (N, D) gradient for the whole gallery; the few selected rows are
        # gathered below instead.
        d_sel, idx = self._select(q.detach(), g.detach(), k)
        acc = V.acc_dtype(q.dtype)
        half = q.dtype in (torch.float16, torch.bfloat16)
        needs_grad = torch.is_grad_enabled() and (q.requires_grad or g.requires_grad)
        if not (half or needs_grad):
            return d_sel, idx
        nb = g.index_select(0, idx.reshape(-1)).reshape(B, k, D)
        diff = q.to(acc)[:, None, :] - nb.to(acc)
        d_re = (diff * diff).sum(-1)
        if half:
            return d_re, idx
        # Value: pcgeom.knn's distances exactly (d_re - d_re.detach() is 0);
        # gradient: that of the recomputed distances.
        return d_sel + (d_re - d_re.detach()), idx

    def _search_sharded(self, fn: str, query, k) -> tuple[torch.Tensor, torch.Tensor]:
        """The single-process answer from a sharded gallery (collective, no autograd graph).

        ``k`` (None: ``self.k``) is validated with the other arguments inside the
        agreement step, so a bad value on one rank raises on every rank.
        """
        grp = self._group

        def prepare():
            kk = self._k if k is None else V.check_int(fn, "k", k, minimum=1)
            return self._check_query(fn, query), self.features, kk

        d_sel, idx, sizes, q = _dist._sharded_search(
            fn, grp, prepare, op="KNNClassifier search", chunk_bytes=self.search_chunk_bytes,
            k_within_gallery=f" across {grp.world} ranks",
        )
        self._shard_sizes = sizes
        if q.dtype in (torch.float16, torch.bfloat16):
            d_sel = self._owned_distances(q, idx)
        return d_sel, idx

    def _owned(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which global indices this rank holds, and their local rows (0 elsewhere)."""
        off, n = self.shard_offset, self.features.shape[0]
        own = (idx >= off) & (idx < off + n)
        return own, torch.where(own, idx - off, torch.zeros_like(idx))

    def _owned_distances(self, q: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """float32 distances to the selected rows, as the single-process path recomputes them.

        The rank holding a row evaluates the same ``(B, k, D)`` expression as
        :meth:`_search` (other slots hold zero rows and are masked to 0), and one
        all_reduce sums them: adding exact zeros, so each value is the holder's, bit for bit.
        """
        B, k = idx.shape
        g = self.features
        own, loc = self._owned(idx)
        nb = torch.zeros((B, k, g.shape[1]), dtype=g.dtype, device=g.device)
        if g.shape[0]:
            nb = torch.where(own[..., None], g.index_select(0, loc.reshape(-1)).reshape(B, k, -1), nb)
        diff = q.to(torch.float32)[:, None, :] - nb.to(torch.float32)
        d_re = (diff * diff).sum(-1)
        return _dist._all_reduce_sum(self._group, torch.where(own, d_re, torch.zeros_like(d_re)))

    def _labels_at(self, idx: torch.Tensor) -> torch.Tensor:
        """Labels of global gallery indices (a collective all_reduce when sharded)."""
        if self._group is None:
            return self.labels[idx]
        own, loc = self._owned(idx)
        lab = self.labels[loc] if self.labels.numel() else torch.zeros_like(idx)
        return _dist._all_reduce_sum(self._group, torch.where(own, lab, torch.zeros_like(lab)))

    def kneighbors(self, query, k: int | None = None) -> KNNResult:
        """The k nearest gallery items of each query.

        Args:
            query: ``(B, D)`` tensor with the gallery's D, dtype and device.
            k: number of neighbours (default: ``self.k``); at most ``len(self)``.

        Returns:
            ``KNNResult(dist2, idx)``: ``dist2 (B, k)`` squared distances (in the
            metric's space), ascending, float32 (float64 for float64 features),
            differentiable; ``idx (B, k)`` int64 gallery indices, ties to the
            lower index.
        """
        fn = "KNNClassifier.kneighbors"
        if self._group is not None:
            return KNNResult(*self._search_sharded(fn, query, k))
        k = self._k if k is None else V.check_int(fn, "k", k, minimum=1)
        dist2, idx = self._search(fn, query, k)
        return KNNResult(dist2, idx)

    # -------------------------------------------------------------------- vote
    def vote(self, dist2: torch.Tensor, idx: torch.Tensor, *, weights: str | None = None,
             temperature: float | None = None) -> torch.Tensor:
        """Class scores from neighbours already found with :meth:`kneighbors`.

        Lets one search serve several settings: ``vote(d[:, :3], i[:, :3],
        weights="distance")`` is ``forward`` with ``k=3, weights="distance"``.

        Args:
            dist2: ``(B, k)`` squared distances from :meth:`kneighbors`.
            idx: ``(B, k)`` int64 gallery indices from :meth:`kneighbors`.
            weights: overrides the module's ``weights``.
            temperature: overrides the module's ``temperature``.

        Returns:
            ``(B, num_classes)`` scores summing to 1 per row (float32, float64 for
            float64 features).
        """
        fn = "KNNClassifier.vote"
        weights = self._weights if weights is None else _check_choice(fn, "weights", weights, _WEIGHTS)
        if temperature is None:
            temperature = self._temperature
        V.check_tensor(fn, "dist2", dist2, 2, "(B, k)")
        V.check_index_tensor(fn, "idx", idx, 2, "(B, k)")
        if idx.shape != dist2.shape:
            raise ValueError(f"{fn}: dist2 and idx must have the same shape (B, k), got {V.shape_str(dist2)} and {V.shape_str(idx)}")
        B, k = idx.shape
        lab = self._labels_at(idx)
        acc = dist2.dtype if dist2.dtype in (torch.float32, torch.float64) else torch.float32
        d = dist2.to(acc)
        scores = torch.zeros((B, self._num_classes), dtype=acc, device=d.device)
        if weights == "uniform":
            # Integer vote counts, then one division: equal counts give
            # bit-equal scores, so class ties are real ties.
            return scores.scatter_add_(1, lab, torch.ones_like(d)) / k
        if weights == "distance":
            zero = d == 0
            inv = torch.rsqrt(torch.where(zero, torch.ones_like(d), d))
            w = torch.where(zero.any(1, keepdim=True), zero.to(acc), inv)
            w = w / w.sum(1, keepdim=True)
        else:
            w = torch.softmax(-d / temperature, dim=1)
        return scores.scatter_add(1, lab, w)

    def confidence_from_neighbors(self, dist2: torch.Tensor, idx: torch.Tensor,
                                  pred: torch.Tensor) -> torch.Tensor:
        """The confidence of :meth:`confidence` from precomputed neighbours.

        Args:
            dist2: ``(B, k)`` squared distances from :meth:`kneighbors`.
            idx: ``(B, k)`` gallery indices from :meth:`kneighbors`.
            pred: ``(B,)`` predicted labels.

        Returns:
            ``(B,)`` confidences in ``[0, 1]`` (float32, float64 for float64
            features), not differentiable.
        """
        d = dist2.detach()
        if d.dtype not in (torch.float32, torch.float64):
            d = d.float()
        same = self._labels_at(idx) == pred[:, None]
        inf = torch.full_like(d, float("inf"))
        d_same = torch.where(same, d, inf).amin(1)
        # No other-class neighbour among the k: the nearest one is at least as
        # far as the k-th neighbour, which gives a lower bound.
        d_other = torch.minimum(torch.where(same, inf, d).amin(1), d[:, -1])
        ratio = (d_same / d_other.clamp_min(torch.finfo(d.dtype).tiny)).clamp(0, 1)
        conf = 1 - ratio.sqrt()
        return torch.where(d_other > 0, conf, torch.zeros_like(conf))

    # -------------------------------------------------------------- interface
    def forward(self, query: torch.Tensor) -> torch.Tensor:
        """Class scores of the k nearest gallery items.

        Args:
            query: ``(B, D)`` tensor with the gallery's D, dtype and device.

        Returns:
            ``(B, num_classes)`` weighted vote shares (each row sums to 1),
            float32 (float64 for float64 features), differentiable with respect
            to ``query`` and a gallery that requires grad.  For a training loss
            use ``F.nll_loss(torch.log(scores.clamp_min(1e-12)), target)``.
        """
        dist2, idx = self._search("KNNClassifier.forward", query, self._k)
        return self.vote(dist2, idx)

    def predict_proba(self, query: torch.Tensor) -> torch.Tensor:
        """Class probabilities ``(B, num_classes)``: the same tensor as ``forward``."""
        return self(query)

    def predict(self, query: torch.Tensor, *, return_confidence: bool = False):
        """Predicted labels ``(B,)`` int64: the class with the highest score,
        the lowest class index on ties.

        With ``return_confidence=True`` returns ``(labels, confidence)`` from the
        same search (see :meth:`confidence`).
        """
        dist2, idx = self._search("KNNClassifier.predict", query, self._k)
        pred = self.vote(dist2, idx).argmax(1)
        if return_confidence:
            return pred, self.confidence_from_neighbors(dist2, idx, pred)
        return pred

    def confidence(self, query: torch.Tensor) -> torch.Tensor:
        """``(B,)`` confidence in ``[0, 1]`` of :meth:`predict`: ``1 - sqrt(d_same / d_other)``.

        See the class docstring for the definition.
        """
        return self.predict(query, return_confidence=True)[1]

    # -------------------------------------------------------------- state_dict
    def get_extra_state(self):
        state = {"version": _STATE_VERSION, "num_classes": self._num_classes, "metric": self._metric}
        if self._group is not None:
            # Informational: which part of the gallery this rank's state_dict holds.
            state["shard"] = {"rank": self._group.rank, "world_size": self._group.world,
                              "shard_sizes": list(self._shard_sizes)}
        return state

    def set_extra_state(self, state) -> None:
        if not isinstance(state, dict) or "num_classes" not in state or "metric" not in state:
            raise ValueError(f"KNNClassifier.load_state_dict: unrecognised extra state {state!r}")
        _check_state_version("KNNClassifier.load_state_dict", state)
        if state["metric"] != self._metric:
            raise ValueError(
                f"KNNClassifier.load_state_dict: the state_dict was saved with metric={state['metric']!r}, "
                f"this classifier uses metric={self._metric!r}"
            )
        nc = state["num_classes"]
        if isinstance(nc, bool) or not isinstance(nc, numbers.Integral) or nc < 1:
            raise ValueError(f"KNNClassifier.load_state_dict: bad num_classes {nc!r} in the state_dict")
        self._num_classes = int(nc)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # A saved gallery may have any size N: resize our tensors to it before
        # the default loader copies values in.  A different D is left alone so
        # the default loader reports the mismatch.
        fkey, lkey = prefix + "features", prefix + "labels"
        f_in, l_in = state_dict.get(fkey), state_dict.get(lkey)
        # The version first: an unknown one decides nothing else about the state, and nothing is copied.
        _check_state_version("KNNClassifier.load_state_dict", state_dict.get(prefix + "_extra_state"))
        _check_loaded_gallery("KNNClassifier.load_state_dict", f_in, l_in,
                              state_dict.get(prefix + "_extra_state"), self._num_classes)
        if isinstance(f_in, torch.Tensor) and isinstance(l_in, torch.Tensor):
            cur = self.features
            if f_in.dim() == 2 and f_in.shape[1] == cur.shape[1] and l_in.dim() == 1 and l_in.shape[0] == f_in.shape[0]:
                n = f_in.shape[0]
                fresh = torch.empty((n, cur.shape[1]), dtype=cur.dtype, device=cur.device)
                if isinstance(cur, nn.Parameter):
                    self._parameters["features"] = nn.Parameter(fresh, requires_grad=cur.requires_grad)
                else:
                    # Also drops any autograd graph the old buffer carried.
                    self._buffers["features"] = fresh
                self._buffers["labels"] = torch.empty((n,), dtype=torch.int64, device=self.labels.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        if self._group is not None:
            # Each rank loaded its own shard (any size): learn everyone's sizes (collective).
            _, facts = _dist._agree("KNNClassifier.load_state_dict", self._group, "KNNClassifier.load_state_dict",
                                    lambda: (None, [self.features.shape[0]]))
            self._shard_sizes = [int(n) for n in facts[:, 0].tolist()]

    # ---------------------------------------------------------- sharded files
    def save_sharded(self, path, *, overwrite: bool = False) -> Path:
        """Saves the gallery as a folder of per-rank shards plus a manifest.

        **Collective** when the gallery is sharded (every rank writes its own
        shard; ``path`` must be on a file system every rank sees); a plain
        classifier writes one shard.  Layout::

            path/manifest.json              format, version, rows, dim, dtype, metric,
                                            num_classes, k, weights, temperature,
                                            shards: [{"file": ..., "rows": n_r}, ...] in rank order
            path/shard-00000-of-00004.pt    torch.save({"features": (n_0, D), "labels": (n_0,) int64})
            path/shard-00001-of-00004.pt    ...

        The gallery is the concatenation of the shards in manifest order (the
        global index order).  Features are stored as held (already normalised for
        ``metric="cosine"``), on the CPU.  Every file is written to a temporary
        name and renamed; the manifest is removed first and written last, so a
        folder without ``manifest.json`` is an incomplete save.  Shard files of an
        earlier save that the new manifest does not list are deleted.

        Load it on any number of ranks with :meth:`load_sharded`.

        Args:
            path: the folder (created if needed).
            overwrite: replace a gallery saved there before (default: refuse).

        Returns:
            ``path`` as a ``pathlib.Path``.
        """
        fn = "KNNClassifier.save_sharded"
        op = "KNNClassifier.save_sharded"
        grp = self._group or _dist._single()
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
                {"features": self.features.detach().cpu(), "labels": self.labels.cpu()}, tmp), overwrite=True)
            return None, [self.features.shape[0]]

        _dist._agree(fn, grp, op, check)
        _dist._agree(fn, grp, op, start)  # also a barrier: the folder exists, the old manifest is gone
        _, facts = _dist._agree(fn, grp, op, write)
        rows = [int(n) for n in facts[:, 0].tolist()]

        def finish():
            if grp.rank == 0:
                manifest = {
                    "format": _SHARDED_FORMAT, "version": _SHARDED_VERSION, "rows": sum(rows),
                    "dim": int(self.features.shape[1]), "dtype": str(self.features.dtype).removeprefix("torch."),
                    "metric": self._metric, "num_classes": self._num_classes, "k": self._k,
                    "weights": self._weights, "temperature": self._temperature,
                    "shards": [{"file": f"shard-{r:05d}-of-{grp.world:05d}.pt", "rows": n} for r, n in enumerate(rows)],
                }
                write_atomic(path / _MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n"),
                             overwrite=True)
                keep = {s["file"] for s in manifest["shards"]}
                for f in path.iterdir():
                    if _SHARD_FILE.fullmatch(f.name) and f.name not in keep:
                        f.unlink()
            return None, []

        _dist._agree(fn, grp, op, finish)  # when it returns on any rank, the save is complete
        return path

    @classmethod
    def load_sharded(cls, path, *, process_group=None, device="cpu") -> "KNNClassifier":
        """Loads a gallery written by :meth:`save_sharded`, on any number of ranks.

        **Collective** with a ``process_group``: the saved gallery (all shards,
        in manifest order) is split evenly again, rank ``r`` keeping rows
        ``pcgeom.distributed.shard_bounds(rows, group=process_group)``; each rank
        reads only the saved shards that overlap its rows (memory-mapped), so a
        gallery saved on 4 ranks loads on 2 or 8 with the same global order, and
        the same answers.  Without a ``process_group`` the whole gallery is
        loaded into a plain single-process classifier.  ``k``, ``weights``,
        ``temperature``, ``metric`` and ``num_classes`` come from the manifest.

        Args:
            path: the folder given to :meth:`save_sharded`.
            process_group: the group to shard across, or ``None``.
            device: where this rank's shard goes (default ``"cpu"``).

        Returns:
            A :class:`KNNClassifier` holding this rank's rows (all rows without a group).

        Raises:
            FileNotFoundError: no ``manifest.json`` (not a save, or an incomplete one) or a listed shard is missing.
            ValueError: a manifest that is not valid JSON or lacks a key, a shard that is truncated,
                damaged or holds anything but tensors (shards are read with ``torch.load(weights_only=True)``:
                a pickle that would run code is refused, never run), shard contents that disagree with the
                manifest, or labels outside ``[0, num_classes)`` -- the constructor's checks, same messages,
                after ``shard <file>:``.
            TypeError: non-integer labels or non-floating features in a shard (as the constructor).

        Example (every rank of a 2-rank group)::

            clf = KNNClassifier.load_sharded("gallery/", process_group=dist.group.WORLD)
        """
        fn = "KNNClassifier.load_sharded"
        grp = _dist._single() if process_group is None else _dist._resolve(fn, process_group)
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
            lo, hi = _dist._bounds(rows, grp.rank, grp.world)
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
                    _check_loaded_gallery(f"{fn}: shard {f}", ft, lt, None, nc)
                    feats.append(ft[a - start:b - start].to(device, copy=True))
                    labs.append(lt[a - start:b - start].to(device=device, dtype=torch.int64, copy=True))
                start += n
            if start != rows:
                raise ValueError(f"{fn}: {mpath}: its shards hold {start} rows, not the {rows} it lists")
            features = torch.cat(feats) if feats else torch.empty((0, D), dtype=dtype, device=device)
            labels = torch.cat(labs) if labs else torch.empty((0,), dtype=torch.int64, device=device)
            return (m, features, labels), []

        (m, features, labels), _ = _dist._agree(fn, grp, "KNNClassifier.load_sharded", read)
        clf = cls(features[:0], labels[:0], m["k"], num_classes=m["num_classes"], weights=m["weights"],
                  temperature=m["temperature"], metric=m["metric"], process_group=process_group)
        # Assigned, not passed to the constructor: cosine rows were saved normalised already.
        clf.features = features
        clf.labels = labels
        if clf._group is not None:
            rows = int(m["rows"])
            clf._shard_sizes = [b - a for a, b in (_dist._bounds(rows, r, grp.world) for r in range(grp.world))]
        return clf

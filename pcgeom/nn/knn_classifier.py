"""``pcgeom.nn.KNNClassifier``: a k-nearest-neighbour classifier / retrieval index
over feature vectors that lives inside a PyTorch pipeline.

This file is the module itself: the gallery it holds (construction, :meth:`add`,
sharding) and its settings.  The work is done by one module per idea, each a
set of functions on plain tensors: :mod:`pcgeom.nn.search` (the neighbour
search, single-process or sharded), :mod:`pcgeom.nn.vote` (scores and
confidence from the neighbours), :mod:`pcgeom.nn.store` (``state_dict`` and the
sharded folder), with the argument checks they share in :mod:`pcgeom.nn.checks`.

The neighbour search is :func:`pcgeom.knn` (exact, memory-bounded, ties to the
lower index); everything after it -- the vote, the weights, the confidence -- is
plain torch on ``(B, k)`` tensors, so the module runs on any device, under
``torch.compile`` and with autograd.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from pcgeom import _collectives as C
from pcgeom import _validation as V
from pcgeom._chunked_knn import METRICS, normalize_rows
from pcgeom.nn import store
from pcgeom.nn.checks import as_labels, check_choice, check_features, check_label_range
from pcgeom.nn.search import check_query, labels_at, search, search_sharded
from pcgeom.nn.vote import WEIGHTS, check_neighbors, class_scores, neighbor_confidence
from pcgeom.ops.knn import KNNResult


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
        self._group = None  # the pcgeom._collectives.Group of a sharded gallery
        self._shard_sizes: list[int] | None = None  # every rank's shard size (sharded only)
        if process_group is not None:
            self._init_sharded(features, labels, k, num_classes, weights, temperature, metric, process_group)
            return
        fn = "KNNClassifier"
        self._metric = check_choice(fn, "metric", metric, METRICS)
        self.k = k
        self.weights = weights
        self.temperature = temperature
        check_features(fn, "features", features)
        n = features.shape[0]
        labels = as_labels(fn, "labels", labels, n, features.device)
        if num_classes is None:
            if n == 0:
                raise ValueError(f"{fn}: num_classes must be given when the gallery is empty (features has shape {V.shape_str(features)})")
            # max(.., 1): negative labels are then reported by the range check.
            num_classes = max(int(labels.max()) + 1, 1)
        self._num_classes = V.check_int(fn, "num_classes", num_classes, minimum=1)
        check_label_range(fn, "labels", labels, self._num_classes)

        if isinstance(features, nn.Parameter):
            self.register_parameter("features", features)
        else:
            self.register_buffer("features", self._normalized(features))
        self.register_buffer("labels", labels)

    def _init_sharded(self, features, labels, k, num_classes, weights, temperature, metric, process_group) -> None:
        fn = "KNNClassifier"
        g = C.resolve(fn, process_group)

        def local():
            self._metric = check_choice(fn, "metric", metric, METRICS)
            self.k = k
            self.weights = weights
            self.temperature = temperature
            check_features(fn, "features", features)
            if isinstance(features, nn.Parameter) or features.requires_grad:
                raise TypeError(
                    f"{fn}: a sharded gallery (process_group=...) must be a plain tensor: it is searched without "
                    "autograd, so a Parameter or a tensor that requires grad would train nothing; pass "
                    "features.detach()"
                )
            n = features.shape[0]
            lab = as_labels(fn, "labels", labels, n, features.device)
            nc = -1
            if num_classes is not None:
                nc = V.check_int(fn, "num_classes", num_classes, minimum=1)
                check_label_range(fn, "labels", lab, nc)
            elif n and int(lab.min()) < 0:
                bad = int(lab.argmin())
                raise ValueError(f"{fn}: labels must be class indices >= 0, got labels[{bad}]={int(lab[bad])}")
            facts = [features.shape[1], C.dtype_code(features.dtype), METRICS.index(self._metric), nc,
                     int(lab.max()) if n else -1, n, C.device_code(features.device)]
            return lab, facts

        lab, facts = C.agree(fn, g, "KNNClassifier", local)
        D, dts, mets, ncs, tops, sizes, devs = (facts[:, j].tolist() for j in range(7))
        C.same(fn, "number of features D (features.shape[1])", D)
        C.same(fn, "features dtype", [C.dtype_name(c) for c in dts], TypeError)
        C.same(fn, "metric", [METRICS[c] for c in mets])
        C.same(fn, "num_classes", [None if c < 0 else c for c in ncs])
        C.same(fn, "device type", [C.device_name(c) for c in devs])
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
        g = C.resolve("KNNClassifier.from_full_gallery", process_group)
        if isinstance(features, torch.Tensor) and features.dim() == 2:
            try:
                lab = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
            except Exception:
                lab = None
            # Slice only consistent inputs; anything else goes to the constructor whole, so every rank
            # reports the same error.
            if lab is not None and lab.dim() == 1 and lab.shape[0] == features.shape[0]:
                lo, hi = C.bounds(features.shape[0], g.rank, g.world)
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
        self._weights = check_choice("KNNClassifier", "weights", value, WEIGHTS)

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
        return normalize_rows(x)

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
        check_features(fn, "features", features)
        g = self.features
        if features.shape[1] != g.shape[1]:
            raise ValueError(
                f"{fn}: features must have shape (n, {g.shape[1]}) to match the gallery, got {V.shape_str(features)}"
            )
        if features.dtype != g.dtype:
            raise TypeError(f"{fn}: features must have the gallery's dtype {g.dtype}, got {features.dtype}")
        if features.device != g.device:
            raise ValueError(f"{fn}: features must be on the gallery's device {g.device}, got {features.device}")
        labels = as_labels(fn, "labels", labels, features.shape[0], g.device)
        check_label_range(fn, "labels", labels, self._num_classes)
        return labels

    def _add_sharded(self, fn: str, features, labels) -> None:
        grp = self._group

        def local():
            lab = self._check_new_items(fn, features, labels)
            g = self.features
            facts = [features.shape[0], C.checksum(features), C.checksum(lab), g.shape[0]]
            return lab, facts

        lab, facts = C.agree(fn, grp, "KNNClassifier.add", local)
        ns, fsums, lsums, sizes = (facts[:, j].tolist() for j in range(4))
        C.same(fn, "number of new items", ns)
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
        check_query(fn, query, self.features)
        return self._normalized(query)

    def _search(self, fn: str, query, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._group is not None:
            return self._search_sharded(fn, query, k)
        q = self._check_query(fn, query)
        return search(fn, q, self._gallery(), k, self.search_chunk_bytes)

    def _search_sharded(self, fn: str, query, k) -> tuple[torch.Tensor, torch.Tensor]:
        """The single-process answer from a sharded gallery (collective, no autograd graph).

        ``k`` (None: ``self.k``) is validated with the other arguments inside the
        agreement step, so a bad value on one rank raises on every rank.
        """
        def prepare():
            kk = self._k if k is None else V.check_int(fn, "k", k, minimum=1)
            return self._check_query(fn, query), self.features, kk

        d_sel, idx, self._shard_sizes = search_sharded(fn, self._group, prepare, self.features,
                                                       self.search_chunk_bytes)
        return d_sel, idx

    def _labels_at(self, idx: torch.Tensor) -> torch.Tensor:
        """Labels of global gallery indices (a collective all_reduce when sharded)."""
        return labels_at(self._group, idx, self.labels, self.shard_offset)

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
        weights = self._weights if weights is None else check_choice(fn, "weights", weights, WEIGHTS)
        if temperature is None:
            temperature = self._temperature
        check_neighbors(fn, dist2, idx)
        return class_scores(dist2, self._labels_at(idx), self._num_classes, weights, temperature)

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
        return neighbor_confidence(dist2, self._labels_at(idx) == pred[:, None])

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
        return store.extra_state(self._num_classes, self._metric, self._group, self._shard_sizes)

    def set_extra_state(self, state) -> None:
        self._num_classes = store.read_extra_state(state, self._metric)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # A saved gallery may have any size N: resize our tensors to it before
        # the default loader copies values in.  A different D is left alone so
        # the default loader reports the mismatch.
        fkey, lkey = prefix + "features", prefix + "labels"
        f_in, l_in = state_dict.get(fkey), state_dict.get(lkey)
        # The version first: an unknown one decides nothing else about the state, and nothing is copied.
        store.check_state_version("KNNClassifier.load_state_dict", state_dict.get(prefix + "_extra_state"))
        store.check_loaded_gallery("KNNClassifier.load_state_dict", f_in, l_in,
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
            _, facts = C.agree("KNNClassifier.load_state_dict", self._group, "KNNClassifier.load_state_dict",
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
        return store.save_sharded(path, overwrite, self._group or C.single(), self.features, self.labels,
                                  metric=self._metric, num_classes=self._num_classes, k=self._k,
                                  weights=self._weights, temperature=self._temperature)

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
        grp = C.single() if process_group is None else C.resolve(fn, process_group)
        m, features, labels, sizes = store.load_sharded(path, grp, device)
        clf = cls(features[:0], labels[:0], m["k"], num_classes=m["num_classes"], weights=m["weights"],
                  temperature=m["temperature"], metric=m["metric"], process_group=process_group)
        # Assigned, not passed to the constructor: cosine rows were saved normalised already.
        clf.features = features
        clf.labels = labels
        if clf._group is not None:
            clf._shard_sizes = sizes
        return clf

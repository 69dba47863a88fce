"""pcgeom.nn.KNNClassifier against a float64 brute-force oracle (numpy) and
scikit-learn's KNeighborsClassifier; gradients, state_dict, dtypes, errors, compile."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.nn import KNNClassifier
from conftest import lattice_cloud


# ----------------------------------------------------------------- oracles
def oracle_neighbors(query, gallery, k, metric="l2", acc=None):
    """float64 numpy brute force; order (distance, gallery index) lexicographic.

    ``acc=np.float32``: the squared distances summed coordinate by coordinate with every operation rounded to
    float32 -- the search contract for float16/bfloat16 features, so the indices must then match exactly."""
    q = np.asarray(query, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-300)
        g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
    if acc is None:
        d2 = ((q[:, None, :] - g[None, :, :]) ** 2).sum(-1)
    else:
        diff = q.astype(acc)[:, None, :] - g.astype(acc)[None, :, :]
        d2 = np.zeros(diff.shape[:2], dtype=acc)
        for c in range(diff.shape[2]):
            d2 = d2 + diff[..., c] * diff[..., c]
    idx = np.empty((q.shape[0], k), dtype=np.int64)
    for b in range(q.shape[0]):
        idx[b] = np.lexsort((np.arange(g.shape[0]), d2[b]))[:k]
    return np.take_along_axis(d2, idx, 1), idx


def oracle_scores(d2, idx, labels, num_classes, weights, temperature=1.0):
    labels = np.asarray(labels)
    B, k = idx.shape
    scores = np.zeros((B, num_classes))
    for b in range(B):
        d = d2[b]
        if weights == "uniform":
            w = np.full(k, 1.0 / k)
        elif weights == "distance":
            w = (d == 0).astype(float) if (d == 0).any() else 1 / np.sqrt(d)
            w = w / w.sum()
        else:
            z = -d / temperature
            w = np.exp(z - z.max())
            w = w / w.sum()
        for j in range(k):
            scores[b, labels[idx[b, j]]] += w[j]
    return scores


def oracle_predict(scores):
    return scores.argmax(1)  # numpy argmax: first maximum, the lowest class index


def make_data(n_gallery=300, n_query=60, dim=8, n_classes=4, seed=0, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n_gallery, dim, generator=g, dtype=torch.float64)
    labels = torch.randint(0, n_classes, (n_gallery,), generator=g)
    # Shift each class a bit so the classes are learnable but overlapping.
    feats += torch.randn(n_classes, dim, generator=g, dtype=torch.float64)[labels]
    query = torch.randn(n_query, dim, generator=g, dtype=torch.float64) * 1.3
    return feats.to(device, dtype), labels.to(device), query.to(device, dtype)


# ---------------------------------------------------------- brute force
@pytest.mark.parametrize("weights", ["uniform", "distance", "softmax"])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_matches_bruteforce(device, weights, metric):
    feats, labels, query = make_data(device=device)
    for k in (1, 4, 9):
        clf = KNNClassifier(feats, labels, k=k, weights=weights, temperature=2.0, metric=metric)
        od, oi = oracle_neighbors(query.cpu(), feats.cpu(), k, metric)
        d, i = clf.kneighbors(query)
        np.testing.assert_array_equal(i.cpu().numpy(), oi)
        np.testing.assert_allclose(d.cpu().numpy(), od, rtol=1e-12, atol=1e-12)
        osc = oracle_scores(od, oi, labels.cpu(), 4, weights, 2.0)
        scores = clf(query)
        assert scores.shape == (60, 4) and scores.dtype == torch.float64
        np.testing.assert_allclose(scores.cpu().numpy(), osc, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(clf.predict(query).cpu().numpy(), oracle_predict(osc))
        assert torch.equal(clf.predict_proba(query), scores)


def test_kneighbors_is_pcgeom_knn(device):
    feats, labels, query = make_data(dtype=torch.float32, device=device)
    clf = KNNClassifier(feats, labels, k=7)
    d, i = clf.kneighbors(query)
    rd, ri = pcgeom.knn(query[None], feats[None], 7)
    assert torch.equal(i, ri[0]) and torch.equal(d, rd[0])  # bit-identical
    # Also through the gradient path: same values.
    d2, _ = clf.kneighbors(query.clone().requires_grad_(True))
    assert torch.equal(d2.detach(), rd[0])
    assert torch.equal(clf.kneighbors(query, k=3).idx, ri[0, :, :3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunked_search_is_one_search(device, dtype):
    # Lattice gallery with duplicates and a NaN row, searched in slices of 7
    # rows: the merged answer must be bit-identical to one pcgeom.knn call.
    g = lattice_cloud(1, 5, dtype=dtype, device=device)[0]
    g = torch.cat([g, g[:30], torch.full((1, 3), float("nan"), dtype=dtype, device=device), g[30:40]])
    labels = torch.arange(g.shape[0], device=device) % 5
    q = torch.cat([g[:25], g[:20] + 0.5])
    q = q[torch.isfinite(q).all(1)]
    clf = KNNClassifier(g, labels, k=1)
    clf.search_chunk_bytes = 7 * 3 * torch.finfo(dtype).bits // 8
    for k in (1, 6, 27, g.shape[0]):
        d, i = clf.kneighbors(q, k=k)
        rd, ri = pcgeom.knn(q[None], g[None], k)
        assert torch.equal(i, ri[0]), k
        torch.testing.assert_close(d, rd[0], rtol=0, atol=0, equal_nan=True)


def test_ties_lower_gallery_index_and_lowest_class(device):
    # Lattice gallery: many exact distance ties.  Labels chosen so that vote
    # ties between classes are frequent with k = 2 and k = 4.
    g = lattice_cloud(1, 4, D=2, dtype=torch.float64, device=device)[0]  # 16 points
    labels = torch.tensor([3, 1, 2, 0] * 4, device=device)
    q = torch.cat([g, g + 0.5, g[:4] + torch.tensor([0.5, 0.0], device=device, dtype=torch.float64)])
    n_vote_ties = 0
    for k in (1, 2, 4, 6):
        clf = KNNClassifier(g, labels, k=k, num_classes=4)
        od, oi = oracle_neighbors(q.cpu(), g.cpu(), k)
        np.testing.assert_array_equal(clf.kneighbors(q).idx.cpu().numpy(), oi)
        osc = oracle_scores(od, oi, labels.cpu(), 4, "uniform")
        n_vote_ties += int(((osc == osc.max(1, keepdims=True)).sum(1) > 1).sum())
        np.testing.assert_array_equal(clf.predict(q).cpu().numpy(), oracle_predict(osc))
    assert n_vote_ties > 10  # the tie rule was really exercised


# --------------------------------------------------------------- sklearn
@pytest.mark.parametrize("weights", ["uniform", "distance", "softmax"])
@pytest.mark.parametrize("k", [1, 4, 5])
def test_matches_sklearn(weights, k):
    neighbors = pytest.importorskip("sklearn.neighbors")
    # Continuous random data: no two gallery items at the same distance from a
    # query, so sklearn's neighbour order is ours.  Vote ties between classes
    # still happen (k=4, uniform): both sides pick the lowest class index.
    feats, labels, query = make_data(n_gallery=400, n_query=200, n_classes=3, seed=3)
    T = 3.0
    sk_weights = weights
    if weights == "softmax":
        def sk_weights(dist):  # sklearn passes Euclidean distances (n_queries, k)
            z = -(dist**2) / T
            w = np.exp(z - z.max(1, keepdims=True))
            return w / w.sum(1, keepdims=True)
    sk = neighbors.KNeighborsClassifier(n_neighbors=k, weights=sk_weights, algorithm="brute")
    sk.fit(feats.numpy(), labels.numpy())
    clf = KNNClassifier(feats, labels, k=k, weights=weights, temperature=T)
    np.testing.assert_array_equal(clf.predict(query).numpy(), sk.predict(query.numpy()))
    np.testing.assert_allclose(clf.predict_proba(query).numpy(), sk.predict_proba(query.numpy()), atol=1e-12)
    if k == 4 and weights == "uniform":
        p = sk.predict_proba(query.numpy())
        assert ((p == p.max(1, keepdims=True)).sum(1) > 1).sum() > 5  # ties exercised


def test_matches_sklearn_cosine():
    neighbors = pytest.importorskip("sklearn.neighbors")
    feats, labels, query = make_data(n_gallery=300, n_query=100, seed=5)
    sk = neighbors.KNeighborsClassifier(n_neighbors=5, metric="cosine", algorithm="brute")
    sk.fit(feats.numpy(), labels.numpy())
    clf = KNNClassifier(feats, labels, k=5, metric="cosine")
    np.testing.assert_array_equal(clf.predict(query).numpy(), sk.predict(query.numpy()))
    # cosine: scale-invariant, and dist2 = 2 - 2 cos
    assert torch.equal(clf.kneighbors(query * 7.5).idx, clf.kneighbors(query).idx)
    d, i = clf.kneighbors(query)
    cos = torch.nn.functional.cosine_similarity(query[:, None], feats[i], dim=-1)
    torch.testing.assert_close(d, 2 - 2 * cos)


# ------------------------------------------------------------- gradients
@pytest.mark.parametrize("weights", ["softmax", "distance"])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_gradcheck(weights, metric):
    feats, labels, query = make_data(n_gallery=40, n_query=6, dim=5, seed=7)
    feats.requires_grad_(True)
    query.requires_grad_(True)

    def f(q, g):
        return KNNClassifier(g, labels, k=4, weights=weights, temperature=1.5, metric=metric)(q)

    assert torch.autograd.gradcheck(f, (query, feats))


def test_gradients_match_dense_autograd(device):
    feats, labels, query = make_data(n_gallery=80, n_query=10, device=device, seed=2)
    feats = feats.requires_grad_(True)
    query = query.requires_grad_(True)
    target = torch.arange(10, device=device) % 4
    clf = KNNClassifier(feats, labels, k=6, weights="softmax", temperature=4.0)
    loss = torch.nn.functional.nll_loss(torch.log(clf(query).clamp_min(1e-12)), target)
    gq, gg = torch.autograd.grad(loss, (query, feats))
    # Dense reference: full distance matrix, same neighbours.
    d2 = ((query[:, None] - feats[None]) ** 2).sum(-1)
    _, idx = clf.kneighbors(query.detach())
    w = torch.softmax(-d2.gather(1, idx) / 4.0, 1)
    scores = torch.zeros(10, 4, dtype=w.dtype, device=device).scatter_add(1, labels[idx], w)
    ref = torch.nn.functional.nll_loss(torch.log(scores.clamp_min(1e-12)), target)
    rq, rg = torch.autograd.grad(ref, (query, feats))
    torch.testing.assert_close(gq, rq)
    torch.testing.assert_close(gg, rg)
    assert (gg.abs().sum(1) > 0).sum() <= 60  # only selected rows get gradient


def test_uniform_is_not_differentiable_and_buffers_do_not_train():
    feats, labels, query = make_data(n_gallery=50, n_query=5, seed=1)
    q = query.requires_grad_(True)
    clf = KNNClassifier(feats, labels, k=3)
    assert not clf(q).requires_grad  # piecewise constant: no graph, not a silent zero
    assert clf.vote(*clf.kneighbors(q), weights="softmax").requires_grad
    assert list(clf.parameters()) == [] and "features" in dict(clf.named_buffers())


def test_parameter_gallery_is_trainable():
    feats, labels, query = make_data(n_gallery=30, n_query=8, seed=4)
    clf = KNNClassifier(torch.nn.Parameter(feats.clone()), labels, k=3, weights="softmax", metric="cosine")
    assert [n for n, _ in clf.named_parameters()] == ["features"]
    clf(query)[:, 1].sum().backward()
    assert clf.features.grad is not None and clf.features.grad.abs().sum() > 0
    with pytest.raises(TypeError, match="nn.Parameter"):
        clf.add(feats[:2], labels[:2])
    sd = clf.state_dict()
    fresh = KNNClassifier(torch.nn.Parameter(torch.zeros(1, 8, dtype=torch.float64)), [0], k=3,
                          weights="softmax", metric="cosine")
    fresh.load_state_dict(sd)
    assert isinstance(fresh.features, torch.nn.Parameter)
    assert torch.equal(fresh(query), clf(query))


def test_support_embeddings_get_gradient():
    # The end-to-end pattern: the gallery is this step's support embeddings.
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 4, dtype=torch.float64)
    feats, labels, query = make_data(n_gallery=64, n_query=16, seed=6)
    clf = KNNClassifier(net(feats), labels, k=5, weights="softmax")
    loss = -torch.log(clf(net(query)).clamp_min(1e-12))[:, 0].mean()
    loss.backward()
    assert net.weight.grad is not None and net.weight.grad.abs().sum() > 0
    assert clf.state_dict()["features"].requires_grad is False


# ------------------------------------------------------------ state_dict
def test_state_dict_round_trip_with_grown_gallery(device):
    feats, labels, query = make_data(dtype=torch.float32, device=device)
    clf = KNNClassifier(feats[:100], labels[:100], k=5, weights="distance", num_classes=6)
    clf.add(feats[100:], labels[100:])
    buf = io.BytesIO()
    torch.save(clf.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    fresh = KNNClassifier(torch.zeros(7, 8, device=device), torch.zeros(7, dtype=torch.long), k=5,
                          weights="distance")
    assert fresh.num_classes == 1
    fresh.load_state_dict(sd)
    assert len(fresh) == 300 and fresh.num_classes == 6
    assert torch.equal(fresh.features, feats) and torch.equal(fresh.labels, labels)
    assert torch.equal(fresh(query), clf(query))
    # ... and into an empty one
    empty = KNNClassifier(torch.zeros(0, 8, device=device), torch.zeros(0, dtype=torch.long), k=5, num_classes=2,
                          weights="distance")
    empty.load_state_dict(sd)
    assert torch.equal(empty.predict(query), clf.predict(query))


def test_state_dict_mismatches():
    feats, labels, _ = make_data(dtype=torch.float32)
    sd = KNNClassifier(feats, labels).state_dict()
    with pytest.raises(RuntimeError, match="size mismatch"):
        KNNClassifier(torch.zeros(3, 5), [0, 1, 2]).load_state_dict(sd)
    with pytest.raises(ValueError, match="metric='l2'"):
        KNNClassifier(feats, labels, metric="cosine").load_state_dict(sd)


def test_to_dtype_and_half(device):
    feats, labels, query = make_data(dtype=torch.float32, device=device)
    clf = KNNClassifier(feats, labels, k=5)
    ref = clf.predict(query)
    clf64 = clf.to(torch.float64)
    assert clf64.features.dtype == torch.float64 and clf64.labels.dtype == torch.int64
    assert torch.equal(clf64.predict(query.double()), ref)
    with pytest.raises(TypeError, match="query must have the gallery's dtype torch.float64, got torch.float32"):
        clf64(query)


# ---------------------------------------------------------------- growing
def test_add_equals_building_at_once(device):
    feats, labels, query = make_data(device=device)
    whole = KNNClassifier(feats, labels, k=6, weights="softmax", metric="cosine")
    grown = KNNClassifier(feats[:10], labels[:10], k=6, weights="softmax", metric="cosine", num_classes=4)
    with pytest.raises(ValueError, match="k=6 is larger than the gallery"):
        KNNClassifier(feats[:5], labels[:5], k=6, num_classes=4)(query)
    for s in range(10, 300, 70):
        grown.add(feats[s:s + 70], labels[s:s + 70])
    assert len(grown) == 300
    torch.testing.assert_close(grown.features, whole.features, rtol=0, atol=0)
    assert torch.equal(grown(query), whole(query))
    # duplicates added later lose distance ties
    grown.add(feats[:3], labels[:3])
    assert grown.kneighbors(feats[:3]).idx[:, 0].tolist() == [0, 1, 2]


# ------------------------------------------------------------ half dtypes
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(device, dtype):
    feats, labels, query = make_data(n_gallery=200, n_query=50, dim=16, device=device, seed=9)
    # Large magnitudes: squared distances ~1e6 overflow float16 (max 65504).
    feats, query = (feats * 60).to(dtype), (query * 60).to(dtype)
    clf = KNNClassifier(feats, labels, k=5, weights="distance")
    d, i = clf.kneighbors(query)
    assert d.dtype == torch.float32 and torch.isfinite(d).all() and d.max() > 65504
    od, oi = oracle_neighbors(query.cpu().double(), feats.cpu().double(), 5)
    # the search accumulates in float32 (ties to the lower index): exactly the float32 oracle's indices
    np.testing.assert_array_equal(i.cpu().numpy(), oracle_neighbors(query.cpu().double(), feats.cpu().double(), 5,
                                                                     acc=np.float32)[1])
    np.testing.assert_allclose(d.cpu().numpy(), np.take_along_axis(
        ((query.cpu().double()[:, None] - feats.cpu().double()[None]) ** 2).sum(-1).numpy(), i.cpu().numpy(), 1),
        rtol=1e-6)
    scores = clf(query)
    assert scores.dtype == torch.float32
    osc = oracle_scores(od, oi, labels.cpu(), 4, "distance")
    assert (clf.predict(query).cpu().numpy() == oracle_predict(osc)).mean() > 0.97
    # gradient through a half query
    q = query.clone().requires_grad_(True)
    clf.weights = "softmax"
    clf.temperature = 1e4
    clf(q)[:, 0].sum().backward()
    assert q.grad.dtype == dtype and torch.isfinite(q.grad.float()).all() and q.grad.float().abs().sum() > 0


# -------------------------------------------------------------- confidence
def test_confidence_definition():
    g = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0]])
    labels = torch.tensor([0, 0, 1, 1, 1])
    clf = KNNClassifier(g, labels, k=3)
    q = torch.tensor([[0.0], [0.5], [1.4], [10.2]])
    pred, conf = clf.predict(q, return_confidence=True)
    assert pred.tolist() == [0, 0, 0, 1]
    # q=0: nearest same d2=0            -> 1
    # q=0.5: same 0.25, other 2.25      -> 1 - sqrt(0.25/2.25) = 2/3
    # q=1.4: vote {0,0,1} -> 0; same .16, other .36 -> 1 - 0.4/0.6 = 1/3
    # q=10.2: all three agree; other-class lower bound = 3rd distance (8.2^2)
    expected = [1.0, 2 / 3, 1 / 3, 1 - 0.2 / 8.2]
    torch.testing.assert_close(conf, torch.tensor(expected))
    assert torch.equal(clf.confidence(q), conf)
    clf.k = 1
    assert torch.equal(clf.confidence(q), torch.zeros(4))


# ----------------------------------------------------------------- errors
def test_errors():
    f = torch.randn(10, 4)
    y = torch.arange(10) % 3
    with pytest.raises(ValueError, match=r"labels must have shape \(10,\), one label per feature row, got \(9,\)"):
        KNNClassifier(f, y[:9])
    with pytest.raises(TypeError, match="labels must hold integer class indices.*got dtype torch.float32"):
        KNNClassifier(f, y.float())
    with pytest.raises(TypeError, match="labels must hold integer class indices.*torch.bool"):
        KNNClassifier(f, y > 0)
    with pytest.raises(TypeError, match=r"features must be a torch.Tensor of shape \(N, D\), got ndarray"):
        KNNClassifier(f.numpy(), y)
    with pytest.raises(ValueError, match=r"features must have shape \(N, D\), got \(10, 4, 1\)"):
        KNNClassifier(f[..., None], y)
    with pytest.raises(TypeError, match="features must be float16, bfloat16, float32 or float64, got torch.int64"):
        KNNClassifier(y[:, None].repeat(1, 4), y)
    with pytest.raises(ValueError, match=r"labels must be class indices in \[0, num_classes=2\), got labels\[2\]=2"):
        KNNClassifier(f, y, num_classes=2)
    with pytest.raises(ValueError, match=r"labels\[3\]=-1"):
        KNNClassifier(f, torch.tensor([0, 1, 2, -1, 0, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="num_classes must be given when the gallery is empty"):
        KNNClassifier(f[:0], y[:0])
    with pytest.raises(ValueError, match="num_classes must be >= 1, got 0"):
        KNNClassifier(f, y, num_classes=0)
    with pytest.raises(ValueError, match=r"weights must be one of \('uniform', 'distance', 'softmax'\), got 'gaussian'"):
        KNNClassifier(f, y, weights="gaussian")
    with pytest.raises(ValueError, match=r"metric must be one of \('l2', 'cosine'\), got 'L1'"):
        KNNClassifier(f, y, metric="L1")
    with pytest.raises(TypeError, match="metric must be one of"):
        KNNClassifier(f, y, metric=None)
    with pytest.raises(TypeError, match="k must be an int, got float 2.0"):
        KNNClassifier(f, y, k=2.0)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        KNNClassifier(f, y, k=0)
    with pytest.raises(ValueError, match="temperature must be a finite float > 0, got 0.0"):
        KNNClassifier(f, y, temperature=0.0)

    clf = KNNClassifier(f, y, k=3)
    with pytest.raises(ValueError, match=r"forward: query must have shape \(B, D\) with the gallery's D=4, got \(2, 5\)"):
        clf(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"query must have shape \(B, 4\), got \(4,?\)"):
        clf(torch.randn(4))
    with pytest.raises(TypeError, match="query must have the gallery's dtype torch.float32, got torch.float64"):
        clf.predict(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"kneighbors: k=11 is larger than the gallery \(10 items\)"):
        clf.kneighbors(torch.randn(2, 4), k=11)
    clf.k = 12
    with pytest.raises(ValueError, match=r"forward: k=12 is larger than the gallery \(10 items\)"):
        clf(torch.randn(2, 4))
    with pytest.raises(ValueError, match="weights must be one of"):
        clf.weights = "linear"
    with pytest.raises(ValueError, match=r"add: features must have shape \(n, 4\) to match the gallery, got \(2, 3\)"):
        clf.add(torch.randn(2, 3), [0, 1])
    with pytest.raises(TypeError, match="add: features must have the gallery's dtype torch.float32, got torch.float16"):
        clf.add(torch.randn(2, 4).half(), [0, 1])
    with pytest.raises(ValueError, match=r"add: labels must have shape \(2,\)"):
        clf.add(torch.randn(2, 4), [0, 1, 2])
    with pytest.raises(ValueError, match=r"add: labels must be class indices in \[0, num_classes=3\), got labels\[1\]=7"):
        clf.add(torch.randn(2, 4), [0, 7])
    with pytest.raises(TypeError, match="add: labels must hold integer class indices"):
        clf.add(torch.randn(2, 4), [0.5, 1.0])
    assert len(clf) == 10  # failed adds changed nothing


def test_empty_query_batch():
    clf = KNNClassifier(torch.randn(10, 4), torch.arange(10) % 3, k=3)
    assert clf(torch.zeros(0, 4)).shape == (0, 3)
    assert clf.predict(torch.zeros(0, 4)).shape == (0,)


# ------------------------------------------------------------------ compile
@pytest.mark.slow
@pytest.mark.parametrize("weights", ["softmax"])
def test_torch_compile_fullgraph(device, weights):
    feats, labels, query = make_data(n_gallery=200, n_query=32, dtype=torch.float32, device=device)
    clf = KNNClassifier(feats, labels, k=5, weights=weights, temperature=3.0)
    compiled = torch.compile(clf, fullgraph=True)
    torch.testing.assert_close(compiled(query), clf(query))
    # autograd through the compiled graph (aot_eager: tracing + fake kernels, no codegen)
    q = query.clone().requires_grad_(True)
    out = torch.compile(clf, fullgraph=True, backend="aot_eager")(q)
    (g,) = torch.autograd.grad(out[:, 0].sum(), q)
    q2 = query.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad(clf(q2)[:, 0].sum(), q2)
    torch.testing.assert_close(g, ref)


def test_sharded_save_load_in_one_process(tmp_path):
    g = torch.Generator().manual_seed(5)
    feats = torch.randn(50, 6, generator=g)
    labels = torch.randint(0, 3, (50,), generator=g)
    q = torch.randn(7, 6, generator=g)
    clf = KNNClassifier(feats, labels, 4, weights="softmax", temperature=0.5, metric="cosine")
    assert KNNClassifier.from_full_gallery(feats, labels, 4, metric="cosine").features.equal(clf.features)
    assert clf.shard_sizes == (50,) and clf.shard_offset == 0 and clf.process_group is None
    path = clf.save_sharded(tmp_path / "g")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["rows"] == 50 and manifest["metric"] == "cosine" and manifest["temperature"] == 0.5
    back = KNNClassifier.load_sharded(path)
    # Stored normalised, loaded as stored: no second normalisation.
    assert torch.equal(back.features, clf.features) and torch.equal(back.labels, clf.labels)
    assert (back.k, back.weights, back.metric, back.num_classes) == (4, "softmax", "cosine", 3)
    assert torch.equal(back(q), clf(q))
    with pytest.raises(FileExistsError, match="already holds a saved gallery"):
        clf.save_sharded(path)
    # Overwriting removes shard files the new manifest does not list.
    (path / "shard-00003-of-00004.pt").write_bytes(b"old")
    clf.add(q[:2], torch.tensor([0, 1]))
    clf.save_sharded(path, overwrite=True)
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "shard-00000-of-00001.pt"]
    assert len(KNNClassifier.load_sharded(path)) == 52
    # A damaged folder is reported, not half-loaded.
    torch.save({"features": torch.zeros(3, 6), "labels": torch.zeros(3, dtype=torch.int64)},
               path / "shard-00000-of-00001.pt")
    with pytest.raises(ValueError, match="does not hold the 52 x 6 float32 rows"):
        KNNClassifier.load_sharded(path)
    (path / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a KNNClassifier manifest"):
        KNNClassifier.load_sharded(path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is not a folder"):
        clf.save_sharded(tmp_path / "file")


# ----------------------------------------------------------- loading validates like the constructor


def _ctor_error(features, labels, **kw):
    with pytest.raises((TypeError, ValueError)) as info:
        KNNClassifier(features, labels, 3, **kw)
    return type(info.value), str(info.value).split(": ", 1)[1]


@pytest.mark.parametrize("case", ["float_labels", "out_of_range", "negative", "int_features", "labels_2d"])
def test_load_state_dict_validates_like_the_constructor(case):
    feats, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    sd = KNNClassifier(feats, labels, 3).state_dict()
    if case == "float_labels":
        sd["labels"] = labels.double() + 0.7  # was silently truncated to 0, 1, 2
    elif case == "out_of_range":
        sd["labels"] = torch.tensor([0, 1, 2, 0, 1, 7])  # was a bare scatter error in predict
    elif case == "negative":
        sd["labels"] = torch.tensor([0, 1, 2, 0, -1, 2])
    elif case == "int_features":
        sd["features"] = torch.ones(6, 4, dtype=torch.int32)
    else:
        sd["labels"] = labels[:, None]
    want = _ctor_error(sd["features"], sd["labels"], num_classes=3)
    target = KNNClassifier(torch.randn(2, 4), torch.tensor([0, 2]), 3)
    before = (target.features.clone(), target.labels.clone())
    with pytest.raises(want[0]) as info:
        target.load_state_dict(sd)
    assert str(info.value) == "KNNClassifier.load_state_dict: " + want[1]
    # Nothing was copied in.
    assert torch.equal(target.features, before[0]) and torch.equal(target.labels, before[1])


def test_load_state_dict_range_uses_the_saved_num_classes():
    sd = KNNClassifier(torch.randn(4, 2), torch.tensor([0, 1, 4, 3]), 2).state_dict()  # num_classes 5
    small = KNNClassifier(torch.randn(2, 2), torch.tensor([0, 1]), 2)
    small.load_state_dict(sd)
    assert small.num_classes == 5 and small.predict(torch.randn(3, 2)).max() <= 4
    sd["_extra_state"]["num_classes"] = 4
    with pytest.raises(ValueError, match=r"labels must be class indices in \[0, num_classes=4\), got labels\[2\]=4"):
        KNNClassifier(torch.randn(2, 2), torch.tensor([0, 1]), 2).load_state_dict(sd)


def _saved(tmp_path, labels=None):
    feats = torch.randn(8, 3)
    clf = KNNClassifier(feats, torch.arange(8) % 3 if labels is None else labels, 3, num_classes=3)
    return clf.save_sharded(tmp_path / "g"), feats


@pytest.mark.parametrize("case", ["float_labels", "out_of_range"])
def test_load_sharded_validates_labels_like_the_constructor(tmp_path, case):
    path, feats = _saved(tmp_path)
    bad = (torch.arange(8) % 3).double() + 0.5 if case == "float_labels" else torch.tensor([0, 1, 2, 0, 1, 2, 0, 3])
    torch.save({"features": feats, "labels": bad}, path / "shard-00000-of-00001.pt")
    want = _ctor_error(feats, bad, num_classes=3)
    with pytest.raises(want[0]) as info:
        KNNClassifier.load_sharded(path)
    assert str(info.value) == f"KNNClassifier.load_sharded: shard {path / 'shard-00000-of-00001.pt'}: " + want[1]


class _RunsCode:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(MARKER),))


MARKER = ""


def test_load_sharded_never_runs_pickled_code_and_reports_damage(tmp_path):
    global MARKER
    import pickle

    path, feats = _saved(tmp_path)
    shard = path / "shard-00000-of-00001.pt"
    good = shard.read_bytes()
    MARKER = str(tmp_path / "code-ran")
    # A torch.save zip and a plain pickle, each holding an object whose unpickling runs code.
    torch.save({"features": feats, "labels": torch.arange(8) % 3, "x": _RunsCode()}, shard)
    with pytest.raises(ValueError, match=r"cannot load shard .*shard-00000-of-00001.pt.*nothing in it was run"):
        KNNClassifier.load_sharded(path)
    shard.write_bytes(pickle.dumps({"features": feats, "labels": _RunsCode()}))
    with pytest.raises(ValueError, match="cannot load shard"):
        KNNClassifier.load_sharded(path)
    assert not (tmp_path / "code-ran").exists()
    # Truncated shard, truncated manifest, manifest missing a key.
    shard.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="cannot load shard .*truncated"):
        KNNClassifier.load_sharded(path)
    shard.write_bytes(good)
    assert len(KNNClassifier.load_sharded(path)) == 8
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="is not valid JSON"):
        KNNClassifier.load_sharded(path)
    m = json.loads(text)
    del m["num_classes"]
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="lacks the key 'num_classes'"):
        KNNClassifier.load_sharded(path)


@pytest.mark.parametrize("version", [99, 2, 0, "1", None])
def test_load_state_dict_refuses_an_unknown_state_version(version):
    """A state written by a newer (or damaged) pcgeom is refused, naming the
    version found and the versions this one reads -- not loaded silently."""
    import re

    sd = KNNClassifier(torch.randn(4, 2), torch.tensor([0, 1, 2, 1]), 2).state_dict()
    sd["_extra_state"]["version"] = version
    target = KNNClassifier(torch.randn(3, 2), torch.tensor([0, 1, 0]), 2)
    before = (target.features.clone(), target.labels.clone(), target.num_classes)
    with pytest.raises(ValueError, match=rf"KNNClassifier.load_state_dict: the state_dict's extra state has "
                                         rf"version {re.escape(repr(version))}; this pcgeom reads version 1"):
        target.load_state_dict(sd)
    assert torch.equal(target.features, before[0]) and torch.equal(target.labels, before[1])
    assert target.num_classes == before[2]
    with pytest.raises(ValueError, match=rf"has version {re.escape(repr(version))}; this pcgeom reads version 1"):
        target.set_extra_state(sd["_extra_state"])


def test_load_sharded_label_errors_name_the_shard_file(tmp_path):
    path, feats = _saved(tmp_path)
    shard = path / "shard-00000-of-00001.pt"
    torch.save({"features": feats, "labels": torch.tensor([0, 1, 2, 0, 1, 2, 0, 3])}, shard)
    with pytest.raises(ValueError) as info:
        KNNClassifier.load_sharded(path)
    assert str(info.value).startswith(f"KNNClassifier.load_sharded: shard {shard}: labels must be class indices")

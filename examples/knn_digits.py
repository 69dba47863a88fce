"""KNN classification of real handwritten digits with ``pcgeom.nn.KNNClassifier``.

What it does, on a fixed 4,000 / 1,000 split of the 5,000 MNIST digits in
``data/mnist_5k.csv.gz`` (scikit-learn's 8x8 ``load_digits`` if that file is
missing):

1. raw pixels: accuracy for k = 1, 3, 5 with ``uniform``, ``distance`` and
   ``softmax`` weights -- one neighbour search, every setting voted from it;
2. a confusion-matrix picture and an accuracy-vs-coverage picture (reject the
   least confident predictions first, confidence from the neighbour distances);
3. a tiny embedding network (784 -> 256 -> 64 MLP) trained end to end *through*
   the differentiable soft-KNN vote: each step, a support batch is embedded and
   becomes the gallery, a query batch is classified by it, and the loss
   back-propagates into both; then the trained embedding is evaluated with a
   plain KNN on the full training gallery.

Runs in well under two minutes on two CPU cores (use ``--device cuda`` on a GPU).

Usage::

    python examples/knn_digits.py                      # writes out/knn_digits/*.png
    python examples/knn_digits.py --out-dir figs --overwrite
    python examples/knn_digits.py --epochs 0           # skip the training section
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from pcgeom.nn import KNNClassifier

ROOT = Path(__file__).resolve().parent.parent
MNIST = ROOT / "data" / "mnist_5k.csv.gz"
OUTPUTS = ("confusion_matrix.png", "accuracy_vs_coverage.png")


def load_digits_data(path: Path):
    """Returns ``(X float32 (n, D) in [0, 1], y int64 (n,), name, image side)``."""
    if path.exists():
        with gzip.open(path, "rt") as fh:
            a = np.loadtxt(fh, delimiter=",", dtype=np.float32)
        return torch.from_numpy(a[:, :-1] / 255.0), torch.from_numpy(a[:, -1].astype(np.int64)), "MNIST 5k (28x28)", 28
    print(f"{path} not found (run scripts/get_mnist.py); falling back to scikit-learn's 8x8 digits", file=sys.stderr)
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise SystemExit(f"{path} is missing and scikit-learn is not installed (pip install scikit-learn)") from exc
    d = load_digits()
    return torch.from_numpy((d.data / 16.0).astype(np.float32)), torch.from_numpy(d.target.astype(np.int64)), "sklearn digits (8x8)", 8


def split(n: int, n_test: int, seed: int):
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_test:], perm[:n_test]


def coverage_curve(confidence: torch.Tensor, correct: torch.Tensor):
    """Accuracy of the kept predictions when the least confident are rejected.

    Sorted by confidence descending; among equal confidences the original order
    is kept (stable sort), so the curve is deterministic.
    """
    order = torch.sort(confidence, descending=True, stable=True).indices
    kept = torch.arange(1, len(order) + 1, dtype=torch.float64)
    acc = correct[order].double().cumsum(0) / kept
    return (kept / len(order)).numpy(), acc.numpy()


def plot_confusion(cm: np.ndarray, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 5))
    im = ax.imshow(cm, cmap="Blues")
    for (r, c), v in np.ndenumerate(cm):
        ax.text(c, r, str(v), ha="center", va="center", fontsize=8,
                color="white" if v > cm.max() / 2 else "black")
    n = cm.shape[0]
    ax.set(xticks=range(n), yticks=range(n), xlabel="predicted digit", ylabel="true digit", title=title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_coverage(curves: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for label, (cov, acc) in curves.items():
        ax.plot(cov * 100, acc * 100, label=label)
    ax.set(xlabel="coverage: predictions kept (%)", ylabel="accuracy of kept predictions (%)", title=title)
    ax.set_xlim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train_embedding(Xtr, ytr, Xte, yte, *, epochs, k, temperature, device, seed):
    """Tiny MLP trained through the soft-KNN vote; returns (net, per-epoch log)."""
    torch.manual_seed(seed)
    d_in = Xtr.shape[1]
    net = nn.Sequential(nn.Linear(d_in, 256), nn.ReLU(), nn.Linear(256, 64)).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    n_query, n_support = 128, 512
    n = Xtr.shape[0]
    steps = max(1, n // n_query)
    for epoch in range(epochs):
        net.train()
        total = 0.0
        for _ in range(steps):
            perm = torch.randperm(n, generator=g)
            q, s = perm[:n_query], perm[n_query:n_query + n_support]
            # The support embeddings require grad: the classifier keeps their
            # graph, so the loss trains the network through both sides.
            clf = KNNClassifier(net(Xtr[s]), ytr[s], k=k, num_classes=10, weights="softmax",
                                temperature=temperature, metric="cosine")
            scores = clf(net(Xtr[q]))
            loss = F.nll_loss(torch.log(scores.clamp_min(1e-12)), ytr[q])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
        acc = evaluate_embedding(net, Xtr, ytr, Xte, yte)
        print(f"  epoch {epoch + 1:2d}: soft-KNN loss {total / steps:.3f}   test accuracy (5-NN, cosine) {acc * 100:.1f}%")
    return net


@torch.no_grad()
def evaluate_embedding(net, Xtr, ytr, Xte, yte, k=5):
    net.eval()
    clf = KNNClassifier(net(Xtr), ytr, k=k, weights="distance", metric="cosine")
    return (clf.predict(net(Xte)) == yte).double().mean().item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=MNIST, help=f"MNIST 5k csv.gz (default: {MNIST})")
    ap.add_argument("--out-dir", type=Path, default=Path("out/knn_digits"), help="where the PNGs go")
    ap.add_argument("--overwrite", action="store_true", help="replace existing output files")
    ap.add_argument("--n-test", type=int, default=None,
                    help="test-set size, the rest is the gallery (default: 1000 for MNIST, 20%% otherwise)")
    ap.add_argument("--temperature", type=float, default=5.0,
                    help="softmax temperature for raw pixels, in squared-distance units (typical nearest d2 ~ 25)")
    ap.add_argument("--epochs", type=int, default=8, help="embedding training epochs (0 skips the section)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)

    paths = [args.out_dir / name for name in OUTPUTS]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not args.overwrite:
        print(f"refusing to overwrite {', '.join(existing)}; pass --overwrite or choose --out-dir", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    dev = torch.device(args.device)

    X, y, name, side = load_digits_data(args.data)
    n_test = args.n_test if args.n_test is not None else (1000 if side == 28 else len(y) // 5)
    if not 0 < n_test < len(y):
        print(f"--n-test must be in [1, {len(y) - 1}], got {n_test}", file=sys.stderr)
        return 2
    tr, te = split(len(y), n_test, args.seed)
    Xtr, ytr, Xte, yte = X[tr].to(dev), y[tr].to(dev), X[te].to(dev), y[te].to(dev)
    print(f"{name}: gallery {tuple(Xtr.shape)}, queries {tuple(Xte.shape)}, split seed {args.seed}")

    # ---- 1. raw pixels: one search (k=5), every (k, weights) voted from it
    t0 = time.perf_counter()
    clf = KNNClassifier(Xtr, ytr, k=5, num_classes=10, temperature=args.temperature)
    dist2, idx = clf.kneighbors(Xte)
    t_search = time.perf_counter() - t0
    print(f"\nraw pixels, squared L2 (search: {t_search:.2f} s); softmax temperature {args.temperature:g}")
    print("      " + "".join(f"{w:>10s}" for w in ("uniform", "distance", "softmax")))
    results = {}
    for k in (1, 3, 5):
        row = []
        for w in ("uniform", "distance", "softmax"):
            scores = clf.vote(dist2[:, :k], idx[:, :k], weights=w)
            pred = scores.argmax(1)  # ties: the lowest class index, like predict()
            results[(k, w)] = pred
            row.append((pred == yte).double().mean().item())
        print(f"k = {k} " + "".join(f"{a * 100:9.1f}%" for a in row))

    # ---- 2. pictures: confusion matrix (k=5, distance) and accuracy vs coverage
    best = (5, "distance")
    pred = results[best]
    cm = torch.bincount(yte.cpu() * 10 + pred.cpu(), minlength=100).reshape(10, 10).numpy()
    acc = (pred == yte).double().mean().item()
    plot_confusion(cm, f"{name}: k={best[0]}, {best[1]} weights ({acc * 100:.1f}%)", paths[0])
    curves = {}
    print("\naccuracy when the least confident predictions are rejected (confidence = 1 - sqrt(d_same/d_other)):")
    print("                  coverage  100%    90%    80%    50%")
    for w in ("uniform", "distance", "softmax"):
        p = results[(5, w)]
        conf = clf.confidence_from_neighbors(dist2, idx, p)
        cov, a = coverage_curve(conf.cpu(), (p == yte).cpu())
        curves[f"k=5, {w}"] = (cov, a)
        at = [a[max(0, int(round(c * len(a))) - 1)] for c in (1.0, 0.9, 0.8, 0.5)]
        print(f"  k=5, {w:9s}          " + "".join(f"{v * 100:6.1f}%" for v in at))
    plot_coverage(curves, f"{name}: reject the least confident", paths[1])
    print(f"\nwrote {paths[0]} and {paths[1]}")

    # ---- 3. embedding trained through the differentiable soft-KNN vote
    if args.epochs > 0:
        print(f"\ntraining a {Xtr.shape[1]}-256-64 MLP end to end through the soft-KNN vote "
              f"(k=10, softmax, cosine, temperature 0.1) for {args.epochs} epochs:")
        t0 = time.perf_counter()
        net = train_embedding(Xtr, ytr, Xte, yte, epochs=args.epochs, k=10, temperature=0.1,
                              device=dev, seed=args.seed)
        final = evaluate_embedding(net, Xtr, ytr, Xte, yte)
        print(f"learned embedding: {final * 100:.1f}% test accuracy with a 5-NN on the {len(ytr):,}-digit gallery "
              f"(raw pixels, same k: {(results[(5, 'distance')] == yte).double().mean().item() * 100:.1f}%), "
              f"trained in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

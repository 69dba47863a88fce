"""Neural-network modules built on pcgeom's ops.

* :class:`KNNClassifier` -- exact k-nearest-neighbour classification and
  retrieval over feature vectors, with a differentiable vote.
"""

from pcgeom.nn.knn_classifier import KNNClassifier

__all__ = ["KNNClassifier"]

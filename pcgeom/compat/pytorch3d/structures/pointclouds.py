"""``pytorch3d.structures.Pointclouds`` served by pcgeom: a batch of clouds as list, padded and packed tensors.

What the point ops and their users touch, with upstream's (v0.7.9) rules: built
from a list of ``(P_n, 3)`` tensors or a padded ``(N, P, 3)`` tensor, with
optional normals ``(.., 3)`` and features ``(.., C)`` in the same layout; padded
views are zero-padded; ``packed`` concatenates the clouds in order; empty clouds
are allowed (``isempty()`` is True when every cloud is empty).  Indexing returns
a new ``Pointclouds`` sharing the tensors; ``clone`` / ``detach`` / ``to`` copy
as torch does.  The representations are built on first use and cached.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["Pointclouds", "join_pointclouds_as_batch", "join_pointclouds_as_scene"]


def _pad(tensors, P: int, C: int, device, dtype) -> torch.Tensor:
    """``(N, P, C)`` zero-padded stack of ``(P_n, C)`` tensors (differentiable)."""
    if not tensors:
        return torch.zeros((0, P, C), device=device, dtype=dtype)
    rows = [torch.nn.functional.pad(t, (0, 0, 0, P - t.shape[0])) if t.shape[0] < P else t for t in tensors]
    return torch.stack(rows)


class Pointclouds:
    """A batch of N point clouds of possibly different sizes, pytorch3d's ``Pointclouds``.

    Args:
        points: a list of N ``(P_n, 3)`` tensors (empty clouds may be ``(0, 3)`` or
            any empty tensor), or a padded ``(N, P, 3)`` tensor (every cloud has P points).
        normals: None, or per-point normals in the layout of ``points`` (``(P_n, 3)`` each
            or ``(N, P, 3)``).
        features: None, or per-point features ``(P_n, C)`` each or ``(N, P, C)``.

    Padded views (``points_padded()``, ...) are ``(N, max P_n, .)`` with zeros past each
    cloud; packed views are ``(sum P_n, .)``.  Errors are upstream's ``ValueError``\\ s
    (e.g. ``"Clouds in list must be of shape Px3 or empty"``).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.structures import Pointclouds
        >>> pcl = Pointclouds([torch.ones(2, 3), torch.zeros(0, 3), torch.full((3, 3), 2.0)])
        >>> len(pcl), pcl.num_points_per_cloud().tolist(), pcl.points_padded().shape
        (3, [2, 0, 3], torch.Size([3, 3, 3]))
        >>> pcl.points_packed().shape, pcl.packed_to_cloud_idx().tolist()
        (torch.Size([5, 3]), [0, 0, 2, 2, 2])
        >>> pcl[1].isempty(), pcl[[0, 2]].num_points_per_cloud().tolist()
        (True, [2, 3])
    """

    def __init__(self, points, normals=None, features=None) -> None:
        self._points_list = self._points_padded = None
        self._packed_cache = {}
        if isinstance(points, list):
            self.device = points[0].device if points else torch.device("cpu")
            for p in points:
                if len(p) > 0 and (p.dim() != 2 or p.shape[1] != 3):
                    raise ValueError("Clouds in list must be of shape Px3 or empty")
                if p.device != self.device:
                    raise ValueError("All points must be on the same device")
            self._N = len(points)
            counts = [len(p) for p in points]
            self._P = max(counts, default=0)
            self._num_points_per_cloud = torch.tensor(counts, dtype=torch.int64, device=self.device)
            # empty clouds of any shape are stored as (0, 3), in the dtype of the others; when all are
            # empty, in the first one's dtype (upstream pads from points[0]), so float64 stays float64
            dtype = next((p.dtype for p in points if len(p) > 0), points[0].dtype if points else torch.float32)
            self._points_list = [p if len(p) > 0 else torch.zeros((0, 3), dtype=dtype, device=self.device)
                                 for p in points]
            self.equisized = len(set(counts)) == 1
        elif torch.is_tensor(points):
            if points.dim() != 3 or points.shape[2] != 3:
                raise ValueError("Points tensor has incorrect dimensions.")
            self.device = points.device
            self._N, self._P = int(points.shape[0]), int(points.shape[1])
            self._points_padded = points
            self._num_points_per_cloud = torch.full((self._N,), self._P, dtype=torch.int64, device=self.device)
            self.equisized = True
        else:
            raise ValueError("Points must be either a list or a tensor with shape (batch_size, P, 3) where P is "
                             "the maximum number of points in a cloud.")
        self.valid = self._num_points_per_cloud > 0
        self._normals_list, self._normals_padded, c = self._parse_aux(normals)
        if c is not None and c != 3:
            raise ValueError("Normals are expected to be 3-dimensional")
        self._features_list, self._features_padded, self._C = self._parse_aux(features)

    def _parse_aux(self, aux):
        """``(list or None, padded or None, channels or None)`` of a normals / features argument."""
        if aux is None or self._N == 0:
            return None, None, None
        if torch.is_tensor(aux):
            if aux.dim() != 3:
                raise ValueError("Auxiliary input tensor has incorrect dimensions.")
            if aux.shape[0] != self._N:
                raise ValueError("Points and inputs must be the same length.")
            if aux.shape[1] != self._P:
                raise ValueError("Inputs tensor must have the right maximum number of points in each cloud.")
            if aux.device != self.device:
                raise ValueError("All auxiliary inputs must be on the same device as the points.")
            return None, aux, int(aux.shape[2])
        if not isinstance(aux, list):
            raise ValueError("Auxiliary input must be either a list or a tensor with shape (batch_size, P, C) where "
                             "P is the maximum number of points in a cloud.")
        if len(aux) != self._N:
            raise ValueError("Points and auxiliary input must be the same length.")
        channels = None
        for n, d in zip(self._num_points_per_cloud.tolist(), aux):
            if n > 0 or (d is not None and d.dim() == 2):
                if d.dim() != 2:
                    raise ValueError("A cloud auxiliary input must be of shape PxC or empty")
                if d.shape[0] != n:
                    raise ValueError("A cloud has mismatched numbers of points and inputs")
                if channels is not None and d.shape[1] != channels:
                    raise ValueError("The clouds must have the same number of channels")
                if d.device != self.device:
                    raise ValueError("All auxiliary inputs must be on the same device as the points.")
                channels = int(d.shape[1])
        if channels is None:  # only empty clouds with nothing usable
            return None, None, None
        ref = next(d for n, d in zip(self._num_points_per_cloud.tolist(), aux) if n > 0 or
                   (d is not None and d.dim() == 2))
        fixed = [d if (d is not None and d.dim() == 2) else ref.new_zeros((0, channels)) for d in aux]
        return fixed, None, channels

    # -- sizes ---------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._N

    def isempty(self) -> bool:
        """True when there is no cloud or every cloud is empty."""
        return self._N == 0 or not bool(self.valid.any())

    def num_points_per_cloud(self) -> torch.Tensor:
        """int64 ``(N,)``: the number of points of each cloud."""
        return self._num_points_per_cloud

    # -- list ------------------------------------------------------------------------------------------------
    def _to_list(self, padded):
        return [padded[i, :n] for i, n in enumerate(self._num_points_per_cloud.tolist())]

    def points_list(self) -> list:
        """The clouds as a list of ``(P_n, 3)`` tensors."""
        if self._points_list is None:
            self._points_list = self._to_list(self._points_padded)
        return self._points_list

    def normals_list(self):
        """The normals as a list of ``(P_n, 3)`` tensors, or None."""
        if self._normals_list is None and self._normals_padded is not None:
            self._normals_list = self._to_list(self._normals_padded)
        return self._normals_list

    def features_list(self):
        """The features as a list of ``(P_n, C)`` tensors, or None."""
        if self._features_list is None and self._features_padded is not None:
            self._features_list = self._to_list(self._features_padded)
        return self._features_list

    # -- padded ----------------------------------------------------------------------------------------------
    def points_padded(self) -> torch.Tensor:
        """``(N, max P_n, 3)``, zero past each cloud."""
        if self._points_padded is None:
            lst = self.points_list()
            dtype = lst[0].dtype if lst else torch.float32
            self._points_padded = _pad(lst, self._P, 3, self.device, dtype)
        return self._points_padded

    def normals_padded(self):
        """``(N, max P_n, 3)`` normals, zero past each cloud, or None."""
        if self._normals_padded is None and self._normals_list is not None:
            self._normals_padded = _pad(self._normals_list, self._P, 3, self.device, self._normals_list[0].dtype)
        return self._normals_padded

    def features_padded(self):
        """``(N, max P_n, C)`` features, zero past each cloud, or None."""
        if self._features_padded is None and self._features_list is not None:
            self._features_padded = _pad(self._features_list, self._P, self._C, self.device,
                                         self._features_list[0].dtype)
        return self._features_padded

    # -- packed ----------------------------------------------------------------------------------------------
    def _packed(self, key, lst):
        if key not in self._packed_cache:
            if lst is None:
                return None
            self._packed_cache[key] = torch.cat(lst, dim=0)
        return self._packed_cache[key]

    def points_packed(self) -> torch.Tensor:
        """``(sum P_n, 3)``: the clouds one after another."""
        if self._N == 0:
            return torch.zeros((0, 3), dtype=torch.float32, device=self.device)
        return self._packed("points", self.points_list())

    def normals_packed(self):
        """``(sum P_n, 3)`` normals, or None."""
        return self._packed("normals", self.normals_list())

    def features_packed(self):
        """``(sum P_n, C)`` features, or None."""
        return self._packed("features", self.features_list())

    def packed_to_cloud_idx(self) -> torch.Tensor:
        """int64 ``(sum P_n,)``: the cloud of each packed point."""
        return torch.repeat_interleave(torch.arange(self._N, device=self.device), self._num_points_per_cloud)

    def cloud_to_packed_first_idx(self) -> torch.Tensor:
        """int64 ``(N,)``: where each cloud starts in the packed points."""
        return torch.cumsum(self._num_points_per_cloud, 0) - self._num_points_per_cloud

    def padded_to_packed_idx(self) -> torch.Tensor:
        """int64 ``(sum P_n,)``: ``points_padded().reshape(-1, 3)[idx] == points_packed()``."""
        n = self._num_points_per_cloud
        return torch.arange(int(n.sum()), device=self.device) - torch.repeat_interleave(
            self.cloud_to_packed_first_idx() - torch.arange(self._N, device=self.device) * self._P, n)

    # -- new objects -----------------------------------------------------------------------------------------
    def __getitem__(self, index) -> "Pointclouds":
        """The clouds at ``index`` (int, slice, list of ints, bool or int tensor) as a new ``Pointclouds``."""
        if isinstance(index, int):
            pick = [index]
        elif isinstance(index, slice):
            pick = list(range(self._N))[index]
        elif isinstance(index, list):
            pick = index
        elif isinstance(index, torch.Tensor):
            if index.dim() != 1 or index.dtype.is_floating_point:
                raise IndexError(index)
            pick = index.nonzero().flatten().tolist() if index.dtype == torch.bool else index.tolist()
        else:
            raise IndexError(index)
        pts, nrm, fts = self.points_list(), self.normals_list(), self.features_list()
        return self.__class__(points=[pts[i] for i in pick], normals=None if nrm is None else [nrm[i] for i in pick],
                              features=None if fts is None else [fts[i] for i in pick])

    def _apply(self, f) -> "Pointclouds":
        pts, nrm, fts = self.points_list(), self.normals_list(), self.features_list()
        out = self.__class__(points=[f(p) for p in pts], normals=None if nrm is None else [f(x) for x in nrm],
                             features=None if fts is None else [f(x) for x in fts])
        if self._points_padded is not None and self.equisized:
            out._points_padded = f(self._points_padded)  # keep a padded input's storage layout
        return out

    def clone(self) -> "Pointclouds":
        """A deep copy (every tensor cloned)."""
        return self._apply(torch.Tensor.clone)

    def detach(self) -> "Pointclouds":
        """The same clouds, detached from the autograd graph."""
        return self._apply(torch.Tensor.detach)

    def to(self, device, copy: bool = False) -> "Pointclouds":
        """The clouds on ``device``; ``self`` when already there and ``copy`` is False."""
        device = torch.device(device)
        if not copy and self.device == device:
            return self
        out = self._apply(lambda t: t.to(device, copy=copy))
        out.device = device
        return out

    def cpu(self) -> "Pointclouds":
        return self.to("cpu")

    def cuda(self) -> "Pointclouds":
        return self.to("cuda")

    def get_cloud(self, index: int):
        """``(points, normals, features)`` of cloud ``index`` (normals / features None when absent)."""
        if not isinstance(index, int):
            raise ValueError("Cloud index must be an integer.")
        if index < 0 or index >= self._N:
            raise ValueError("Cloud index must be in the range [0, N) where N is the number of clouds in the batch.")
        nrm, fts = self.normals_list(), self.features_list()
        return self.points_list()[index], None if nrm is None else nrm[index], None if fts is None else fts[index]

    def split(self, split_sizes: list):
        """Consecutive groups of clouds of the given sizes, as a list of ``Pointclouds``."""
        if not all(isinstance(x, int) for x in split_sizes):
            raise ValueError("Value of split_sizes must be a list of integers.")
        out, start = [], 0
        for size in split_sizes:
            out.append(self[start:start + size])
            start += size
        return out

    def extend(self, N: int) -> "Pointclouds":
        """Each cloud repeated ``N`` times in a row (cloned), as a new ``Pointclouds``."""
        if not isinstance(N, int):
            raise ValueError("N must be an integer.")
        if N <= 0:
            raise ValueError("N must be > 0.")
        rep = lambda lst: None if lst is None else [t.clone() for t in lst for _ in range(N)]  # noqa: E731
        return self.__class__(points=rep(self.points_list()), normals=rep(self.normals_list()),
                              features=rep(self.features_list()))

    def offset(self, offsets_packed) -> "Pointclouds":
        """A copy with ``offsets_packed`` (``(sum P_n, 3)`` or ``(3,)``) added to the points."""
        out = self.clone()
        pts = out.points_packed() + offsets_packed
        return out.update_padded(Pointclouds(pts.split(self._num_points_per_cloud.tolist())).points_padded())

    def scale(self, scale) -> "Pointclouds":
        """A copy with each cloud multiplied by ``scale`` (a float or ``(N,)``)."""
        s = torch.as_tensor(scale, device=self.device)
        s = s.expand(self._N) if s.dim() == 0 else s
        return self.clone().update_padded(self.points_padded() * s[:, None, None].to(self.points_padded().dtype))

    def get_bounding_boxes(self) -> torch.Tensor:
        """``(N, 3, 2)``: per cloud and axis, the min and max coordinate."""
        return torch.stack([torch.stack([p.min(0).values, p.max(0).values], dim=1) for p in self.points_list()])

    def update_padded(self, new_points_padded, new_normals_padded=None, new_features_padded=None) -> "Pointclouds":
        """A new ``Pointclouds`` with these padded tensors (same N, P and lengths); normals / features kept if None."""
        if new_points_padded.shape[:2] != (self._N, self._P) or new_points_padded.shape[2] != 3:
            raise ValueError(f"update_padded: new_points_padded must have shape ({self._N}, {self._P}, 3), "
                             f"got {tuple(new_points_padded.shape)}")
        pts = [new_points_padded[i, :n] for i, n in enumerate(self._num_points_per_cloud.tolist())]
        cut = lambda t: None if t is None else [t[i, :n] for i, n in enumerate(self._num_points_per_cloud.tolist())]  # noqa: E731
        nrm = cut(new_normals_padded) if new_normals_padded is not None else self.normals_list()
        fts = cut(new_features_padded) if new_features_padded is not None else self.features_list()
        out = self.__class__(points=pts, normals=nrm, features=fts)
        if self.equisized:
            out._points_padded = new_points_padded
        return out

    def estimate_normals(self, neighborhood_size: int = 50, disambiguate_directions: bool = True,
                         assign_to_self: bool = False):
        """Per-point normals by local PCA (``pytorch3d.ops.estimate_pointcloud_normals``), padded ``(N, P, 3)``.

        With ``assign_to_self`` they also become this object's normals.
        """
        # imported here: the ops package imports this module (is_pointclouds, convert_pointclouds_to_tensor)
        from pcgeom.compat.pytorch3d.ops.points_normals import estimate_pointcloud_normals

        normals = estimate_pointcloud_normals(self, neighborhood_size=neighborhood_size,
                                              disambiguate_directions=disambiguate_directions)
        if assign_to_self:
            self._normals_padded, self._normals_list = normals, None
            self._packed_cache.pop("normals", None)
        return normals


def join_pointclouds_as_batch(pointclouds: Sequence[Pointclouds]) -> Pointclouds:
    """One ``Pointclouds`` holding every cloud of ``pointclouds`` in order (normals / features only if all have them)."""
    if isinstance(pointclouds, Pointclouds) or not isinstance(pointclouds, Sequence):
        raise ValueError("Wrong first argument to join_points_as_batch.")
    out = {}
    for field in ("points", "normals", "features"):
        lists = [getattr(p, f"{field}_list")() for p in pointclouds]
        if any(x is None for x in lists):
            if field == "points" or any(x is not None for x in lists):
                raise ValueError(f"Pointclouds in the batch have some fields '{field}' defined and some set to None.")
            out[field] = None
        else:
            out[field] = [t for lst in lists for t in lst]
    return Pointclouds(**out)


def join_pointclouds_as_scene(pointclouds) -> Pointclouds:
    """All clouds of ``pointclouds`` (a ``Pointclouds`` or a list of them) concatenated into one cloud."""
    if isinstance(pointclouds, list):
        pointclouds = join_pointclouds_as_batch(pointclouds)
    if len(pointclouds) == 1:
        return pointclouds
    nrm, fts = pointclouds.normals_packed(), pointclouds.features_packed()
    return Pointclouds(points=[pointclouds.points_packed()], normals=None if nrm is None else [nrm],
                       features=None if fts is None else [fts])

// A KD-tree over one point cloud, shared by the CPU KNN search and the CPU
// bucket FPS.  CPU only.
//
// Layout: the points are reordered so that every node owns a contiguous range
// [begin, end) of tree positions; coordinates are stored per dimension
// (xyz[d * stride + pos], converted once to the accumulation type, which is exact
// for every input dtype), so a leaf scan reads D contiguous runs that the
// compiler vectorises.  Every node keeps the *tight* bounding box of its points
// (not the cell cut by the split planes): on surfaces and clustered clouds most
// of a cell is empty, and a tight box prunes that empty space.  Nodes also keep
// the lowest original index below them, so that a query whose k-th distance is
// tied with a large run of duplicates can skip subtrees that could only offer
// equal distances with higher indices.
//
// Splits: the median along the widest side of the tight box, ties broken by
// the original index, so the tree's shape depends only on n (which lets the
// subtrees be built in parallel into a pre-sized node array) and duplicate
// points are spread over subtrees in index order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/pcgeom_common.h"

namespace pcgeom {
namespace cpu {

// Lower bounds on a *computed* squared distance.
//
// The kernels prune a box when no point inside it can rank before the current
// k-th neighbour.  A box distance evaluated in floating point can exceed the
// rounded distance of a point inside the box by a few ulps; `shrink_bound`
// turns it into a number that is <= the computed squared distance
// (sum_d fl((q_d - p_d)^2), see pcgeom_common.h) of every point in the box:
// the relative error of both sides is below (2D+4)*u <= 2^-19 for D <= 8 and
// the factor leaves a 2^-12 margin; the absolute term covers subnormal
// underflow.  Pruning compares the shrunk bound *strictly*, so a point at
// exactly the k-th distance with a lower index is never skipped.
template <typename A>
struct BoundSlack;
template <>
struct BoundSlack<float> {
  static constexpr float rel = 1.0f - 1.0f / 4096.0f;
  static constexpr float abs = 1e-37f;
};
template <>
struct BoundSlack<double> {
  static constexpr double rel = 1.0 - 1.0 / 1099511627776.0;  // 1 - 2^-40
  static constexpr double abs = 1e-300;
};

template <typename A>
inline A shrink_bound(A lb) {
  return lb * BoundSlack<A>::rel - BoundSlack<A>::abs;
}

// Squared distance from q to the box [lo, hi] (0 inside).
template <int D, typename A>
inline A box_dist2(const A* q, const A* lo, const A* hi) {
  A s = A(0);
  for (int d = 0; d < D; ++d) {
    const A a = lo[d] - q[d];
    const A b = q[d] - hi[d];
    const A g = a > b ? a : b;
    const A gp = g > A(0) ? g : A(0);
    s += gp * gp;
  }
  return s;
}

template <int D, typename A>
struct KdNode {
  A lo[D];
  A hi[D];
  int32_t begin;
  int32_t end;
  int32_t left;     // children; -1 for a leaf
  int32_t right;
  int32_t min_idx;  // lowest original index in the subtree
  int32_t parent;   // -1 for the root

  bool leaf() const { return left < 0; }
};

template <int D, typename A>
struct KdTree {
  // Each coordinate array has kPad spare entries so that vector code may read
  // a whole vector past the last point.
  static constexpr int64_t kPad = 16;
  int64_t n = 0;
  int64_t stride = kPad;
  int64_t leaf_size = 16;
  std::vector<A> xyz;          // xyz[d * stride + pos]
  std::vector<int32_t> index;  // original index of tree position pos
  std::vector<KdNode<D, A>> nodes;
  std::vector<int32_t> leaves;  // leaf node ids in tree order (ascending begin)

  const A* coord(int d) const { return xyz.data() + d * stride; }
  int64_t size(int32_t node) const { return nodes[node].end - nodes[node].begin; }
};

// Builds a KdTree in phases so that callers can parallelise: `init` (copy the
// points in with rec()), `split_top` (serial: splits the nodes larger than a
// cut and lists the remaining subtrees as tasks), `build_task` (one
// independent subtree; tasks touch disjoint ranges and write their own node
// lists) and `finish` (splice the node lists, transpose the coordinates).
//
// A node splits its widest side at the median (a quickselect whose rounds are
// branch-free partition passes: std::nth_element on these records spends most
// of its time in mispredicted comparisons), and the children's tight boxes are
// measured right after.  Leaves hold between leaf_size / 2 and leaf_size points.
template <int D, typename A>
class KdBuilder {
 public:
  struct Rec {
    A c[D];
    int32_t idx;
  };
  struct Task {
    int32_t node;  // placeholder in the top tree
    int32_t begin;
    int32_t end;
    int32_t slot;  // index of the task's own node list
  };

  explicit KdBuilder(KdTree<D, A>* tree) : tree_(tree) {}

  // Reserves room for n points; the caller fills rec(i) for i in [0, n).
  void init(int64_t n, int64_t leaf_size) {
    tree_->n = n;
    tree_->leaf_size = std::max<int64_t>(1, leaf_size);
    recs_.resize(n);
    tmp_.resize(n);
    tree_->nodes.clear();
    task_nodes_.clear();
    task_root_.clear();
  }

  Rec& rec(int64_t i) { return recs_[i]; }

  // Splits nodes larger than `cut` points (serially) and appends the subtrees
  // left over as tasks.
  void split_top(int64_t cut, std::vector<Task>* tasks) {
    if (tree_->n == 0) return;
    std::vector<KdNode<D, A>>& nodes = tree_->nodes;
    nodes.push_back(measure(0, static_cast<int32_t>(tree_->n)));
    top_rec(0, cut, tasks);
  }

  void build_task(const Task& t) {
    std::vector<KdNode<D, A>>& local = task_nodes_[t.slot];
    local.clear();
    local.push_back(tree_->nodes[t.node]);
    build_rec(local, 0);
  }

  void finish() {
    splice();
    std::vector<Rec>().swap(tmp_);  // before the coordinates are laid out: lower peak memory
    const int64_t n = tree_->n;
    tree_->stride = n + KdTree<D, A>::kPad;
    tree_->xyz.assign(tree_->stride * D, A(0));
    tree_->index.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      for (int d = 0; d < D; ++d) tree_->xyz[d * tree_->stride + i] = recs_[i].c[d];
      tree_->index[i] = recs_[i].idx;
    }
    std::vector<Rec>().swap(recs_);
    std::vector<Rec>().swap(tmp_);
    tree_->leaves.clear();
    if (n == 0) return;
    std::vector<KdNode<D, A>>& nodes = tree_->nodes;
    nodes[0].parent = -1;
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (nodes[id].leaf()) {
        tree_->leaves.push_back(static_cast<int32_t>(id));
      } else {
        nodes[nodes[id].left].parent = static_cast<int32_t>(id);
        nodes[nodes[id].right].parent = static_cast<int32_t>(id);
      }
    }
    std::sort(tree_->leaves.begin(), tree_->leaves.end(),
              [&](int32_t x, int32_t y) { return nodes[x].begin < nodes[y].begin; });
  }

 private:
  // Tight box and lowest index of recs_[b, e).
  KdNode<D, A> measure(int32_t b, int32_t e) const {
    KdNode<D, A> nd;
    for (int d = 0; d < D; ++d) nd.lo[d] = nd.hi[d] = recs_[b].c[d];
    int32_t mi = recs_[b].idx;
    for (int32_t i = b + 1; i < e; ++i) {
      const Rec& r = recs_[i];
      for (int d = 0; d < D; ++d) {
        nd.lo[d] = r.c[d] < nd.lo[d] ? r.c[d] : nd.lo[d];
        nd.hi[d] = r.c[d] > nd.hi[d] ? r.c[d] : nd.hi[d];
      }
      mi = r.idx < mi ? r.idx : mi;
    }
    nd.begin = b;
    nd.end = e;
    nd.left = nd.right = -1;
    nd.min_idx = mi;
    nd.parent = -1;
    return nd;
  }

  // Partitions the node's range at its median along the widest side; returns
  // the split position b + n/2.
  int32_t partition(const KdNode<D, A>& nd) {
    const int32_t b = nd.begin, e = nd.end;
    int dim = 0;
    A ext = nd.hi[0] - nd.lo[0];
    for (int d = 1; d < D; ++d) {
      if (nd.hi[d] - nd.lo[d] > ext) {
        ext = nd.hi[d] - nd.lo[d];
        dim = d;
      }
    }
    const int32_t mid = b + (e - b) / 2;
    if (ext > A(0)) select(b, e, mid, dim);  // else all points are equal
    return mid;
  }

  // Quickselect: afterwards recs_[b, t) <= recs_[t] <= recs_[t + 1, e) along
  // dim.  Pivots are sample quantiles aimed at t and each round is one
  // branch-free partition pass, so a median costs about two passes; the last
  // few dozen elements go to nth_element.
  void select(int32_t b, int32_t e, int32_t t, int dim) {
    int32_t lo = b, hi = e;
    while (hi - lo > 48) {
      const int32_t n = hi - lo;
      A sample[31];
      for (int32_t s = 0; s < 31; ++s) {
        sample[s] = recs_[lo + static_cast<int32_t>((static_cast<int64_t>(s) * n + n / 2) / 31)].c[dim];
      }
      const int32_t want = static_cast<int32_t>((static_cast<int64_t>(t - lo) * 31) / n);
      std::nth_element(sample, sample + want, sample + 31);
      const A pivot = sample[want];
      const int32_t m = split_by(lo, hi, dim, pivot, false);  // [lo, m) < pivot
      if (t < m) {
        hi = m;
        continue;
      }
      const int32_t m2 = split_by(m, hi, dim, pivot, true);  // [m, m2) == pivot
      if (t < m2) return;
      if (m == lo && m2 == hi) return;  // everything equals the pivot
      lo = m2;
    }
    std::nth_element(recs_.begin() + lo, recs_.begin() + t, recs_.begin() + hi,
                     [dim](const Rec& x, const Rec& y) { return x.c[dim] < y.c[dim]; });
  }

  // Branch-free stable partition of [b, e): c[dim] < pivot (or <= pivot)
  // first; returns the boundary.
  int32_t split_by(int32_t b, int32_t e, int dim, A pivot, bool or_equal) {
    int32_t l = 0;
    int32_t r = e - b - 1;
    Rec* out = tmp_.data() + b;
    for (int32_t i = b; i < e; ++i) {
      const Rec& x = recs_[i];
      const bool go_left = or_equal ? x.c[dim] <= pivot : x.c[dim] < pivot;
      out[l] = x;
      out[r] = x;
      l += go_left;
      r -= !go_left;
    }
    if (l == 0 || l == e - b) return b + l;
    // The right part was written back to front: restore its order so that the
    // layout does not depend on anything but the input.
    std::reverse(out + l, out + (e - b));
    std::copy(out, out + (e - b), recs_.begin() + b);
    return b + l;
  }

  void top_rec(int32_t id, int64_t cut, std::vector<Task>* tasks) {
    std::vector<KdNode<D, A>>& nodes = tree_->nodes;
    const int32_t b = nodes[id].begin, e = nodes[id].end;
    if (e - b <= cut || e - b <= tree_->leaf_size) {
      const int32_t slot = static_cast<int32_t>(task_nodes_.size());
      task_nodes_.emplace_back();
      task_root_.push_back(id);
      tasks->push_back({id, b, e, slot});
      return;
    }
    const int32_t mid = partition(nodes[id]);
    const int32_t l = static_cast<int32_t>(nodes.size());
    nodes.push_back(measure(b, mid));
    nodes.push_back(measure(mid, e));
    nodes[id].left = l;
    nodes[id].right = l + 1;
    top_rec(l, cut, tasks);
    top_rec(l + 1, cut, tasks);
  }

  // Builds the subtree under local[id] (ids local to the task).
  void build_rec(std::vector<KdNode<D, A>>& local, int32_t id) {
    const int32_t b = local[id].begin, e = local[id].end;
    if (e - b <= tree_->leaf_size) return;
    const int32_t mid = partition(local[id]);
    const int32_t l = static_cast<int32_t>(local.size());
    local.push_back(measure(b, mid));
    local.push_back(measure(mid, e));
    local[id].left = l;
    local[id].right = l + 1;
    build_rec(local, l);
    build_rec(local, l + 1);
  }

  // Moves every task's nodes into the tree: the task root replaces its
  // placeholder, the rest is appended with child links shifted.
  void splice() {
    std::vector<KdNode<D, A>>& nodes = tree_->nodes;
    for (size_t slot = 0; slot < task_nodes_.size(); ++slot) {
      std::vector<KdNode<D, A>>& local = task_nodes_[slot];
      if (local.empty()) continue;
      const int32_t base = static_cast<int32_t>(nodes.size()) - 1;  // local id 1 -> base + 1
      auto fix = [base](KdNode<D, A> nd) {
        if (!nd.leaf()) {
          nd.left += base;
          nd.right += base;
        }
        return nd;
      };
      nodes[task_root_[slot]] = fix(local[0]);
      for (size_t id = 1; id < local.size(); ++id) nodes.push_back(fix(local[id]));
      std::vector<KdNode<D, A>>().swap(local);
    }
    task_nodes_.clear();
    task_root_.clear();
  }

  KdTree<D, A>* tree_;
  std::vector<Rec> recs_, tmp_;
  std::vector<std::vector<KdNode<D, A>>> task_nodes_;
  std::vector<int32_t> task_root_;  // placeholder node of each task
};

// True when every coordinate is a finite number.
template <int D, typename A>
inline bool all_finite(const A* c) {
  bool ok = true;
  for (int d = 0; d < D; ++d) ok = ok && std::isfinite(c[d]);
  return ok;
}

}  // namespace cpu
}  // namespace pcgeom

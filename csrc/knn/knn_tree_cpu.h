// KD-tree KNN search for low dimensions (D <= 8), CPU only.
//
// Queries are searched in groups of nearby queries (the points of one leaf for
// a self query, or the queries that share a home leaf), see GroupSearch.
//
// Only finite points and finite queries come here (no NaN distance can occur),
// so keys are FiniteKey (one integer compare for float32).  Pruning is
// conservative (shrink_bound) and strict, so the answer equals brute force bit
// for bit, ties included: a box is skipped only if every point in it has a
// computed distance larger than the current k-th one, or equal with a higher
// index.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/kdtree_cpu.h"
#include "common/pcgeom_common.h"
#include "common/simd_cpu.h"
#include "common/topk_cpu.h"

namespace pcgeom {
namespace cpu {

constexpr int64_t kTreeLeafSize = 32;
// Largest group of queries searched together.
constexpr int64_t kMaxGroup = 32;

// The current acceptance limit of a scan: nothing above it can enter.
template <typename A>
inline A scan_limit(const FiniteTopK<A>& top, bool use_radius, A r2) {
  A w = top.full() ? top.worst_dist() : pos_inf<A>();
  if (use_radius && r2 < w) w = r2;
  return w;
}

// Distances from q to tree positions [b, e), offered to top.  The coordinate
// arrays are padded (KdTree::kPad), so whole vectors may be read past e.
template <int D, typename A>
inline void scan_range(const A* q, const A* const* X, const int32_t* index, int64_t b, int64_t e,
                       FiniteTopK<A>& top, bool use_radius, A r2) {
  using F = FiniteKey<A>;
  A w = scan_limit(top, use_radius, r2);
  for (int64_t j = b; j < e; ++j) {
    A acc = A(0);
    for (int d = 0; d < D; ++d) {
      const A diff = q[d] - X[d][j];
      acc += diff * diff;
    }
    if (acc > w) continue;
    top.push(F::make(acc, index[j]));
    w = scan_limit(top, use_radius, r2);
  }
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
// float32: four points per step; a movemask selects the few that can enter.
// The per-lane arithmetic is the shared formula (coordinate order, no FMA).
template <int D>
inline void scan_range_f32(const float* q, const float* const* X, const int32_t* index, int64_t b,
                           int64_t e, FiniteTopK<float>& top, bool use_radius, float r2) {
  using F = FiniteKey<float>;
  __m128 qv[D];
  for (int d = 0; d < D; ++d) qv[d] = _mm_set1_ps(q[d]);
  float w = scan_limit(top, use_radius, r2);
  for (int64_t s = b; s < e; s += 4) {
    __m128 diff = _mm_sub_ps(qv[0], _mm_loadu_ps(X[0] + s));
    __m128 acc = _mm_mul_ps(diff, diff);
    for (int d = 1; d < D; ++d) {
      diff = _mm_sub_ps(qv[d], _mm_loadu_ps(X[d] + s));
      acc = _mm_add_ps(acc, _mm_mul_ps(diff, diff));
    }
    int m = _mm_movemask_ps(_mm_cmple_ps(acc, _mm_set1_ps(w)));
    if (e - s < 4) m &= (1 << (e - s)) - 1;
    if (m == 0) continue;
    alignas(16) float dv[4];
    _mm_store_ps(dv, acc);
    while (m) {
      const int l = __builtin_ctz(static_cast<unsigned>(m));
      m &= m - 1;
      if (!(dv[l] <= w)) continue;
      top.push(F::make(dv[l], index[s + l]));
      w = scan_limit(top, use_radius, r2);
    }
  }
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define PCGEOM_TREE_AVX2 1
#include <immintrin.h>

// Sorted-list insertion of x (known to rank before the current worst key),
// without a data-dependent branch: its position is the number of keys below
// it (counted four at a time; the packed keys have a clear top bit, so a
// signed compare orders them), then every block of four is rebuilt by a
// blend of itself, its neighbour one slot down and x, from the top block
// down.  The element-by-element shift it replaces ends in a mispredicted
// branch per insertion.  Reads up to four slots before keys[0] and rewrites
// up to three of them with their own values: the caller keeps them.
__attribute__((target("avx2"), always_inline)) inline void insert_sorted_avx2(uint64_t* keys,
                                                                              int64_t k,
                                                                              uint64_t x) {
  const __m256i xv = _mm256_set1_epi64x(static_cast<long long>(x));
  __m256i cnt = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 4 <= k; j += 4) {
    const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + j));
    cnt = _mm256_sub_epi64(cnt, _mm256_cmpgt_epi64(xv, kv));
  }
  alignas(32) int64_t c4[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(c4), cnt);
  int64_t pos = c4[0] + c4[1] + c4[2] + c4[3];
  for (; j < k; ++j) pos += keys[j] < x;
  const __m256i pv = _mm256_set1_epi64x(pos);
  for (int64_t b = k - 4; b > -4; b -= 4) {
    const __m256i iv = _mm256_add_epi64(_mm256_set1_epi64x(b), _mm256_set_epi64x(3, 2, 1, 0));
    const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + b));
    const __m256i prev = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + b - 1));
    __m256i r = _mm256_blendv_epi8(prev, cur, _mm256_cmpgt_epi64(pv, iv));  // below pos: stays
    r = _mm256_blendv_epi8(r, xv, _mm256_cmpeq_epi64(iv, pv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + b), r);
  }
}

// Orders a full list of k <= kSortedListMaxK keys by rank counting (k^2
// vector compares, no branch), where std::sort of a few dozen keys pays a
// mispredicted branch per comparison.
__attribute__((target("avx2"), always_inline)) inline void settle_sorted_avx2(uint64_t* keys,
                                                                              int64_t k) {
  uint64_t tmp[kSortedListMaxK];
  for (int64_t i = 0; i < k; ++i) {
    const __m256i xv = _mm256_set1_epi64x(static_cast<long long>(keys[i]));
    __m256i cnt = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 4 <= k; j += 4) {
      const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + j));
      cnt = _mm256_sub_epi64(cnt, _mm256_cmpgt_epi64(xv, kv));
    }
    alignas(32) int64_t c4[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(c4), cnt);
    int64_t r = c4[0] + c4[1] + c4[2] + c4[3];
    for (; j < k; ++j) r += keys[j] < keys[i];
    tmp[r] = keys[i];  // keys are distinct (distinct indices): ranks are a permutation
  }
  std::memcpy(keys, tmp, static_cast<size_t>(k) * sizeof(uint64_t));
}

// scan_range_f32 with eight points per step, for CPUs with AVX2 (picked at
// run time).  Same per-lane arithmetic: the shared formula, no FMA.
template <int D>
__attribute__((target("avx2"))) void scan_range_f32_avx2(const float* q, const float* const* X,
                                                         const int32_t* index, int64_t b,
                                                         int64_t e, FiniteTopK<float>& top,
                                                         bool use_radius, float r2) {
  using F = FiniteKey<float>;
  __m256 qv[D];
  for (int d = 0; d < D; ++d) qv[d] = _mm256_set1_ps(q[d]);
  float w = scan_limit(top, use_radius, r2);
  for (int64_t s = b; s < e; s += 8) {
    __m256 diff = _mm256_sub_ps(qv[0], _mm256_loadu_ps(X[0] + s));
    __m256 acc = _mm256_mul_ps(diff, diff);
    for (int d = 1; d < D; ++d) {
      diff = _mm256_sub_ps(qv[d], _mm256_loadu_ps(X[d] + s));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(diff, diff));
    }
    int m = _mm256_movemask_ps(_mm256_cmp_ps(acc, _mm256_set1_ps(w), _CMP_LE_OQ));
    if (e - s < 8) m &= (1 << (e - s)) - 1;
    if (m == 0) continue;
    alignas(32) float dv[8];
    _mm256_store_ps(dv, acc);
    while (m) {
      const int l = __builtin_ctz(static_cast<unsigned>(m));
      m &= m - 1;
      if (!(dv[l] <= w)) continue;
      const uint64_t key = F::make(dv[l], index[s + l]);
      if (top.heap) {
        top.push(key);
      } else if (top.count < top.k) {
        top.keys[top.count++] = key;
        if (top.count == top.k) settle_sorted_avx2(top.keys, top.k);
      } else if (key < top.keys[top.k - 1]) {
        insert_sorted_avx2(top.keys, top.k, key);
      }
      w = scan_limit(top, use_radius, r2);
    }
  }
}
#endif

template <>
inline void scan_range<1, float>(const float* q, const float* const* X, const int32_t* index,
                                 int64_t b, int64_t e, FiniteTopK<float>& top, bool use_radius,
                                 float r2) {
#if defined(PCGEOM_TREE_AVX2)
  if (use_avx2()) return scan_range_f32_avx2<1>(q, X, index, b, e, top, use_radius, r2);
#endif
  scan_range_f32<1>(q, X, index, b, e, top, use_radius, r2);
}
template <>
inline void scan_range<2, float>(const float* q, const float* const* X, const int32_t* index,
                                 int64_t b, int64_t e, FiniteTopK<float>& top, bool use_radius,
                                 float r2) {
#if defined(PCGEOM_TREE_AVX2)
  if (use_avx2()) return scan_range_f32_avx2<2>(q, X, index, b, e, top, use_radius, r2);
#endif
  scan_range_f32<2>(q, X, index, b, e, top, use_radius, r2);
}
template <>
inline void scan_range<3, float>(const float* q, const float* const* X, const int32_t* index,
                                 int64_t b, int64_t e, FiniteTopK<float>& top, bool use_radius,
                                 float r2) {
#if defined(PCGEOM_TREE_AVX2)
  if (use_avx2()) return scan_range_f32_avx2<3>(q, X, index, b, e, top, use_radius, r2);
#endif
  scan_range_f32<3>(q, X, index, b, e, top, use_radius, r2);
}
template <>
inline void scan_range<4, float>(const float* q, const float* const* X, const int32_t* index,
                                 int64_t b, int64_t e, FiniteTopK<float>& top, bool use_radius,
                                 float r2) {
#if defined(PCGEOM_TREE_AVX2)
  if (use_avx2()) return scan_range_f32_avx2<4>(q, X, index, b, e, top, use_radius, r2);
#endif
  scan_range_f32<4>(q, X, index, b, e, top, use_radius, r2);
}
#endif

// "Every point in a box with bound lb and lowest index min_idx ranks after the
// current k-th key (or lies outside the radius)."
template <typename A>
inline bool box_pruned(A lb, int32_t min_idx, const FiniteTopK<A>& top, bool use_radius, A r2) {
  const A s = shrink_bound(lb);
  if (use_radius && s > r2) return true;
  if (!top.full()) return false;
  const A w = top.worst_dist();
  return s > w || (s >= w && static_cast<int64_t>(min_idx) > top.worst_idx());
}

// The leaf a query starts from: descend towards the nearer child box.
template <int D, typename A>
inline int32_t home_leaf(const KdTree<D, A>& t, const A* q) {
  const KdNode<D, A>* nodes = t.nodes.data();
  int32_t id = 0;
  while (!nodes[id].leaf()) {
    const int32_t l = nodes[id].left, r = nodes[id].right;
    const A dl = box_dist2<D>(q, nodes[l].lo, nodes[l].hi);
    const A dr = box_dist2<D>(q, nodes[r].lo, nodes[r].hi);
    id = dr < dl ? r : l;
  }
  return id;
}


// Squared gap between two boxes: a lower bound for any pair of points in them.
template <int D, typename A>
inline A box_box_dist2(const A* lo1, const A* hi1, const A* lo2, const A* hi2) {
  A s = A(0);
  for (int d = 0; d < D; ++d) {
    const A a = lo1[d] - hi2[d];
    const A b = lo2[d] - hi1[d];
    const A g = a > b ? a : b;
    const A gp = g > A(0) ? g : A(0);
    s += gp * gp;
  }
  return s;
}

// max(x, 0) without a branch, exactly: x + |x| is 2x or 0 with no rounding.
template <typename A>
inline A pos_part(A x) {
  return (x + std::fabs(x)) * A(0.5);
}

// Searches a group of nearby queries together (the points of one leaf for a
// self query, or the queries sharing a home leaf): one best-first traversal
// by box-to-box distance from the group's box serves every query.  For each
// leaf reached, the bounds of all queries to the leaf's box are computed at
// once (vectorised over the queries) and only the queries that cannot prune
// it scan it.  The traversal stops when the nearest remaining box is farther
// than the worst k-th distance of the group (tau).  Keep one object per
// thread (it owns scratch buffers).
template <int D, typename A>
class GroupSearch {
 public:
  GroupSearch(int64_t K, bool use_radius, A r2) : use_radius_(use_radius), r2_(r2), K_(K) {}

  // qa: g queries (g x D, row-major) inside the box [glo, ghi].
  void run(const KdTree<D, A>& t, const A* qa, int64_t g, FiniteTopK<A>* tops, const A* glo,
           const A* ghi) {
    const KdNode<D, A>* nodes = t.nodes.data();
    const int32_t* index = t.index.data();
    const A* X[D];
    for (int d = 0; d < D; ++d) X[d] = t.coord(d);
    // Queries per dimension (padded to whole vectors) and their limits.
    const int64_t gp = (g + 3) / 4 * 4;
    qsoa_.assign(gp * D, A(0));
    thr_.assign(gp, -pos_inf<A>());  // padding lanes never scan
    for (int64_t i = 0; i < g; ++i) {
      for (int d = 0; d < D; ++d) qsoa_[d * gp + i] = qa[i * D + d];
      thr_[i] = scan_limit(tops[i], use_radius_, r2_);
    }
    mask_.resize(gp);
    active_.resize(gp);

    auto cmp = [](const Entry& a, const Entry& b) { return a.lb > b.lb; };  // min-heap
    heap_.clear();
    heap_.push_back({box_box_dist2<D>(glo, ghi, nodes[0].lo, nodes[0].hi), 0});
    A tau = max_limit(g);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), cmp);
      const Entry en = heap_.back();
      heap_.pop_back();
      const A s = shrink_bound(en.lb);
      if (s > tau) break;  // every remaining box is at least this far
      const KdNode<D, A>& nd = nodes[en.node];
      if (!nd.leaf()) {
        const int32_t kids[2] = {nd.left, nd.right};
        for (const int32_t c : kids) {
          const A lb = box_box_dist2<D>(glo, ghi, nodes[c].lo, nodes[c].hi);
          if (group_pruned(lb, nodes[c].min_idx, tau, g, tops)) continue;
          heap_.push_back({lb, c});
          std::push_heap(heap_.begin(), heap_.end(), cmp);
        }
        continue;
      }
      if (group_pruned(en.lb, nd.min_idx, tau, g, tops)) continue;
      leaf_mask(nd.lo, nd.hi, gp);
      // The queries to scan, listed without a branch per query.
      int64_t na = 0;
      for (int64_t i = 0; i < g; ++i) {
        active_[na] = static_cast<int32_t>(i);
        na += mask_[i];
      }
      for (int64_t a = 0; a < na; ++a) {
        const int64_t i = active_[a];
        scan_range<D, A>(qa + i * D, X, index, nd.begin, nd.end, tops[i], use_radius_, r2_);
        thr_[i] = scan_limit(tops[i], use_radius_, r2_);
      }
      tau = max_limit(g);
    }
  }

 private:
  struct Entry {
    A lb;
    int32_t node;
  };

  A max_limit(int64_t g) const {
    A m = -pos_inf<A>();
    for (int64_t i = 0; i < g; ++i) m = thr_[i] > m ? thr_[i] : m;
    return m;
  }

  // Skips a box when its bound is strictly beyond tau, or exactly at tau
  // while every query is full and its indices all lose the tie (duplicates).
  bool group_pruned(A lb, int32_t min_idx, A tau, int64_t g, const FiniteTopK<A>* tops) const {
    const A s = shrink_bound(lb);
    if (s > tau) return true;
    if (s < tau) return false;
    for (int64_t i = 0; i < g; ++i) {
      if (!box_pruned(lb, min_idx, tops[i], use_radius_, r2_)) return false;
    }
    return true;
  }

  // mask_[i] = "query i may find a point in the box": shrunk bound <= limit.
  void leaf_mask(const A* lo, const A* hi, int64_t gp) {
    const A* __restrict q = qsoa_.data();
    const A* __restrict thr = thr_.data();
    uint8_t* __restrict mk = mask_.data();
    for (int64_t i = 0; i < gp; ++i) {
      A lb = A(0);
      for (int d = 0; d < D; ++d) {
        const A qd = q[d * gp + i];
        const A gap = pos_part(lo[d] - qd) + pos_part(qd - hi[d]);
        lb += gap * gap;
      }
      mk[i] = shrink_bound(lb) <= thr[i];
    }
  }

  bool use_radius_;
  A r2_;
  int64_t K_;
  std::vector<Entry> heap_;
  std::vector<A> qsoa_, thr_;
  std::vector<uint8_t> mask_;
  std::vector<int32_t> active_;
};

}  // namespace cpu
}  // namespace pcgeom

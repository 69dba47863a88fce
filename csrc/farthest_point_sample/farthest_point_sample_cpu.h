// Exact greedy farthest point sampling on the CPU: the vanilla O(S*N) loop and
// a bucket (KD-tree) variant that skips regions a new sample cannot affect.
// Both follow the rules of farthest_point_sample_common.h and return the
// reference's index sequence.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

#include "common/kdtree_cpu.h"
#include "common/pcgeom_common.h"
#include "common/simd_cpu.h"
#include "farthest_point_sample/farthest_point_sample_common.h"

namespace pcgeom {
namespace cpu {

// ---------------------------------------------------------------------------
// Generic vanilla loop (any D, any values): the rules of the common header,
// applied literally.  Used for clouds with NaN/inf coordinates.
// p holds the input dtype T (float16/bfloat16 are converted on the fly, so no
// float32 copy of the cloud is made); A is the accumulation type.
template <typename T, typename A>
void fps_generic(const T* p, int64_t D, int64_t L, int64_t S, int64_t start, int64_t* out) {
  std::vector<A> mind(L, pos_inf<A>());
  const int64_t take = std::min(S, L);
  int64_t cur = start;
  for (int64_t s = 0; s < take; ++s) {
    out[s] = cur;
    if (s + 1 == take) break;
    mind[cur] = fps_chosen<A>();
    const T* pc = p + cur * D;
    A best_key = fps_chosen<A>();
    int64_t best = -1;
    for (int64_t j = 0; j < L; ++j) {
      const A m = fps_update(mind[j], sq_dist<T, A>(p + j * D, pc, D));
      mind[j] = m;
      const A key = fps_key(m);
      if (best < 0 || key > best_key) {
        best_key = key;
        best = j;
      }
    }
    cur = best;
  }
}

// ---------------------------------------------------------------------------
// Vanilla loop for finite clouds.  With no NaN possible, fps_update is
// min(mind, d) (a chosen point's -inf stays) and the key is mind itself, so
// each step is one vectorisable pass: update the minimum distances block by
// block, keep each block's maximum, then find the first index holding the
// overall maximum (= the lowest index among ties).
template <typename A>
class FpsVanilla {
 public:
  static constexpr int64_t kBlock = 256;

  // Working memory per point: D coordinates and one minimum distance.
  static constexpr int64_t bytes_per_point(int64_t D) { return (D + 1) * int64_t(sizeof(A)); }

  // p: L finite points (L x D, row-major) of the input dtype T.
  template <typename T>
  void run(const T* p, int64_t D, int64_t L, int64_t S, int64_t start, int64_t* out) {
    const int64_t Lp = (L + 7) / 8 * 8;  // whole AVX2 vectors
    xyz_.assign(D * Lp, A(0));
    for (int64_t j = 0; j < L; ++j) {
      for (int64_t d = 0; d < D; ++d) xyz_[d * Lp + j] = static_cast<A>(p[j * D + d]);
    }
    // Padding lanes hold -inf: never the maximum, never updated upwards.
    mind_.assign(Lp, fps_chosen<A>());
    std::fill(mind_.begin(), mind_.begin() + L, pos_inf<A>());
    const int64_t nb = (L + kBlock - 1) / kBlock;
    bmax_.resize(nb);
    const int64_t take = std::min(S, L);
    int64_t cur = start;
    std::vector<A> c(D);
    for (int64_t s = 0; s < take; ++s) {
      out[s] = cur;
      if (s + 1 == take) break;
      mind_[cur] = fps_chosen<A>();
      for (int64_t d = 0; d < D; ++d) c[d] = xyz_[d * Lp + cur];
      for (int64_t blk = 0; blk < nb; ++blk) {
        const int64_t b = blk * kBlock;
        const int64_t e = std::min(Lp, b + kBlock);
        bmax_[blk] = update_block(c.data(), D, Lp, b, e);
      }
      int64_t bb = 0;
      for (int64_t blk = 1; blk < nb; ++blk) {
        if (bmax_[blk] > bmax_[bb]) bb = blk;
      }
      cur = first_equal(mind_.data(), bb * kBlock, bmax_[bb]);
    }
  }

 private:
  // Updates mind over [b, e) (multiples of 8) and returns the block maximum.
  A update_block(const A* c, int64_t D, int64_t Lp, int64_t b, int64_t e);

  // The first position from j whose value is v (one exists).
  static int64_t first_equal(const A* m, int64_t j, A v) {
    while (m[j] != v) ++j;
    return j;
  }

  std::vector<A> xyz_, mind_, bmax_;
};

template <typename A>
A FpsVanilla<A>::update_block(const A* c, int64_t D, int64_t Lp, int64_t b, int64_t e) {
  A mx[4] = {fps_chosen<A>(), fps_chosen<A>(), fps_chosen<A>(), fps_chosen<A>()};
  for (int64_t j = b; j < e; j += 4) {
    for (int l = 0; l < 4; ++l) {
      A acc = A(0);
      for (int64_t d = 0; d < D; ++d) {
        const A diff = xyz_[d * Lp + j + l] - c[d];
        acc += diff * diff;
      }
      const A m = acc < mind_[j + l] ? acc : mind_[j + l];
      mind_[j + l] = m;
      mx[l] = m > mx[l] ? m : mx[l];
    }
  }
  A r = mx[0];
  for (int l = 1; l < 4; ++l) r = mx[l] > r ? mx[l] : r;
  return r;
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
// Four at a time: the scalar search after every sample was a quarter of the
// loop on Point-MAE's 1024-point clouds.
template <>
inline int64_t FpsVanilla<float>::first_equal(const float* m, int64_t j, float v) {
  const __m128 vv = _mm_set1_ps(v);
  for (;; j += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(m + j), vv));
    if (hit) return j + __builtin_ctz(static_cast<unsigned>(hit));
  }
}

#if defined(__x86_64__) || defined(__i386__)
// update_block for float32 with eight lanes, for CPUs with AVX2 (picked at
// run time): the same per-lane formula and minimum rule.
__attribute__((target("avx2"))) inline float fps_update_block_avx2(const float* X, float* mind,
                                                                  const float* c, int64_t D,
                                                                  int64_t Lp, int64_t b,
                                                                  int64_t e) {
  __m256 mx = _mm256_set1_ps(fps_chosen<float>());
  if (D == 3) {
    const __m256 c0 = _mm256_set1_ps(c[0]), c1 = _mm256_set1_ps(c[1]), c2 = _mm256_set1_ps(c[2]);
    for (int64_t j = b; j < e; j += 8) {
      __m256 diff = _mm256_sub_ps(_mm256_loadu_ps(X + j), c0);
      __m256 acc = _mm256_mul_ps(diff, diff);
      diff = _mm256_sub_ps(_mm256_loadu_ps(X + Lp + j), c1);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(diff, diff));
      diff = _mm256_sub_ps(_mm256_loadu_ps(X + 2 * Lp + j), c2);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(diff, diff));
      const __m256 m = _mm256_min_ps(acc, _mm256_loadu_ps(mind + j));
      _mm256_storeu_ps(mind + j, m);
      mx = _mm256_max_ps(m, mx);
    }
  } else {
    for (int64_t j = b; j < e; j += 8) {
      __m256 diff = _mm256_sub_ps(_mm256_loadu_ps(X + j), _mm256_set1_ps(c[0]));
      __m256 acc = _mm256_mul_ps(diff, diff);
      for (int64_t d = 1; d < D; ++d) {
        diff = _mm256_sub_ps(_mm256_loadu_ps(X + d * Lp + j), _mm256_set1_ps(c[d]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(diff, diff));
      }
      const __m256 m = _mm256_min_ps(acc, _mm256_loadu_ps(mind + j));
      _mm256_storeu_ps(mind + j, m);
      mx = _mm256_max_ps(m, mx);
    }
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, mx);
  float r = v[0];
  for (int l = 1; l < 8; ++l) r = v[l] > r ? v[l] : r;
  return r;
}
#endif

template <>
inline float FpsVanilla<float>::update_block(const float* c, int64_t D, int64_t Lp, int64_t b,
                                             int64_t e) {
  const float* X = xyz_.data();
  float* mind = mind_.data();
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2()) return fps_update_block_avx2(X, mind, c, D, Lp, b, e);
#endif
  __m128 mx = _mm_set1_ps(fps_chosen<float>());
  if (D == 3) {
    const __m128 c0 = _mm_set1_ps(c[0]), c1 = _mm_set1_ps(c[1]), c2 = _mm_set1_ps(c[2]);
    for (int64_t j = b; j < e; j += 4) {
      __m128 diff = _mm_sub_ps(_mm_loadu_ps(X + j), c0);
      __m128 acc = _mm_mul_ps(diff, diff);
      diff = _mm_sub_ps(_mm_loadu_ps(X + Lp + j), c1);
      acc = _mm_add_ps(acc, _mm_mul_ps(diff, diff));
      diff = _mm_sub_ps(_mm_loadu_ps(X + 2 * Lp + j), c2);
      acc = _mm_add_ps(acc, _mm_mul_ps(diff, diff));
      // minps(a, b) is exactly "a < b ? a : b", the update rule.
      const __m128 m = _mm_min_ps(acc, _mm_loadu_ps(mind + j));
      _mm_storeu_ps(mind + j, m);
      mx = _mm_max_ps(m, mx);
    }
  } else {
    for (int64_t j = b; j < e; j += 4) {
      __m128 diff = _mm_sub_ps(_mm_loadu_ps(X + j), _mm_set1_ps(c[0]));
      __m128 acc = _mm_mul_ps(diff, diff);
      for (int64_t d = 1; d < D; ++d) {
        diff = _mm_sub_ps(_mm_loadu_ps(X + d * Lp + j), _mm_set1_ps(c[d]));
        acc = _mm_add_ps(acc, _mm_mul_ps(diff, diff));
      }
      const __m128 m = _mm_min_ps(acc, _mm_loadu_ps(mind + j));
      _mm_storeu_ps(mind + j, m);
      mx = _mm_max_ps(m, mx);
    }
  }
  alignas(16) float v[4];
  _mm_store_ps(v, mx);
  float r = v[0];
  for (int l = 1; l < 4; ++l) r = v[l] > r ? v[l] : r;
  return r;
}
#endif

// ---------------------------------------------------------------------------
// Bucket FPS (the QuickFPS idea) for finite low-dimensional clouds.
//
// The points live in a KD-tree whose nodes know their tight box and the
// largest `mind` below them (with the lowest original index holding it).  A
// new sample c can lower a point's mind only if their distance is smaller than
// that mind; so a subtree whose box is at least its largest mind away from c
// is left untouched.  After the first few samples almost every subtree is
// skipped, and the next sample is read at the root.  The bound is the
// conservative shrink_bound of kdtree_cpu.h, so skipping never changes a
// value, and ties keep the lowest original index at every merge: the sequence
// is exactly the vanilla one.
template <int D, typename A>
class FpsBucket {
 public:
  static constexpr int64_t kLeaf = 256;

  // Peak working memory per point: the builder's two record arrays, then the
  // tree's coordinates, index, position map and minimum distances (nodes are
  // about 1/64 of that).
  static constexpr int64_t bytes_per_point() {
    return 2 * int64_t(sizeof(typename KdBuilder<D, A>::Rec)) + (D + 1) * int64_t(sizeof(A)) + 8;
  }

  // p: L finite points (L x D, row-major) of the input dtype T.
  template <typename T>
  void run(const T* p, int64_t L, int64_t S, int64_t start, int64_t* out) {
    KdBuilder<D, A> bl(&tree_);
    bl.init(L, kLeaf);
    for (int64_t j = 0; j < L; ++j) {
      auto& r = bl.rec(j);
      for (int d = 0; d < D; ++d) r.c[d] = static_cast<A>(p[j * D + d]);
      r.idx = static_cast<int32_t>(j);
    }
    std::vector<typename KdBuilder<D, A>::Task> tasks;
    bl.split_top(int64_t(1) << 62, &tasks);
    for (const auto& t : tasks) bl.build_task(t);
    bl.finish();
    for (int d = 0; d < D; ++d) X_[d] = tree_.coord(d);
    const int64_t nn = static_cast<int64_t>(tree_.nodes.size());
    pos_.resize(L);
    for (int64_t i = 0; i < L; ++i) pos_[tree_.index[i]] = static_cast<int32_t>(i);
    // Padded like the coordinates, with -inf (never a maximum).
    mind_.assign(L + KdTree<D, A>::kPad, fps_chosen<A>());
    std::fill(mind_.begin(), mind_.begin() + L, pos_inf<A>());
    nmax_.assign(nn, pos_inf<A>());
    narg_.resize(nn);
    for (int64_t i = 0; i < nn; ++i) narg_[i] = tree_.nodes[i].min_idx;

    const int64_t take = std::min(S, L);
    int64_t cur = start;
    for (int64_t s = 0; s < take; ++s) {
      out[s] = cur;
      if (s + 1 == take) break;
      const int32_t pc = pos_[cur];
      mind_[pc] = fps_chosen<A>();
      A c[D];
      for (int d = 0; d < D; ++d) c[d] = X_[d][pc];
      update(0, c, pc);
      cur = narg_[0];
    }
  }

 private:
  void update(int32_t id, const A* c, int32_t pc) {
    const KdNode<D, A>& nd = tree_.nodes[id];
    const bool on_path = nd.begin <= pc && pc < nd.end;  // holds the new sample
    if (!on_path && !(shrink_bound(box_dist2<D>(c, nd.lo, nd.hi)) < nmax_[id])) return;
    if (nd.leaf()) {
      update_leaf(id, nd.begin, nd.end, c);
      return;
    }
    const int32_t l = nd.left, r = nd.right;
    update(l, c, pc);
    update(r, c, pc);
    const bool take_l = nmax_[l] > nmax_[r] || (nmax_[l] == nmax_[r] && narg_[l] < narg_[r]);
    nmax_[id] = take_l ? nmax_[l] : nmax_[r];
    narg_[id] = take_l ? narg_[l] : narg_[r];
  }

  void update_leaf(int32_t id, int32_t b, int32_t e, const A* c);

  KdTree<D, A> tree_;
  const A* X_[D];
  std::vector<int32_t> pos_;   // tree position of each original index
  std::vector<A> mind_;        // per tree position
  std::vector<A> nmax_;        // per node: largest mind below
  std::vector<int32_t> narg_;  // per node: lowest original index holding it
};

template <int D, typename A>
void FpsBucket<D, A>::update_leaf(int32_t id, int32_t b, int32_t e, const A* c) {
  A mx = fps_chosen<A>();
  for (int32_t j = b; j < e; ++j) {
    A acc = A(0);
    for (int d = 0; d < D; ++d) {
      const A diff = X_[d][j] - c[d];
      acc += diff * diff;
    }
    const A m = acc < mind_[j] ? acc : mind_[j];
    mind_[j] = m;
    mx = m > mx ? m : mx;
  }
  int32_t arg = INT32_MAX;
  for (int32_t j = b; j < e; ++j) {
    if (mind_[j] == mx && tree_.index[j] < arg) arg = tree_.index[j];
  }
  nmax_[id] = mx;
  narg_[id] = arg;
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
// float32: four points per step (the coordinate arrays are padded, and the
// padding of mind is -inf, so whole vectors may run past e).
template <int D>
inline void fps_leaf_f32(const float* const* X, float* mind, const int32_t* index, int32_t b,
                         int32_t e, const float* c, float* out_max, int32_t* out_arg) {
  __m128 cv[D];
  for (int d = 0; d < D; ++d) cv[d] = _mm_set1_ps(c[d]);
  __m128 mx = _mm_set1_ps(fps_chosen<float>());
  for (int32_t j = b; j < e; j += 4) {
    __m128 diff = _mm_sub_ps(_mm_loadu_ps(X[0] + j), cv[0]);
    __m128 acc = _mm_mul_ps(diff, diff);
    for (int d = 1; d < D; ++d) {
      diff = _mm_sub_ps(_mm_loadu_ps(X[d] + j), cv[d]);
      acc = _mm_add_ps(acc, _mm_mul_ps(diff, diff));
    }
    __m128 old = _mm_loadu_ps(mind + j);
    // minps(a, b) is exactly "a < b ? a : b", the update rule.
    __m128 m = _mm_min_ps(acc, old);
    if (e - j < 4) {
      // Lanes past e keep their value (they belong to the next leaf).
      alignas(16) float keep[4];
      _mm_store_ps(keep, m);
      for (int l = e - j; l < 4; ++l) keep[l] = mind[j + l];
      m = _mm_load_ps(keep);
      _mm_storeu_ps(mind + j, m);
      alignas(16) float mm[4];
      _mm_store_ps(mm, m);
      for (int l = e - j; l < 4; ++l) mm[l] = fps_chosen<float>();
      mx = _mm_max_ps(_mm_load_ps(mm), mx);
      break;
    }
    _mm_storeu_ps(mind + j, m);
    mx = _mm_max_ps(m, mx);
  }
  alignas(16) float v[4];
  _mm_store_ps(v, mx);
  float best = v[0];
  for (int l = 1; l < 4; ++l) best = v[l] > best ? v[l] : best;
  const __m128 bv = _mm_set1_ps(best);
  int32_t arg = INT32_MAX;
  for (int32_t j = b; j < e; j += 4) {
    int msk = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(mind + j), bv));
    if (e - j < 4) msk &= (1 << (e - j)) - 1;
    while (msk) {
      const int l = __builtin_ctz(static_cast<unsigned>(msk));
      msk &= msk - 1;
      arg = index[j + l] < arg ? index[j + l] : arg;
    }
  }
  *out_max = best;
  *out_arg = arg;
}

#define PCGEOM_FPS_LEAF_F32(DD)                                                              \
  template <>                                                                                \
  inline void FpsBucket<DD, float>::update_leaf(int32_t id, int32_t b, int32_t e,           \
                                                const float* c) {                            \
    fps_leaf_f32<DD>(X_, mind_.data(), tree_.index.data(), b, e, c, &nmax_[id], &narg_[id]); \
  }
PCGEOM_FPS_LEAF_F32(1)
PCGEOM_FPS_LEAF_F32(2)
PCGEOM_FPS_LEAF_F32(3)
PCGEOM_FPS_LEAF_F32(4)
#undef PCGEOM_FPS_LEAF_F32
#endif

}  // namespace cpu
}  // namespace pcgeom

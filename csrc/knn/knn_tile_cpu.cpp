// Exact direct KNN on the CPU: vectorised distance tiles + partial selection.
//
// The path for every shape where an index does not pay (where, is the plan in
// knn_dispatch_cpu.h).  Per group of up to 32 query rows:
//   1. the points are copied a tile of 256 at a time into a per-thread
//      buffer, transposed (D x 256), so that one query's 256 distances are
//      computed with the points in the SIMD lanes: each lane is one point and
//      accumulates sum_d (q_d - p_d)^2 in coordinate order with separate
//      multiply and add (no FMA), i.e. exactly the formula of
//      pcgeom_common.h, bit for bit.  On x86 CPUs with AVX2 the same code is
//      compiled a second time for 8 lanes and picked at run time;
//   2. each distance that can still enter the query's top k (<= the current
//      k-th distance; always for NaN while no threshold exists) is appended,
//      without a branch, to the query's buffer as one sortable key: the
//      distance's bit pattern (canonical NaN, which sorts after +inf) above the
//      point index, so the pcgeom order (ascending, NaN after +inf, ties to the
//      lower index) is plain integer order;
//   3. when the buffer holds 2k + 64 keys it is cut back to the k best with
//      one nth_element (O(buffer)), which also lowers the threshold; at the end
//      up to 128 survivors are narrowed to ~k and ordered by rank counting
//      (branch-free vector compares, rank_select), more by one selection and
//      a sort;
//   4. the first threshold comes before any key is appended: the distances of
//      the first window of points (up to kWin, when it holds at least 4k) are
//      kept, split into 2k strided groups, and the k-th smallest of the group
//      minima bounds the k-th distance from above (k distinct points lie at or
//      below it).  Only ~1.4k of the window's keys then pass, where a first
//      tile without a threshold appended all of them and paid a selection on
//      2k + 64 keys or more: on Point-MAE's 64 centres x 1024 points, k = 32,
//      the selection was over half the time.
// So the top-k bookkeeping costs O(N + k log k) per query, never k insertions
// per candidate, and k = N is a plain sort.  Memory: one tile and the group's
// key buffers per thread, nothing of the size of `points`.
#include "knn/knn_tile_cpu.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "common/checks.h"

#include "common/pcgeom_common.h"
#include "common/simd_cpu.h"
#include "common/topk_cpu.h"
#include "knn/knn_rows_cpu.h"

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define PCGEOM_TILE_AVX2 1
#define PCGEOM_TILE_INLINE inline __attribute__((always_inline))
#else
#define PCGEOM_TILE_INLINE inline
#endif
// Lambdas of the kernel are inlined too, so the AVX2 copy really is AVX2 code.
#if defined(__GNUC__) || defined(__clang__)
#define PCGEOM_LAMBDA_INLINE __attribute__((always_inline))
#else
#define PCGEOM_LAMBDA_INLINE
#endif

namespace pcgeom {
namespace {

// Index of the lowest set bit of a non-zero mask.
inline int lowest_bit(uint32_t m) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_ctz(m);
#else
  int u = 0;
  while (!(m & 1u)) {
    m >>= 1;
    ++u;
  }
  return u;
#endif
}

constexpr int64_t kT = 256;  // points per tile
constexpr int64_t kW = 16;   // distances per register block
constexpr int64_t kMaxRows = 32;
constexpr int64_t kWin = 1024;  // points in the bootstrap window (a multiple of kT)

template <typename A>
struct TileKey;

// float32: FiniteKey's packed (distance bits, index) uint64, with every NaN
// made the one positive quiet NaN, whose bits rank after +inf's (ties by index).
template <>
struct TileKey<float> : cpu::FiniteKey<float> {
  static type make(float d, int64_t i) {
    type key = cpu::FiniteKey<float>::make(d, i);
    return d != d ? (uint64_t{0x7fc00000u} << 32) | static_cast<uint32_t>(i) : key;
  }
};

struct TileKeyD {
  uint64_t bits;
  int64_t i;
};

template <>
struct TileKey<double> {
  using type = TileKeyD;
  static type make(double d, int64_t i) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof(bits));
    bits = d != d ? 0x7ff8000000000000ull : bits;
    return {bits, i};
  }
  static double dist(type k) {
    double d;
    std::memcpy(&d, &k.bits, sizeof(d));
    return d;
  }
  static int64_t idx(type k) { return k.i; }
  static bool less(type a, type b) { return a.bits < b.bits || (a.bits == b.bits && a.i < b.i); }
};

// Sorts keys ascending.  float32 keys are plain uint64: above a few hundred
// keys an LSD radix sort (11-bit digits, passes whose digit is the same for
// every key skipped -- the high index bits, usually) beats a comparison sort
// several times, which matters when k is a large share of N.
inline void sort_keys(uint64_t* a, int64_t n, uint64_t* tmp) {
  if (n < 384) {
    std::sort(a, a + n);
    return;
  }
  constexpr int kBits = 11;
  constexpr int kPasses = 6;  // 66 bits >= 64
  constexpr int64_t kBuckets = int64_t(1) << kBits;
  std::vector<int64_t> hist(kPasses * kBuckets, 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t x = a[i];
    for (int p = 0; p < kPasses; ++p) ++hist[p * kBuckets + ((x >> (p * kBits)) & (kBuckets - 1))];
  }
  uint64_t* src = a;
  uint64_t* dst = tmp;
  for (int p = 0; p < kPasses; ++p) {
    int64_t* h = hist.data() + p * kBuckets;
    const uint64_t first = (src[0] >> (p * kBits)) & (kBuckets - 1);
    if (h[first] == n) continue;  // one digit value: the pass would not move anything
    int64_t sum = 0;
    for (int64_t b = 0; b < kBuckets; ++b) {
      const int64_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t x = src[i];
      dst[h[(x >> (p * kBits)) & (kBuckets - 1)]++] = x;
    }
    std::swap(src, dst);
  }
  if (src != a) std::copy(src, src + n, a);
}

template <typename Key>
inline void sort_keys(Key* a, int64_t n, Key* /*tmp*/) {
  std::sort(a, a + n, [](const Key& x, const Key& y) { return TileKey<double>::less(x, y); });
}

// Bit u set when dv[u] may enter a top k whose bound is w: dv[u] <= w within
// a radius, !(dv[u] > w) otherwise (NaN enters while no bound excludes it).
template <typename A>
PCGEOM_TILE_INLINE uint32_t block_mask(const A* dv, A w, bool use_radius) {
  uint32_t mask = 0;
  for (int64_t u = 0; u < kW; ++u) {
    mask |= static_cast<uint32_t>(use_radius ? dv[u] <= w : !(dv[u] > w)) << u;
  }
  return mask;
}
#if defined(__SSE2__)
template <>
PCGEOM_TILE_INLINE uint32_t block_mask<float>(const float* dv, float w, bool use_radius) {
  const __m128 wv = _mm_set1_ps(w);
  uint32_t mask = 0;
  for (int u = 0; u < kW; u += 4) {
    const __m128 d = _mm_loadu_ps(dv + u);
    const __m128 c = use_radius ? _mm_cmple_ps(d, wv) : _mm_cmpngt_ps(d, wv);
    mask |= static_cast<uint32_t>(_mm_movemask_ps(c)) << u;
  }
  return mask;
}
template <>
PCGEOM_TILE_INLINE uint32_t block_mask<double>(const double* dv, double w, bool use_radius) {
  const __m128d wv = _mm_set1_pd(w);
  uint32_t mask = 0;
  for (int u = 0; u < kW; u += 2) {
    const __m128d d = _mm_loadu_pd(dv + u);
    const __m128d c = use_radius ? _mm_cmple_pd(d, wv) : _mm_cmpngt_pd(d, wv);
    mask |= static_cast<uint32_t>(_mm_movemask_pd(c)) << u;
  }
  return mask;
}
#endif

// An upper bound, within 2^-8 (float32) or 2^-9 (float64) relative, of the
// k-th smallest of m non-negative, non-NaN numbers: a binary search on the
// top bits of their patterns (non-negative floats order like their bits),
// each step one vectorised count -- no data-dependent branch, unlike a
// selection.  At least k of the numbers are <= the result.
template <typename A>
struct BitsOf;
template <>
struct BitsOf<float> {
  using type = int32_t;
  static constexpr int kTop = 30, kLow = 15;
  static constexpr int32_t kInf = 0x7f800000;
};
template <>
struct BitsOf<double> {
  using type = int64_t;
  static constexpr int kTop = 62, kLow = 43;
  static constexpr int64_t kInf = 0x7ff0000000000000ll;
};

// The search itself, on non-negative integer patterns: the smallest value
// with bits `low`..0 all set that at least k of bits[0, m) do not exceed.
template <typename I>
PCGEOM_TILE_INLINE I kth_bits_bound(const I* bits, int64_t m, int64_t k, int top, int low) {
  I t = 0;
  for (int b = top; b >= low; --b) {
    const I probe = t | ((I(1) << b) - 1);
    I c = 0;  // the pattern's width: the count vectorises in full lanes
    for (int64_t u = 0; u < m; ++u) c += bits[u] <= probe;
    if (c < k) t |= I(1) << b;
  }
  return t | ((I(1) << low) - 1);
}

template <typename A>
PCGEOM_TILE_INLINE A kth_upper_bound(const A* x, int64_t m, int64_t k, typename BitsOf<A>::type* bits) {
  using I = typename BitsOf<A>::type;
  std::memcpy(bits, x, static_cast<size_t>(m) * sizeof(A));
  I r = kth_bits_bound(bits, m, k, BitsOf<A>::kTop, BitsOf<A>::kLow);
  if (r > BitsOf<A>::kInf) r = BitsOf<A>::kInf;  // a NaN pattern: the answer is +inf
  A out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

// The k smallest of n distinct float32 keys, sorted, into a[0, min(n, k)),
// by rank counting: each key's rank is the number of keys below it, found
// with branch-free vector compares (n^2 of them), where a selection plus a
// sort of a few dozen keys costs a mispredicted branch per comparison.  Pays
// up to about a hundred keys -- the usual survivor count after the bootstrap
// window.  Returns false (nothing done) for other sizes or key types.
constexpr int64_t kRankMax = 128;

PCGEOM_TILE_INLINE bool rank_select(uint64_t* a, int64_t n, int64_t k, uint64_t* tmp) {
  if (n > kRankMax || n < 2) return n < 2;
  if (n > k + 8) {
    // First narrow the survivors to those whose distance bits are at most an
    // upper bound (within 2^-8 relative) of the k-th's: a binary search on
    // the top bits, as in kth_upper_bound, but over the keys' distance bits
    // themselves, unclamped (NaN's pattern ranks after +inf's, like the
    // keys).  Rank counting is quadratic, so ~k keys instead of ~1.4k halves it.
    int32_t hi[kRankMax];
    for (int64_t i = 0; i < n; ++i) hi[i] = static_cast<int32_t>(a[i] >> 32);
    const int32_t lim = kth_bits_bound(hi, n, k, BitsOf<float>::kTop, BitsOf<float>::kLow);
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
      a[m] = a[i];
      m += hi[i] <= lim;
    }
    n = m;  // >= k: at least k patterns are <= lim
  }
  // Keys have a clear top bit (non-negative distance bits), so a signed
  // compare orders them like unsigned ones, and signed compares vectorise.
  const int64_t* x = reinterpret_cast<const int64_t*>(a);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = x[i];
    int64_t r = 0;
    for (int64_t j = 0; j < n; ++j) r += x[j] < v;
    if (r < k) tmp[r] = a[i];
  }
  std::memcpy(a, tmp, static_cast<size_t>(std::min(n, k)) * sizeof(uint64_t));
  return true;
}

template <typename Key>
inline bool rank_select(Key*, int64_t, int64_t, Key*) {
  return false;
}

template <typename A>
struct Scratch {
  using Key = typename TileKey<A>::type;
  std::vector<A> X;  // D x kT, transposed tile
  std::vector<A> dist;
  // Left uninitialised (no per-call memset: with many tiny clouds that
  // would cost more than the search).
  std::unique_ptr<Key[]> keys;  // per row: stride = cap + min(kT, L) keys
  std::unique_ptr<Key[]> tmp;   // radix sort buffer (stride keys)
  std::vector<int64_t> count;
  std::vector<A> thr;
  std::vector<A> win;   // per row: the window's distances (stride win_stride)
  std::vector<A> gmin;  // 2k group minima
  std::vector<typename BitsOf<A>::type> gbits;
};

// The bootstrap window (step 4 above): the first min(L, kWin) points when
// that holds at least 4k points (2k groups of at least two), else none.
inline int64_t boot_window(int64_t L, int64_t K) {
  const int64_t W = std::min(L, kWin);
  return W >= 4 * K ? W : 0;
}
inline int64_t win_stride(int64_t W) { return W + kW; }

// One group of query rows against all L points.  DC: D as a compile-time
// constant (1..8), or 0.
template <typename A, int DC>
PCGEOM_TILE_INLINE void tile_group_impl(const A* qb, const int32_t* rows, int64_t g0, int64_t gn,
                                        const A* pb, int64_t L, int64_t D_rt, int64_t K,
                                        bool use_radius, A r2, A* od, int64_t* oi,
                                        Scratch<A>& s, int64_t cap) {
  using F = TileKey<A>;
  using Key = typename F::type;
  const int64_t D = DC > 0 ? DC : D_rt;
  const int64_t stride = cap + std::min(kT, L);
  Key* keys = s.keys.get();
  int64_t* cnt = s.count.data();
  A* thr = s.thr.data();
  A* X = s.X.data();
  A* dist = s.dist.data();
  auto less = [](const Key& a, const Key& b) { return F::less(a, b); };
  for (int64_t i = 0; i < gn; ++i) {
    cnt[i] = 0;
    thr[i] = use_radius ? r2 : pos_inf<A>();
  }
  // Appends the candidates of one query's tile row; cuts back to k when full.
  auto filter = [&](int64_t i, const A* drow, int64_t j0, int64_t tn) PCGEOM_LAMBDA_INLINE {
    Key* kb = keys + i * stride;
    int64_t c = cnt[i];
    const A w = thr[i];
    for (int64_t t0 = 0; t0 < tn; t0 += kW) {
      const int64_t un = std::min(kW, tn - t0);
      const A* dv = drow + t0;
      // One bit per lane that may enter (vectorised compares); past a good
      // threshold most blocks have none, and the rest append only their hits.
      uint32_t mask = block_mask(dv, w, use_radius);
      mask &= (uint32_t(1) << un) - 1;  // padding lanes
      while (mask) {
        const int u = lowest_bit(mask);
        mask &= mask - 1;
        kb[c++] = F::make(dv[u], j0 + t0 + u);
      }
    }
    if (c >= cap && c > K) {
      std::nth_element(kb, kb + (K - 1), kb + c, less);
      c = K;
      // k-th distance so far (NaN: no bound yet, everything still enters).
      thr[i] = F::dist(kb[K - 1]);
    }
    cnt[i] = c;
  };
  const int64_t W = boot_window(L, K);
  const int64_t WS = win_stride(W);
  A* win = W > 0 ? s.win.data() : nullptr;
  // Step 4: the window's threshold from group minima, then its keys.
  auto bootstrap = [&](int64_t i) PCGEOM_LAMBDA_INLINE {
    const A* d = win + i * WS;
    const int64_t m = 2 * K;
    A* gm = s.gmin.data();
    // (A group of NaNs keeps +inf, and +inf as the bound lets everything in.)
    cpu::strided_group_min(d, W, m, gm);
    const A t = kth_upper_bound(gm, m, K, s.gbits.data());
    if (t < thr[i]) thr[i] = t;
    for (int64_t j = 0; j < W; j += kT) filter(i, d + j, j, std::min(kT, W - j));
    // More points follow: start them from the exact k-th key of the window.
    if (L > W && cnt[i] > K) {
      Key* kb = keys + i * stride;
      std::nth_element(kb, kb + (K - 1), kb + cnt[i], less);
      cnt[i] = K;
      thr[i] = F::dist(kb[K - 1]);
    }
  };
  auto qrow = [&](int64_t i) { return qb + (rows ? rows[g0 + i] : g0 + i) * D; };
  for (int64_t j0 = 0; j0 < L; j0 += kT) {
    const int64_t tn = std::min(kT, L - j0);
    const int64_t tp = (tn + kW - 1) / kW * kW;
    const A* src = pb + j0 * D;
    // Transpose 16 rows at a time: 16 sequential read streams, contiguous writes.
    for (int64_t t0 = 0; t0 < tn; t0 += kW) {
      const int64_t un = std::min(kW, tn - t0);
      for (int64_t d = 0; d < D; ++d) {
        A* xd = X + d * kT + t0;
        for (int64_t u = 0; u < un; ++u) xd[u] = src[(t0 + u) * D + d];
      }
    }
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t t = tn; t < tp; ++t) X[d * kT + t] = A(0);
    }
    // Inside the window distances are kept for the bootstrap, not filtered.
    const bool in_win = j0 < W;
    const bool win_done = in_win && j0 + tn >= W;
    auto drow = [&](int64_t i, int r) { return in_win ? win + (i + r) * WS + j0 : dist + r * kT; };
    int64_t i = 0;
    // Four queries at a time share every load of the tile (register blocking).
    for (; i + 4 <= gn; i += 4) {
      const A* q0 = qrow(i);
      const A* q1 = qrow(i + 1);
      const A* q2 = qrow(i + 2);
      const A* q3 = qrow(i + 3);
      for (int64_t t0 = 0; t0 < tp; t0 += kW) {
        A a0[kW], a1[kW], a2[kW], a3[kW];
        for (int64_t u = 0; u < kW; ++u) a0[u] = a1[u] = a2[u] = a3[u] = A(0);
        for (int64_t d = 0; d < D; ++d) {
          const A c0 = q0[d], c1 = q1[d], c2 = q2[d], c3 = q3[d];
          const A* x = X + d * kT + t0;
          for (int64_t u = 0; u < kW; ++u) {
            const A xv = x[u];
            const A e0 = c0 - xv, e1 = c1 - xv, e2 = c2 - xv, e3 = c3 - xv;
            a0[u] += e0 * e0;
            a1[u] += e1 * e1;
            a2[u] += e2 * e2;
            a3[u] += e3 * e3;
          }
        }
        A* o0 = drow(i, 0) + t0;
        A* o1 = drow(i, 1) + t0;
        A* o2 = drow(i, 2) + t0;
        A* o3 = drow(i, 3) + t0;
        for (int64_t u = 0; u < kW; ++u) {
          o0[u] = a0[u];
          o1[u] = a1[u];
          o2[u] = a2[u];
          o3[u] = a3[u];
        }
      }
      for (int r = 0; r < 4; ++r) {
        if (!in_win) {
          filter(i + r, dist + r * kT, j0, tn);
        } else if (win_done) {
          bootstrap(i + r);
        }
      }
    }
    for (; i < gn; ++i) {
      const A* qr = qrow(i);
      for (int64_t t0 = 0; t0 < tp; t0 += kW) {
        A acc[kW];
        for (int64_t u = 0; u < kW; ++u) acc[u] = A(0);
        for (int64_t d = 0; d < D; ++d) {
          const A qd = qr[d];
          const A* x = X + d * kT + t0;
          for (int64_t u = 0; u < kW; ++u) {
            const A diff = qd - x[u];
            acc[u] += diff * diff;
          }
        }
        A* o = drow(i, 0) + t0;
        for (int64_t u = 0; u < kW; ++u) o[u] = acc[u];
      }
      if (!in_win) {
        filter(i, dist, j0, tn);
      } else if (win_done) {
        bootstrap(i);
      }
    }
  }
  for (int64_t i = 0; i < gn; ++i) {
    const int64_t m = rows ? rows[g0 + i] : g0 + i;
    const A* qr = qb + m * D;
    Key* kb = keys + i * stride;
    int64_t n = cnt[i];
    if (!rank_select(kb, n, K, s.tmp.get())) {
      if (n > K) {
        std::nth_element(kb, kb + (K - 1), kb + n, less);
        n = K;
      }
      sort_keys(kb, n, s.tmp.get());
    }
    n = std::min(n, K);
    A* o = od + m * K;
    int64_t* oix = oi + m * K;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t j = F::idx(kb[r]);
      A d = F::dist(kb[r]);
      // The key holds a canonical NaN: return the computed one, bit for bit.
      if (d != d) d = sq_dist<A, A>(qr, pb + j * D, D);
      o[r] = d;
      oix[r] = j;
    }
    for (int64_t r = n; r < K; ++r) {
      o[r] = pos_inf<A>();
      oix[r] = -1;
    }
  }
}

#define PCGEOM_TILE_ARGS                                                                     \
  const A *qb, const int32_t *rows, int64_t g0, int64_t gn, const A *pb, int64_t L, int64_t D, \
      int64_t K, bool use_radius, A r2, A *od, int64_t *oi, Scratch<A> &s, int64_t cap
#define PCGEOM_TILE_PASS qb, rows, g0, gn, pb, L, D, K, use_radius, r2, od, oi, s, cap

template <typename A, int DC>
void tile_group_base(PCGEOM_TILE_ARGS) {
  tile_group_impl<A, DC>(PCGEOM_TILE_PASS);
}

#if defined(PCGEOM_TILE_AVX2)
template <typename A, int DC>
__attribute__((target("avx2"))) void tile_group_avx2(PCGEOM_TILE_ARGS) {
  tile_group_impl<A, DC>(PCGEOM_TILE_PASS);
}

#endif

template <typename A, int DC>
void tile_group(PCGEOM_TILE_ARGS) {
#if defined(PCGEOM_TILE_AVX2)
  if (cpu::use_avx2()) {
    tile_group_avx2<A, DC>(PCGEOM_TILE_PASS);
    return;
  }
#endif
  tile_group_base<A, DC>(PCGEOM_TILE_PASS);
}

template <typename A>
void tile_group_dispatch(PCGEOM_TILE_ARGS) {
  switch (D) {
    case 1: tile_group<A, 1>(PCGEOM_TILE_PASS); return;
    case 2: tile_group<A, 2>(PCGEOM_TILE_PASS); return;
    case 3: tile_group<A, 3>(PCGEOM_TILE_PASS); return;
    case 4: tile_group<A, 4>(PCGEOM_TILE_PASS); return;
    case 5: tile_group<A, 5>(PCGEOM_TILE_PASS); return;
    case 6: tile_group<A, 6>(PCGEOM_TILE_PASS); return;
    case 7: tile_group<A, 7>(PCGEOM_TILE_PASS); return;
    case 8: tile_group<A, 8>(PCGEOM_TILE_PASS); return;
    default: tile_group<A, 0>(PCGEOM_TILE_PASS); return;
  }
}

}  // namespace

template <typename A>
void knn_tile_rows(const A* qb, const int32_t* rows, int64_t nrows, const A* pb, int64_t L,
                   int64_t D, int64_t K, bool use_radius, A r2, A* od, int64_t* oi) {
  if (nrows <= 0) return;
  if (L <= 0) {
    for (int64_t r = 0; r < nrows; ++r) {
      const int64_t m = rows ? rows[r] : r;
      cpu::write_padding<A, A>(K, od + m * K, oi + m * K);
    }
    return;
  }
  using Key = typename TileKey<A>::type;
  // Never more than L keys survive a tile row; past that the buffer only grows.
  const int64_t cap = std::min<int64_t>(2 * K + 64, L);
  // A tile row appends at most min(kT, L) keys to a buffer holding < cap.
  const int64_t stride = cap + std::min(kT, L);
  const int64_t budget = (int64_t(1) << 20) / static_cast<int64_t>(sizeof(Key));
  const int64_t G = std::max<int64_t>(1, std::min<int64_t>({kMaxRows, nrows, budget / stride}));
  Scratch<A> s;
  s.X.resize(D * kT);
  s.dist.resize(4 * kT);
  s.keys.reset(new Key[G * stride]);
  s.tmp.reset(new Key[stride]);
  s.count.resize(G);
  s.thr.resize(G);
  const int64_t W = boot_window(L, K);
  if (W > 0) {
    s.win.resize(G * win_stride(W));
    s.gmin.resize(2 * K);
    s.gbits.resize(2 * K);
  }
  for (int64_t g0 = 0; g0 < nrows; g0 += G) {
    const int64_t gn = std::min(G, nrows - g0);
    tile_group_dispatch<A>(qb, rows, g0, gn, pb, L, D, K, use_radius, r2, od, oi, s, cap);
  }
}

template <typename A>
void knn_tile_cpu(const KnnProblem<A>& pr) {
  const A *q = pr.q, *p = pr.p;
  const int64_t *ql = pr.ql, *pl = pr.pl;
  const int64_t B = pr.B, M = pr.M, N = pr.N, D = pr.D, K = pr.K;
  const A r2 = pr.r2();
  struct Item {
    int64_t b, first, count;
  };
  write_padding_rows(pr);
  int64_t total_rows = 0, work = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (pl[b] > 0) {
      total_rows += ql[b];
      work += ql[b] * (pl[b] * D + K);
    }
  }
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  // Rows per item: up to kMaxRows (each item transposes the cloud's tiles once
  // for its rows), fewer when that would leave threads idle.
  const int64_t R = std::max<int64_t>(
      1, std::min<int64_t>(kMaxRows, (total_rows + 2 * threads - 1) / (2 * threads)));
  std::vector<Item> items;
  for (int64_t b = 0; b < B; ++b) {
    if (pl[b] <= 0 || ql[b] <= 0) continue;
    for (int64_t s = 0; s < ql[b]; s += R) items.push_back({b, s, std::min(R, ql[b] - s)});
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const bool light = work < 4 * kParallelWork;
  pcgeom::parallel_for(0, n, light ? std::max<int64_t>(1, n) : 1,
                              [&](int64_t begin, int64_t end) {
                                for (int64_t w = begin; w < end; ++w) {
                                  const Item& it = items[w];
                                  const int64_t b = it.b;
                                  // rows == nullptr: rows first .. first+count-1
                                  knn_tile_rows<A>(q + (b * M + it.first) * D, nullptr, it.count,
                                                   p + b * N * D, pl[b], D, K, pr.use_radius,
                                                   r2, pr.out_d + (b * M + it.first) * K,
                                                   pr.out_i + (b * M + it.first) * K);
                                }
                              });
}

template void knn_tile_rows<float>(const float*, const int32_t*, int64_t, const float*, int64_t,
                                   int64_t, int64_t, bool, float, float*, int64_t*);
template void knn_tile_rows<double>(const double*, const int32_t*, int64_t, const double*,
                                    int64_t, int64_t, int64_t, bool, double, double*, int64_t*);
template void knn_tile_cpu<float>(const KnnProblem<float>&);
template void knn_tile_cpu<double>(const KnnProblem<double>&);

}  // namespace pcgeom

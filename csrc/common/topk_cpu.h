// Per-query top-k containers for the CPU kernels.
//
// Both keep the k smallest (distance, index) keys seen so far under the
// pcgeom order (ascending, NaN after +inf, ties to the lower index, see
// key_less in pcgeom_common.h), and expose the current worst key so a search
// can prune.  `SortedTopKList` is an insertion-sorted array (best for small k);
// `HeapTopK` a binary max-heap (O(log k) per accepted key, for large k).
// Both write into caller-owned arrays and leave them sorted after finish().
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/pcgeom_common.h"

namespace pcgeom {
namespace cpu {

template <typename A>
struct SortedTopKList {
  A* dist;
  int64_t* idx;
  int64_t k;
  int64_t count = 0;

  SortedTopKList(A* d, int64_t* i, int64_t k_) : dist(d), idx(i), k(k_) {}

  bool full() const { return count == k; }
  A worst_dist() const { return dist[k - 1]; }
  int64_t worst_idx() const { return idx[k - 1]; }

  void push(A d, int64_t i) {
    int64_t pos;
    if (count < k) {
      pos = count++;
    } else {
      if (!key_less(d, i, dist[k - 1], idx[k - 1])) return;
      pos = k - 1;
    }
    while (pos > 0 && key_less(d, i, dist[pos - 1], idx[pos - 1])) {
      dist[pos] = dist[pos - 1];
      idx[pos] = idx[pos - 1];
      --pos;
    }
    dist[pos] = d;
    idx[pos] = i;
  }

  void finish() {}
};

template <typename A>
struct HeapTopK {
  A* dist;
  int64_t* idx;
  int64_t k;
  int64_t count = 0;

  HeapTopK(A* d, int64_t* i, int64_t k_) : dist(d), idx(i), k(k_) {}

  bool full() const { return count == k; }
  A worst_dist() const { return dist[0]; }
  int64_t worst_idx() const { return idx[0]; }

  // "x ranks after y": the max-heap order.
  static bool after(A dx, int64_t ix, A dy, int64_t iy) { return key_less(dy, iy, dx, ix); }

  void push(A d, int64_t i) {
    if (count < k) {
      int64_t pos = count++;
      while (pos > 0) {
        const int64_t parent = (pos - 1) / 2;
        if (!after(d, i, dist[parent], idx[parent])) break;
        dist[pos] = dist[parent];
        idx[pos] = idx[parent];
        pos = parent;
      }
      dist[pos] = d;
      idx[pos] = i;
      return;
    }
    if (!key_less(d, i, dist[0], idx[0])) return;
    sift_down(0, count, d, i);
  }

  // Sorts ascending in place (heap sort).
  void finish() {
    for (int64_t n = count; n > 1; --n) {
      const A d = dist[n - 1];
      const int64_t i = idx[n - 1];
      dist[n - 1] = dist[0];
      idx[n - 1] = idx[0];
      sift_down(0, n - 1, d, i);
    }
  }

 private:
  void sift_down(int64_t pos, int64_t n, A d, int64_t i) {
    while (true) {
      int64_t c = 2 * pos + 1;
      if (c >= n) break;
      if (c + 1 < n && after(dist[c + 1], idx[c + 1], dist[c], idx[c])) ++c;
      if (!after(dist[c], idx[c], d, i)) break;
      dist[pos] = dist[c];
      idx[pos] = idx[c];
      pos = c;
    }
    dist[pos] = d;
    idx[pos] = i;
  }
};

// Below this k an insertion-sorted list beats a heap.
constexpr int64_t kSortedListMaxK = 48;

// ---------------------------------------------------------------------------
// Keys for searches where every distance is a number (finite points, finite
// query: no NaN can occur, +inf only through overflow).  Then the pcgeom order
// is the plain lexicographic order of (distance, index), and for float32 the
// pair packs into one uint64 -- non-negative floats order like their bit
// patterns -- so a comparison is a single integer compare.

template <typename A>
struct FiniteKey;

template <>
struct FiniteKey<float> {
  using type = uint64_t;
  static type make(float d, int64_t i) {
    uint32_t bits;
    std::memcpy(&bits, &d, sizeof(bits));
    return (static_cast<uint64_t>(bits) << 32) | static_cast<uint32_t>(i);
  }
  static float dist(type k) {
    const uint32_t bits = static_cast<uint32_t>(k >> 32);
    float d;
    std::memcpy(&d, &bits, sizeof(d));
    return d;
  }
  static int64_t idx(type k) { return static_cast<int64_t>(static_cast<uint32_t>(k)); }
  static bool less(type a, type b) { return a < b; }
};

struct DoubleKey {
  double d;
  int64_t i;
};

template <>
struct FiniteKey<double> {
  using type = DoubleKey;
  static type make(double d, int64_t i) { return {d, i}; }
  static double dist(type k) { return k.d; }
  static int64_t idx(type k) { return k.i; }
  static bool less(type a, type b) { return a.d < b.d || (a.d == b.d && a.i < b.i); }
};

// Top-k over FiniteKey keys: an insertion-sorted array for small k, a binary
// max-heap for large k.  `keys` is caller-owned (k entries).
template <typename A>
struct FiniteTopK {
  using F = FiniteKey<A>;
  using Key = typename F::type;
  Key* keys;
  int64_t k;
  bool heap;
  int64_t count = 0;

  FiniteTopK(Key* buf, int64_t k_) : keys(buf), k(k_), heap(k_ > kSortedListMaxK) {}

  bool full() const { return count == k; }
  Key worst() const { return heap ? keys[0] : keys[k - 1]; }
  A worst_dist() const { return F::dist(worst()); }
  int64_t worst_idx() const { return F::idx(worst()); }

  // Accepts x if it ranks before the current worst key (or the list is not
  // full).  The first k keys are only appended and ordered once, when the
  // list fills: one sort costs less than k insertions into a growing list.
  inline void push(Key x) {
    if (count < k) {
      keys[count++] = x;
      if (count == k) settle();
      return;
    }
    if (!heap) {
      if (!F::less(x, keys[k - 1])) return;
      int64_t pos = k - 1;
      while (pos > 0 && F::less(x, keys[pos - 1])) {
        keys[pos] = keys[pos - 1];
        --pos;
      }
      keys[pos] = x;
      return;
    }
    if (!F::less(x, keys[0])) return;
    sift_down(x, count);
  }

  // Orders keys[0, count): ascending, or as a max-heap for large k.
  void settle() {
    auto cmp = [](const Key& a, const Key& b) { return F::less(a, b); };
    if (heap) {
      std::make_heap(keys, keys + count, cmp);
    } else {
      std::sort(keys, keys + count, cmp);
    }
  }

  // Leaves keys[0, count) sorted ascending.
  void finish() {
    if (count < k) {
      // Never filled: still in arrival order.
      std::sort(keys, keys + count, [](const Key& a, const Key& b) { return F::less(a, b); });
      return;
    }
    if (!heap) return;
    for (int64_t n = count; n > 1; --n) {
      const Key last = keys[n - 1];
      keys[n - 1] = keys[0];
      sift_down(last, n - 1);
    }
  }

 private:
  void sift_down(Key x, int64_t n) {
    int64_t pos = 0;
    while (true) {
      int64_t c = 2 * pos + 1;
      if (c >= n) break;
      if (c + 1 < n && F::less(keys[c], keys[c + 1])) ++c;
      if (!F::less(x, keys[c])) break;
      keys[pos] = keys[c];
      pos = c;
    }
    keys[pos] = x;
  }
};

// out[u] = min of x[u], x[u + m], x[u + 2m], ... (u < m): the minima of m
// strided groups of x[0, n), +inf for a group without a number (NaN never
// replaces a minimum: the comparison is false).  Any k of them are k distinct
// entries, so the k-th smallest minimum bounds x's k-th smallest from above:
// the tile and blocked KNN kernels take their first threshold from it.
#if defined(__GNUC__) || defined(__clang__)
#define PCGEOM_GROUP_MIN_INLINE inline __attribute__((always_inline))
#else
#define PCGEOM_GROUP_MIN_INLINE inline
#endif
// (Always inlined: inside a kernel's AVX2 copy the loop is AVX2 code.)
template <typename A>
PCGEOM_GROUP_MIN_INLINE void strided_group_min(const A* x, int64_t n, int64_t m, A* out) {
  for (int64_t u = 0; u < m; ++u) out[u] = std::numeric_limits<A>::infinity();
  for (int64_t s0 = 0; s0 < n; s0 += m) {
    const int64_t un = std::min(m, n - s0);
    const A* xs = x + s0;
    for (int64_t u = 0; u < un; ++u) out[u] = xs[u] < out[u] ? xs[u] : out[u];
  }
}

}  // namespace cpu
}  // namespace pcgeom

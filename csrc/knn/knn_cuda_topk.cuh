// Per-thread top-k lists for the CUDA KNN kernels.
//
// Both lists keep the k smallest (dist2, index) keys seen so far under
// pcgeom::key_less (ascending, NaN after +inf, ties to the lower index), so the
// order in which candidates arrive never changes the answer: the brute-force
// and grid searches, whatever their visiting order, return exactly what the CPU
// kernel returns.
//
//   * RegTopK<A, KC>: k <= KC, kept in registers (KC is a compile-time bucket).
//   * HeapTopK<A>:    any k, a max-heap in a global-memory workspace; O(log k)
//                     per accepted candidate.  No cap on k.
//
// Common interface: push(d, j), full(), worst(), write(out_d, out_i, k).
//
// KnnArgs is the one description of a search that both search paths (the
// brute force in knn_cuda.cu, the grid in knn_grid_cuda.cuh) receive, and
// kThreads their block size: one query per thread.
#pragma once

#include <cstdint>
#include <limits>

#include "common/pcgeom_common.h"

namespace pcgeom {
namespace cuda {

// Workspace of HeapTopK: `cap` slots per thread, interleaved (slot s of list t at
// s * stride + t) so that neighbouring threads touch neighbouring addresses.
template <typename A>
struct HeapWork {
  A* dist;
  int64_t* idx;
  int64_t cap;
};

template <typename A, int KC>
struct RegTopK {
  // Sorted ascending; empty slots hold the sentinel (NaN, INT32_MAX), which
  // ranks after every real key because real indices are < N <= INT32_MAX.
  A d[KC];
  int32_t i[KC];
  A wd;  // key at position k-1: the one a candidate must beat
  int32_t wi;
  int k;

  static constexpr int32_t kEmpty = 2147483647;

  __device__ __forceinline__ RegTopK(int64_t k_, const HeapWork<A>&, int64_t, int64_t)
      : k(static_cast<int>(k_)) {
    const A nan = std::numeric_limits<A>::quiet_NaN();
#pragma unroll
    for (int p = 0; p < KC; ++p) {
      d[p] = nan;
      i[p] = kEmpty;
    }
    wd = nan;
    wi = kEmpty;
  }

  __device__ __forceinline__ bool full() const { return wi != kEmpty; }
  __device__ __forceinline__ A worst() const { return wd; }

  __device__ __forceinline__ void push(A dist, int64_t j) {
    if (!key_less(dist, j, wd, static_cast<int64_t>(wi))) return;
    // Insertion as a chain of compare-and-swap steps: fully unrolled, so the
    // list stays in registers.  Slots past k hold keys that are never output.
    A cd = dist;
    int32_t ci = static_cast<int32_t>(j);
#pragma unroll
    for (int p = 0; p < KC; ++p) {
      if (key_less(cd, static_cast<int64_t>(ci), d[p], static_cast<int64_t>(i[p]))) {
        const A td = d[p];
        const int32_t ti = i[p];
        d[p] = cd;
        i[p] = ci;
        cd = td;
        ci = ti;
      }
    }
#pragma unroll
    for (int p = 0; p < KC; ++p) {
      if (p == k - 1) {
        wd = d[p];
        wi = i[p];
      }
    }
  }

  template <typename T>
  __device__ __forceinline__ void write(T* od, int64_t* oi, int64_t k_out) const {
#pragma unroll
    for (int p = 0; p < KC; ++p) {
      if (p < k_out) {
        const bool found = i[p] != kEmpty;
        od[p] = static_cast<T>(found ? d[p] : pos_inf<A>());
        oi[p] = found ? static_cast<int64_t>(i[p]) : int64_t(-1);
      }
    }
  }
};

template <typename A>
struct HeapTopK {
  A* hd;
  int64_t* hi;
  int64_t stride;
  int64_t cap;    // min(k, N): more slots than points can never fill
  int64_t count;
  A rd;           // root = worst kept key, cached in registers
  int64_t ri;

  __device__ __forceinline__ HeapTopK(int64_t, const HeapWork<A>& w, int64_t slot, int64_t stride_)
      : hd(w.dist + slot), hi(w.idx + slot), stride(stride_), cap(w.cap), count(0),
        rd(pos_inf<A>()), ri(-1) {}

  __device__ __forceinline__ bool full() const { return count == cap; }
  __device__ __forceinline__ A worst() const { return rd; }

  __device__ __forceinline__ void push(A dist, int64_t j) {
    if (cap == 0) return;
    if (count == cap) {
      if (!key_less(dist, j, rd, ri)) return;
      sift_down(dist, j, count);
    } else {
      // Sift up: parents are worse (greater) than their children.
      int64_t pos = count++;
      while (pos > 0) {
        const int64_t par = (pos - 1) / 2;
        const A pd = hd[par * stride];
        const int64_t pi = hi[par * stride];
        if (!key_less(pd, pi, dist, j)) break;
        hd[pos * stride] = pd;
        hi[pos * stride] = pi;
        pos = par;
      }
      hd[pos * stride] = dist;
      hi[pos * stride] = j;
    }
    rd = hd[0];
    ri = hi[0];
  }

  // Puts (dist, j) at the root of a heap of `n` slots and restores the order.
  __device__ __forceinline__ void sift_down(A dist, int64_t j, int64_t n) {
    int64_t pos = 0;
    while (true) {
      const int64_t l = 2 * pos + 1;
      if (l >= n) break;
      int64_t c = l;
      A cd = hd[l * stride];
      int64_t ci = hi[l * stride];
      if (l + 1 < n) {
        const A rd2 = hd[(l + 1) * stride];
        const int64_t ri2 = hi[(l + 1) * stride];
        if (key_less(cd, ci, rd2, ri2)) {
          c = l + 1;
          cd = rd2;
          ci = ri2;
        }
      }
      if (!key_less(dist, j, cd, ci)) break;
      hd[pos * stride] = cd;
      hi[pos * stride] = ci;
      pos = c;
    }
    hd[pos * stride] = dist;
    hi[pos * stride] = j;
  }

  template <typename T>
  __device__ __forceinline__ void write(T* od, int64_t* oi, int64_t k_out) {
    // Heap sort in place: repeatedly move the worst key to the end.
    for (int64_t e = count - 1; e > 0; --e) {
      const A td = hd[e * stride];
      const int64_t ti = hi[e * stride];
      hd[e * stride] = hd[0];
      hi[e * stride] = hi[0];
      sift_down(td, ti, e);
    }
    for (int64_t s = 0; s < count; ++s) {
      od[s] = static_cast<T>(hd[s * stride]);
      oi[s] = hi[s * stride];
    }
    for (int64_t s = count; s < k_out; ++s) {
      od[s] = static_cast<T>(pos_inf<A>());
      oi[s] = -1;
    }
  }
};

constexpr int kThreads = 128;  // queries per block

// (B, M, D) queries against (B, N, D) points with per-cloud lengths ql / pl;
// the k slots of each query row go to out_d / out_i (B, M, k); with
// use_radius only points with dist2 <= r2 are kept.
template <typename T>
struct KnnArgs {
  const T* q;
  const T* p;
  const int64_t* ql;
  const int64_t* pl;
  int64_t B, M, N, D, k;
  bool use_radius;
  acc_t<T> r2;
  T* out_d;
  int64_t* out_i;
};

}  // namespace cuda
}  // namespace pcgeom

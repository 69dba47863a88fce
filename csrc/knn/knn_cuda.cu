// CUDA kernels of pcgeom::knn and pcgeom::knn_backward (ball_query reuses the
// search through knn_search_cuda).
//
// Two exact search paths return the same answer as the CPU kernel, bit for bit
// (distances use pcgeom::sq_dist; --fmad=false keeps the compiler from fusing
// it into FMAs; the top-k lists order keys with pcgeom::key_less):
//
//   * brute force, for any D: one thread per query, the points streamed
//     through shared memory in tiles; no M x N buffer.
//   * a uniform grid, for 3-D clouds of many points: per cloud, a bounding box
//     and cell size on the device, a stable radix sort of the points by cell,
//     then each query visits shells of cells around its own until no unvisited
//     cell can hold a point that beats its k-th neighbour (or lies within the
//     radius).  The stopping bound is conservative against rounding, so the
//     grid never changes an answer, only the work.
//
// Per-query lists are registers for k <= 32 and a global-memory heap beyond,
// so k has no cap; indices are int64 in the heap and int32 in registers
// (N <= 2^31-1 there; larger clouds take the heap).
#include "knn/knn_cuda.h"

#include <optional>
#include <string>
#include <type_traits>

#include <torch/csrc/stable/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/segments_cuda.h"
#include "knn/knn_cuda_topk.cuh"

namespace pcgeom {
namespace cuda {
namespace {

constexpr int kThreads = 128;                          // queries per block
constexpr int64_t kSmemBudget = 48 * 1024;             // default dynamic smem limit
constexpr int64_t kHeapBudget = int64_t(256) << 20;    // heap workspace per launch
constexpr int64_t kMaxInt32 = 2147483647;

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

// pcgeom::sq_dist for a query held column-wise in shared memory (element d at
// a[d * stride]); the arithmetic -- coordinate order, accumulation type -- is
// exactly sq_dist's, which the bit-identity tests check.
template <typename T, typename A>
__device__ __forceinline__ A sq_dist_strided(const T* a, int64_t stride, const T* b, int64_t D) {
  A acc = A(0);
  for (int64_t d = 0; d < D; ++d) {
    const A diff = static_cast<A>(a[d * stride]) - static_cast<A>(b[d]);
    acc += diff * diff;
  }
  return acc;
}

// ---------------------------------------------------------------------------
// Brute force
// ---------------------------------------------------------------------------

// Blocks walk "tiles" of kThreads consecutive queries of one cloud.  DIM > 0 is
// a compile-time D with the query in registers; DIM == 0 is any D, the query
// staged column-wise in shared memory when it fits (else read from global).
template <typename T, typename List, int DIM>
__global__ void __launch_bounds__(kThreads)
    knn_brute_kernel(const KnnArgs<T> a, const HeapWork<acc_t<T>> work, int64_t tile_begin,
                     int64_t tile_end, int64_t tiles_per_batch, int tile_pts, bool stage_points,
                     bool stage_query) {
  using A = acc_t<T>;
  const int64_t D = DIM > 0 ? DIM : a.D;
  T* sp = reinterpret_cast<T*>(dynamic_smem());
  T* sq = sp + (stage_points ? tile_pts * D : 0);
  const int tid = threadIdx.x;
  const int64_t stride = (tile_end - tile_begin) * kThreads;

  for (int64_t t = tile_begin + blockIdx.x; t < tile_end; t += gridDim.x) {
    const int64_t b = t / tiles_per_batch;
    const int64_t m0 = (t % tiles_per_batch) * kThreads;
    const int64_t m = m0 + tid;
    const int64_t L = clamp_len(a.pl[b], a.N);
    const int64_t Lq = clamp_len(a.ql[b], a.M);
    const bool active = m < Lq;
    const int64_t r = b * a.M + m;
    List list(a.k, work, (t - tile_begin) * kThreads + tid, stride);

    T qreg[DIM > 0 ? DIM : 1];
    const T* qrow = a.q + r * D;
    if constexpr (DIM > 0) {
      if (active) {
#pragma unroll
        for (int d = 0; d < DIM; ++d) qreg[d] = qrow[d];
      }
    } else {
      if (stage_query) {
        if (active) {
          for (int64_t d = 0; d < D; ++d) sq[d * kThreads + tid] = qrow[d];
        }
        __syncthreads();
      }
    }

    // Uniform over the block: does any of its queries need the points?
    if (m0 < Lq) {
      for (int64_t j0 = 0; j0 < L; j0 += tile_pts) {
        const int cnt = static_cast<int>(L - j0 < tile_pts ? L - j0 : tile_pts);
        const T* tile = a.p + (b * a.N + j0) * D;
        if (stage_points) {
          for (int64_t e = tid; e < cnt * D; e += kThreads) sp[e] = tile[e];
          __syncthreads();
          tile = sp;
        }
        if (active) {
          for (int jj = 0; jj < cnt; ++jj) {
            A d;
            if constexpr (DIM > 0) {
              d = sq_dist<T, A>(qreg, tile + jj * DIM, DIM);
            } else {
              d = stage_query ? sq_dist_strided<T, A>(sq + tid, kThreads, tile + jj * D, D)
                              : sq_dist<T, A>(qrow, tile + jj * D, D);
            }
            if (a.use_radius && !(d <= a.r2)) continue;
            list.push(d, j0 + jj);
          }
        }
        if (stage_points) __syncthreads();
      }
    }
    if (m < a.M) list.write(a.out_d + r * a.k, a.out_i + r * a.k, a.k);
    __syncthreads();  // the next tile restages sq
  }
}

// ---------------------------------------------------------------------------
// Uniform grid (D == 3)
// ---------------------------------------------------------------------------

// Per cloud; `ok == 0` sends the cloud's queries to a brute-force scan (no
// finite point, or extents that overflow).
struct GridParams {
  double lo[3];
  double h;      // cell edge
  double inv_h;
  int64_t g[3];  // cells per axis
  int64_t ncell; // g0*g1*g2; cell id ncell is the bucket of non-finite points
  int64_t ok;
};

constexpr int kParamThreads = 256;
constexpr size_t kParamSmem = (6 * sizeof(double) + sizeof(long long)) * kParamThreads;
constexpr double kPointsPerCell = 2.0;
constexpr int64_t kMaxCellsPerAxis = int64_t(1) << 20;

template <typename T>
__device__ __forceinline__ bool load3(const T* p, double x[3]) {
  using A = acc_t<T>;
  bool finite = true;
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    x[d] = static_cast<double>(static_cast<A>(p[d]));
    finite = finite && isfinite(x[d]);
  }
  return finite;
}

__device__ __forceinline__ int64_t cell_coord(double u, int64_t g) {
  // Clamp in double first: a far-away (or huge) coordinate must not overflow int64.
  const double c = fmin(fmax(floor(u), 0.0), static_cast<double>(g - 1));
  return static_cast<int64_t>(c);
}

template <typename T>
__global__ void __launch_bounds__(kParamThreads)
    grid_params_kernel(const T* __restrict__ p, const int64_t* __restrict__ pl, int64_t B,
                       int64_t N, int64_t cmax, GridParams* __restrict__ out) {
  // Dynamic shared memory (kParamSmem bytes): per-thread partial boxes and counts.
  auto* s_min = reinterpret_cast<double(*)[kParamThreads]>(dynamic_smem());
  auto* s_max = s_min + 3;
  auto* s_cnt = reinterpret_cast<long long*>(s_min + 6);
  const int tid = threadIdx.x;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const int64_t L = clamp_len(pl[b], N);
    double mn[3], mx[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      mn[d] = INFINITY;
      mx[d] = -INFINITY;
    }
    long long cnt = 0;
    for (int64_t j = tid; j < L; j += kParamThreads) {
      double x[3];
      if (!load3(p + (b * N + j) * 3, x)) continue;
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        mn[d] = fmin(mn[d], x[d]);
        mx[d] = fmax(mx[d], x[d]);
      }
      ++cnt;
    }
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      s_min[d][tid] = mn[d];
      s_max[d][tid] = mx[d];
    }
    s_cnt[tid] = cnt;
    __syncthreads();
    for (int s = kParamThreads / 2; s > 0; s >>= 1) {
      if (tid < s) {
#pragma unroll
        for (int d = 0; d < 3; ++d) {
          s_min[d][tid] = fmin(s_min[d][tid], s_min[d][tid + s]);
          s_max[d][tid] = fmax(s_max[d][tid], s_max[d][tid + s]);
        }
        s_cnt[tid] += s_cnt[tid + s];
      }
      __syncthreads();
    }
    if (tid == 0) {
      GridParams g;
      g.ok = 0;
      g.h = 1.0;
      g.inv_h = 1.0;
      g.ncell = 1;
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        g.lo[d] = 0.0;
        g.g[d] = 1;
      }
      const long long n_finite = s_cnt[0];
      double e[3];
      double emax = 0.0;
      bool finite = n_finite > 0;
      for (int d = 0; d < 3; ++d) {
        e[d] = s_max[d][0] - s_min[d][0];
        finite = finite && isfinite(e[d]);
        if (finite) emax = fmax(emax, e[d]);
      }
      if (finite) {
        // Cubic cells sized for ~kPointsPerCell points per cell over the box of
        // the non-degenerate axes (computed in logs: tiny extents must not
        // underflow the volume).
        bool act[3];
        int n_act = 0;
        double log_vol = 0.0;
        for (int d = 0; d < 3; ++d) {
          act[d] = emax > 0.0 && e[d] > emax * 1e-6;
          if (act[d]) {
            ++n_act;
            log_vol += log(e[d]);
          }
        }
        const double target = fmax(1.0, static_cast<double>(n_finite) / kPointsPerCell);
        const double cap = static_cast<double>(cmax - 1);  // cell cmax-1 is reserved
        double h = n_act == 0 ? 1.0 : exp((log_vol - log(target)) / n_act);
        bool fits = false;
        int64_t gd[3] = {1, 1, 1};
        for (int it = 0; it < 32 && h > 0.0 && isfinite(h); ++it) {
          double total = 1.0;
          for (int d = 0; d < 3; ++d) {
            const double cells = act[d] ? floor(e[d] / h) + 1.0 : 1.0;
            gd[d] = static_cast<int64_t>(fmin(cells, static_cast<double>(kMaxCellsPerAxis)));
            total *= static_cast<double>(gd[d]);
          }
          if (total <= cap) {
            fits = true;
            break;
          }
          h *= pow(total / cap, 1.0 / (n_act > 0 ? n_act : 1)) * 1.001;
        }
        const double inv_h = 1.0 / h;
        if (fits && isfinite(inv_h) && inv_h > 0.0) {
          g.ok = 1;
          g.h = h;
          g.inv_h = inv_h;
          g.ncell = gd[0] * gd[1] * gd[2];
          for (int d = 0; d < 3; ++d) {
            g.lo[d] = s_min[d][0];
            g.g[d] = gd[d];
          }
        }
      }
      out[b] = g;
    }
    __syncthreads();  // shared arrays are reused by the next cloud
  }
}

// key = b * cmax + cell; non-finite points go to cell `ncell`; padding points
// (j >= lengths[b]) to the global sentinel B * cmax, past every cell.
template <typename T>
__global__ void grid_assign_kernel(const T* __restrict__ p, const int64_t* __restrict__ pl,
                                   const GridParams* __restrict__ gp, int64_t B, int64_t N,
                                   int64_t cmax, unsigned long long* __restrict__ keys,
                                   int32_t* __restrict__ vals) {
  const int64_t total = B * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / N;
    const int64_t j = i - b * N;
    unsigned long long key = static_cast<unsigned long long>(B * cmax);
    if (j < clamp_len(pl[b], N)) {
      const GridParams& g = gp[b];
      double x[3];
      const bool finite = load3(p + i * 3, x);
      int64_t cell = 0;
      if (g.ok) {
        if (!finite) {
          cell = g.ncell;
        } else {
          const int64_t c0 = cell_coord((x[0] - g.lo[0]) * g.inv_h, g.g[0]);
          const int64_t c1 = cell_coord((x[1] - g.lo[1]) * g.inv_h, g.g[1]);
          const int64_t c2 = cell_coord((x[2] - g.lo[2]) * g.inv_h, g.g[2]);
          cell = (c2 * g.g[1] + c1) * g.g[0] + c0;
        }
      }
      key = static_cast<unsigned long long>(b * cmax + cell);
    }
    keys[i] = key;
    vals[i] = static_cast<int32_t>(j);
  }
}

// The points' coordinates in cell order, so a cell's points are contiguous.
template <typename T>
__global__ void grid_gather_kernel(const T* __restrict__ p,
                                   const unsigned long long* __restrict__ keys,
                                   const int32_t* __restrict__ vals, int64_t B, int64_t N,
                                   int64_t cmax, T* __restrict__ sorted) {
  const int64_t total = B * N;
  const unsigned long long sentinel = static_cast<unsigned long long>(B * cmax);
  for (int64_t pos = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; pos < total;
       pos += int64_t(gridDim.x) * blockDim.x) {
    const unsigned long long key = keys[pos];
    if (key >= sentinel) continue;
    const int64_t b = static_cast<int64_t>(key) / cmax;
    const T* src = p + (b * N + vals[pos]) * 3;
    sorted[pos * 3 + 0] = src[0];
    sorted[pos * 3 + 1] = src[1];
    sorted[pos * 3 + 2] = src[2];
  }
}

__device__ __forceinline__ int64_t lo_clip(int64_t c) { return c > 0 ? c : 0; }
__device__ __forceinline__ int64_t hi_clip(int64_t c, int64_t g) { return c < g - 1 ? c : g - 1; }

template <typename T, typename List>
__global__ void __launch_bounds__(kThreads)
    knn_grid_kernel(const KnnArgs<T> a, const HeapWork<acc_t<T>> work, int64_t row_begin,
                    int64_t row_end, const GridParams* __restrict__ gp,
                    const int64_t* __restrict__ cstart, const int32_t* __restrict__ svals,
                    const T* __restrict__ spts, int64_t cmax) {
  using A = acc_t<T>;
  const int64_t stride = row_end - row_begin;
  for (int64_t r = row_begin + blockIdx.x * int64_t(kThreads) + threadIdx.x; r < row_end;
       r += int64_t(gridDim.x) * kThreads) {
    const int64_t b = r / a.M;
    const int64_t m = r - b * a.M;
    List list(a.k, work, r - row_begin, stride);
    if (m < clamp_len(a.ql[b], a.M)) {
      T qv[3];
      qv[0] = a.q[r * 3 + 0];
      qv[1] = a.q[r * 3 + 1];
      qv[2] = a.q[r * 3 + 2];
      double u[3];
      const bool q_finite = load3(qv, u);
      const GridParams& g = gp[b];
      const int64_t base = b * cmax;
      // The query in cell units; if that overflows (a huge coordinate against
      // a tiny grid), the shell bounds would be meaningless.
      bool use_grid = g.ok && q_finite;
      for (int d = 0; d < 3 && use_grid; ++d) {
        u[d] = (u[d] - g.lo[d]) * g.inv_h;
        use_grid = isfinite(u[d]);
      }
      int64_t c[3] = {0, 0, 0};
      if (use_grid) {
        for (int d = 0; d < 3; ++d) c[d] = cell_coord(u[d], g.g[d]);
      }
      // Any computed dist2 is >= (true distance)^2 * (1 - 1e-6) minus a few
      // subnormal units; the bound below stays under that, so stopping never
      // drops a point that the brute force would have kept.
      const double tiny = 4.0 * static_cast<double>(std::numeric_limits<A>::min());

      // The search is a generator of contiguous cell ranges with ONE place
      // that scans them: the unrolled top-k insertion is then inlined once,
      // which keeps the kernel's compile time and code size in check.
      //   phase 0: shells rr = 0, 1, ... around the query's cell (row by row;
      //            the rows inside a shell contribute only their two end cells);
      //   phase 1: the bucket of points with inf/NaN coordinates, if it matters;
      //   phase 2: every cell and that bucket -- the scan for a cloud without a
      //            usable grid or a query with inf/NaN coordinates (rare).
      int phase = use_grid ? 0 : 2;
      int64_t rr = 0, z = 0, y = 0, zlo = 0, zhi = -1, ylo = 0, yhi = -1, xlo = 0, xhi = -1;
      int piece = 0;
      bool new_shell = true;
      while (phase != 3) {
        int64_t first = 0, last = -1;  // the range to scan; empty by default
        if (phase == 0) {
          if (new_shell) {
            zlo = lo_clip(c[2] - rr);
            zhi = hi_clip(c[2] + rr, g.g[2]);
            ylo = lo_clip(c[1] - rr);
            yhi = hi_clip(c[1] + rr, g.g[1]);
            xlo = lo_clip(c[0] - rr);
            xhi = hi_clip(c[0] + rr, g.g[0]);
            z = zlo;
            y = ylo;
            piece = 0;
            new_shell = false;
          }
          if (z > zhi) {
            // Shell rr is done: stop when no unvisited cell can matter.
            bool covered = true;
            double gap = INFINITY;  // in cells, to the nearest unvisited cell
            for (int d = 0; d < 3; ++d) {
              if (c[d] - rr > 0) {
                covered = false;
                gap = fmin(gap, u[d] - static_cast<double>(c[d] - rr));
              }
              if (c[d] + rr < g.g[d] - 1) {
                covered = false;
                gap = fmin(gap, static_cast<double>(c[d] + rr + 1) - u[d]);
              }
            }
            const double dist = fmax(gap - 1e-6, 0.0) * g.h;
            const double bound = dist * dist * (1.0 - 1e-5) - tiny;
            if (covered || (list.full() && static_cast<double>(list.worst()) < bound) ||
                (a.use_radius && static_cast<double>(a.r2) < bound)) {
              phase = 1;
            } else {
              ++rr;
              new_shell = true;
            }
            continue;
          }
          const int64_t row = (z * g.g[1] + y) * g.g[0];
          if (z == c[2] - rr || z == c[2] + rr || y == c[1] - rr || y == c[1] + rr) {
            first = row + xlo;  // a whole row of the shell: one contiguous range
            last = row + xhi;
            piece = 2;
          } else if (piece == 0) {
            piece = 1;
            if (c[0] - rr >= 0) first = last = row + c[0] - rr;
          } else {
            piece = 2;
            if (rr > 0 && c[0] + rr <= g.g[0] - 1) first = last = row + c[0] + rr;
          }
          if (piece == 2) {
            piece = 0;
            if (++y > yhi) {
              y = ylo;
              ++z;
            }
          }
        } else if (phase == 1) {
          phase = 3;
          // Points with inf/NaN coordinates are at distance inf or NaN: they
          // can only matter while the k-th distance is not finite.
          const bool settled = list.full() && isfinite(static_cast<double>(list.worst()));
          if (!settled && !(a.use_radius && isfinite(static_cast<double>(a.r2)))) {
            first = last = g.ncell;
          }
        } else {
          phase = 3;
          first = 0;  // without a grid every point sits in cell 0; else all cells + bucket
          last = g.ncell;
        }
        if (first <= last) {
          const int64_t end = cstart[base + last + 1];
          for (int64_t pos = cstart[base + first]; pos < end; ++pos) {
            const A d = sq_dist<T, A>(qv, spts + pos * 3, 3);
            if (a.use_radius && !(d <= a.r2)) continue;
            list.push(d, svals[pos]);
          }
        }
      }
    }
    list.write(a.out_d + r * a.k, a.out_i + r * a.k, a.k);
  }
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

template <typename A, typename List>
constexpr bool is_heap() {
  return std::is_same<List, HeapTopK<A>>::value;
}

// Rows per launch so that the heap workspace stays within kHeapBudget.
template <typename A>
int64_t heap_rows(int64_t kcap) {
  const int64_t per_row = kcap * static_cast<int64_t>(sizeof(A) + sizeof(int64_t));
  return std::max<int64_t>(kThreads, kHeapBudget / std::max<int64_t>(per_row, 1));
}

template <typename A>
struct HeapStore {
  Tensor dist, idx;
  HeapWork<A> work{nullptr, nullptr, 0};
  HeapStore(int64_t rows, int64_t kcap, const Tensor& like, torch::headeronly::ScalarType acc) {
    dist = torch::stable::empty({rows * kcap}, acc, std::nullopt, like.device());
    idx = torch::stable::empty({rows * kcap}, torch::headeronly::ScalarType::Long, std::nullopt,
                               like.device());
    work = HeapWork<A>{static_cast<A*>(dist.mutable_data_ptr()), idx.mutable_data_ptr<int64_t>(),
                       kcap};
  }
};

template <typename T>
torch::headeronly::ScalarType acc_scalar_type() {
  return std::is_same<T, double>::value ? torch::headeronly::ScalarType::Double
                                        : torch::headeronly::ScalarType::Float;
}

template <typename T, typename List, int DIM>
void launch_brute(const KnnArgs<T>& a, const Tensor& like, cudaStream_t stream, const char* op) {
  using A = acc_t<T>;
  const int64_t D = a.D;
  const int64_t esize = static_cast<int64_t>(sizeof(T));
  bool stage_query = false;
  int64_t budget = kSmemBudget;
  if (DIM == 0 && D * kThreads * esize <= kSmemBudget / 2) {
    stage_query = true;
    budget -= D * kThreads * esize;
  }
  int64_t tile_pts = std::min<int64_t>(256, budget / (D * esize));
  const bool stage_points = tile_pts >= 4;
  if (!stage_points) tile_pts = 256;  // huge D: read points from global memory
  const size_t smem = static_cast<size_t>((stage_points ? tile_pts * D * esize : 0) +
                                          (stage_query ? D * kThreads * esize : 0));
  const int64_t tiles_per_batch = (a.M + kThreads - 1) / kThreads;
  const int64_t total = a.B * tiles_per_batch;
  int64_t chunk = total;
  std::optional<HeapStore<A>> store;
  HeapWork<A> work{nullptr, nullptr, 0};
  if constexpr (is_heap<A, List>()) {
    const int64_t kcap = std::min(a.k, std::max<int64_t>(a.N, 1));
    chunk = std::max<int64_t>(1, heap_rows<A>(kcap) / kThreads);
    chunk = std::min(chunk, total);
    store.emplace(chunk * kThreads, kcap, like, acc_scalar_type<T>());
    work = store->work;
  }
  for (int64_t t0 = 0; t0 < total; t0 += chunk) {
    const int64_t t1 = std::min(total, t0 + chunk);
    const unsigned int blocks = static_cast<unsigned int>(std::min<int64_t>(t1 - t0, 1 << 20));
    knn_brute_kernel<T, List, DIM><<<blocks, kThreads, smem, stream>>>(
        a, work, t0, t1, tiles_per_batch, static_cast<int>(tile_pts), stage_points, stage_query);
    check_launch(op, "knn_brute_kernel");
  }
}

// Device buffers of the grid; they live until the query kernels are enqueued
// (the caching allocator keeps them valid for work already on the stream).
struct GridBuild {
  Tensor params, keys_sorted, vals_sorted, cstart, sorted_pts;
  int64_t cmax = 0;
};

template <typename T>
GridBuild build_grid(const KnnArgs<T>& a, const Tensor& like, cudaStream_t stream,
                        const char* op) {
  GridBuild gb;
  const int64_t B = a.B, N = a.N;
  gb.cmax = N / static_cast<int64_t>(kPointsPerCell) + 2;
  const auto i64 = torch::headeronly::ScalarType::Long;
  const auto i32 = torch::headeronly::ScalarType::Int;
  gb.params = scratch_bytes(B * static_cast<int64_t>(sizeof(GridParams)), like);
  auto* params = reinterpret_cast<GridParams*>(gb.params.mutable_data_ptr<uint8_t>());
  grid_params_kernel<T><<<static_cast<unsigned int>(std::min<int64_t>(B, 65535)), kParamThreads,
                          kParamSmem, stream>>>(a.p, a.pl, B, N, gb.cmax, params);
  check_launch(op, "grid_params_kernel");

  const int64_t total = B * N;
  Tensor keys = torch::stable::empty({total}, i64, std::nullopt, like.device());
  Tensor vals = torch::stable::empty({total}, i32, std::nullopt, like.device());
  gb.keys_sorted = torch::stable::empty({total}, i64, std::nullopt, like.device());
  gb.vals_sorted = torch::stable::empty({total}, i32, std::nullopt, like.device());
  auto* k_in = reinterpret_cast<unsigned long long*>(keys.mutable_data_ptr<int64_t>());
  auto* k_out = reinterpret_cast<unsigned long long*>(gb.keys_sorted.mutable_data_ptr<int64_t>());
  grid_assign_kernel<T><<<blocks_for(total, 256), 256, 0, stream>>>(
      a.p, a.pl, params, B, N, gb.cmax, k_in, vals.mutable_data_ptr<int32_t>());
  check_launch(op, "grid_assign_kernel");
  const int64_t n_keys = B * gb.cmax;  // the padding sentinel
  sort_pairs(k_in, k_out, vals.const_data_ptr<int32_t>(), gb.vals_sorted.mutable_data_ptr<int32_t>(),
             total, bit_width(static_cast<unsigned long long>(n_keys)), stream, like, op);
  gb.cstart = torch::stable::empty({n_keys + 1}, i64, std::nullopt, like.device());
  segment_starts(k_out, total, n_keys, gb.cstart.mutable_data_ptr<int64_t>(), stream, op);
  gb.sorted_pts = torch::stable::empty({total, 3}, like.scalar_type(), std::nullopt, like.device());
  grid_gather_kernel<T><<<blocks_for(total, 256), 256, 0, stream>>>(
      a.p, k_out, gb.vals_sorted.const_data_ptr<int32_t>(), B, N, gb.cmax,
      gb.sorted_pts.mutable_data_ptr<T>());
  check_launch(op, "grid_gather_kernel");
  return gb;
}

template <typename T, typename List>
void launch_grid(const KnnArgs<T>& a, const GridBuild& gb, const Tensor& like,
                 cudaStream_t stream, const char* op) {
  using A = acc_t<T>;
  const int64_t rows = a.B * a.M;
  int64_t chunk = rows;
  std::optional<HeapStore<A>> store;
  HeapWork<A> work{nullptr, nullptr, 0};
  if constexpr (is_heap<A, List>()) {
    const int64_t kcap = std::min(a.k, std::max<int64_t>(a.N, 1));
    chunk = std::min(rows, heap_rows<A>(kcap));
    store.emplace(chunk, kcap, like, acc_scalar_type<T>());
    work = store->work;
  }
  const auto* params = reinterpret_cast<const GridParams*>(gb.params.const_data_ptr<uint8_t>());
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    knn_grid_kernel<T, List><<<blocks_for(r1 - r0, kThreads), kThreads, 0, stream>>>(
        a, work, r0, r1, params, gb.cstart.const_data_ptr<int64_t>(),
        gb.vals_sorted.const_data_ptr<int32_t>(), gb.sorted_pts.const_data_ptr<T>(), gb.cmax);
    check_launch(op, "knn_grid_kernel");
  }
}

// The grid pays off once a cloud is large and queried often; small problems
// (and D != 3) stay on the brute force, which has no setup cost.
bool want_grid(int64_t M, int64_t N, int64_t D, const char* op) {
  const std::string mode = path_override("PCGEOM_CUDA_KNN_PATH", op, {"brute", "grid"});
  const bool possible = D == 3 && N >= 1 && N <= kMaxInt32;
  if (mode == "brute" || !possible) return false;
  if (mode == "grid") return true;
  return N >= 8192 && M >= 128;
}

template <typename T, typename List>
void run_search(const KnnArgs<T>& a, bool grid, const Tensor& like, cudaStream_t stream,
                const char* op) {
  if (grid) {
    const GridBuild gb = build_grid<T>(a, like, stream, op);
    launch_grid<T, List>(a, gb, like, stream, op);
  } else if (a.D == 3) {
    launch_brute<T, List, 3>(a, like, stream, op);
  } else {
    launch_brute<T, List, 0>(a, like, stream, op);
  }
}

template <typename T>
void knn_dispatch(const KnnArgs<T>& a, const Tensor& like, cudaStream_t stream, const char* op) {
  using A = acc_t<T>;
  const bool grid = want_grid(a.M, a.N, a.D, op);
  // Register lists hold int32 indices: clouds past 2^31-1 points use the heap.
  const bool regs = a.N <= kMaxInt32;
  // Two register buckets: k <= 8 (chamfer's k=1, normals) keeps register
  // pressure and occupancy low; k <= 32 covers the grouping workloads.
  if (regs && a.k <= 8) {
    run_search<T, RegTopK<A, 8>>(a, grid, like, stream, op);
  } else if (regs && a.k <= 32) {
    run_search<T, RegTopK<A, 32>>(a, grid, like, stream, op);
  } else {
    run_search<T, HeapTopK<A>>(a, grid, like, stream, op);
  }
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------

// grad_query[r, d] = sum_s 2 g[r,s] (q[r,d] - p[idx[r,s], d]), in slot order.
template <typename T>
__global__ void knn_grad_query_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                      const T* __restrict__ p, const int64_t* __restrict__ idx,
                                      int64_t B, int64_t M, int64_t N, int64_t D, int64_t K,
                                      T* __restrict__ gq) {
  using A = acc_t<T>;
  const int64_t total = B * M * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / D;
    const int64_t d = e - r * D;
    const int64_t b = r / M;
    const A qd = static_cast<A>(q[e]);
    A acc = A(0);
    for (int64_t s = 0; s < K; ++s) {
      const int64_t j = idx[r * K + s];
      if (j < 0 || j >= N) continue;
      const A gs = static_cast<A>(g[r * K + s]);
      if (gs == A(0)) continue;
      const A diff = qd - static_cast<A>(p[(b * N + j) * D + d]);
      const A v = A(2) * gs * diff;
      acc += v;
    }
    gq[e] = static_cast<T>(acc);
  }
}

// grad_points[t, d] = -sum over the slots pointing at t (slot order) of
// 2 g (q - p[t]): the CPU kernel's order, without atomics.
template <typename T>
__global__ void knn_grad_points_kernel(const T* __restrict__ g, const T* __restrict__ q,
                                       const T* __restrict__ p, const int64_t* __restrict__ order,
                                       const int64_t* __restrict__ start, int64_t B, int64_t N,
                                       int64_t D, int64_t K, T* __restrict__ gp) {
  using A = acc_t<T>;
  const int64_t total = B * N * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / D;
    const int64_t d = e - t * D;
    const A pd = static_cast<A>(p[e]);
    A acc = A(0);
    const int64_t end = start[t + 1];
    for (int64_t pos = start[t]; pos < end; ++pos) {
      const int64_t slot = order[pos];
      const A gs = static_cast<A>(g[slot]);
      if (gs == A(0)) continue;
      const int64_t r = slot / K;
      const A diff = static_cast<A>(q[r * D + d]) - pd;
      const A v = A(2) * gs * diff;
      acc -= v;
    }
    gp[e] = static_cast<T>(acc);
  }
}


template <typename T>
KnnArgs<T> make_args(const Tensor& q, const Tensor& p, const Tensor& ql, const Tensor& pl,
                     int64_t k, bool use_radius, double radius2, Tensor& dist, Tensor& idx) {
  return KnnArgs<T>{q.const_data_ptr<T>(),
                    p.const_data_ptr<T>(),
                    ql.const_data_ptr<int64_t>(),
                    pl.const_data_ptr<int64_t>(),
                    q.size(0), q.size(1), p.size(1), q.size(2), k,
                    use_radius,
                    // rounded once from the double radius^2, as on the CPU
                    static_cast<acc_t<T>>(radius2),
                    dist.mutable_data_ptr<T>(),
                    idx.mutable_data_ptr<int64_t>()};
}

void check_common(const Tensor& query, const Tensor& points, const char* op) {
  check_rank(query, 3, op, "query", "(B, M, D)");
  check_rank(points, 3, op, "points", "(B, N, D)");
  check_on_gpu(query, op, "query");
}

std::tuple<Tensor, Tensor> knn_cuda(Tensor query, Tensor points, int64_t k, Tensor query_lengths,
                                    Tensor points_lengths) {
  return knn_search_cuda(query, points, k, query_lengths, points_lengths, false, 0.0, "knn");
}

std::tuple<Tensor, Tensor> knn_backward_cuda(Tensor grad_in, Tensor query_in, Tensor points_in,
                                             Tensor idx_in) {
  const char* op = "knn_backward";
  check_rank(grad_in, 3, op, "grad_dist2", "(B, M, k)");
  check_common(query_in, points_in, op);
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const int64_t K = idx_in.size(2);
  check_size(points_in, 0, B, op, "points", "(B, N, D)", "the B of query");
  check_size(points_in, 2, D, op, "points", "(B, N, D)", "the D of query");
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of query");
  check_size(idx_in, 1, M, op, "idx", "(B, M, k)", "the M of query");
  check_size(grad_in, 0, B, op, "grad_dist2", "(B, M, k)", "the B of query");
  check_size(grad_in, 1, M, op, "grad_dist2", "(B, M, k)", "the M of query");
  check_size(grad_in, 2, K, op, "grad_dist2", "(B, M, k)", "the k of idx");
  check_float_tensor(query_in, op, "query");
  check_same_dtype(points_in, query_in, op, "points", "query");
  check_same_dtype(grad_in, query_in, op, "grad_dist2", "query");
  check_int64(idx_in, op, "idx");
  // Index values are not read on the host (that would need a sync): the
  // kernels treat a slot outside [0, N) like the padding -1.
  const DeviceScope device(op, query_in,
                           {{points_in, "points"},
                            {idx_in, "idx"},
                            {grad_in, "grad_dist2"}});
  const Tensor g = torch::stable::contiguous(grad_in);
  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  Tensor gq = torch::stable::empty({B, M, D}, query.scalar_type(), std::nullopt, query.device());
  Tensor gp = torch::stable::empty({B, N, D}, query.scalar_type(), std::nullopt, query.device());
  if (gq.numel() == 0 && gp.numel() == 0) return std::make_tuple(gq, gp);
  const cudaStream_t stream = device.stream();
  PCGEOM_DISPATCH_FLOATING(query.scalar_type(), op, [&] {
    if (gq.numel() > 0) {
      knn_grad_query_kernel<scalar_t><<<blocks_for(gq.numel(), 256), 256, 0, stream>>>(
          g.const_data_ptr<scalar_t>(), query.const_data_ptr<scalar_t>(),
          points.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(), B, M, N, D, K,
          gq.mutable_data_ptr<scalar_t>());
      check_launch(op, "knn_grad_query_kernel");
    }
    if (gp.numel() > 0) {
      if (B * M * K == 0) {
        // No slot points anywhere: all-zero bits are +0.0 in every float dtype.
        PCGEOM_CUDA_CHECK(op, cudaMemsetAsync(gp.mutable_data_ptr(), 0,
                                              gp.numel() * sizeof(scalar_t), stream));
      } else {
        const SlotIndex si = build_slot_index(idx, B, M * K, N, stream, op);
        knn_grad_points_kernel<scalar_t><<<blocks_for(gp.numel(), 256), 256, 0, stream>>>(
            g.const_data_ptr<scalar_t>(), query.const_data_ptr<scalar_t>(),
            points.const_data_ptr<scalar_t>(), si.order.const_data_ptr<int64_t>(),
            si.start.const_data_ptr<int64_t>(), B, N, D, K, gp.mutable_data_ptr<scalar_t>());
        check_launch(op, "knn_grad_points_kernel");
      }
    }
  });
  return std::make_tuple(gq, gp);
}

}  // namespace

std::tuple<Tensor, Tensor> knn_search_cuda(const Tensor& query_in, const Tensor& points_in,
                                           int64_t k, const Tensor& query_lengths_in,
                                           const Tensor& points_lengths_in, bool use_radius,
                                           double radius2, const char* op) {
  check_search_args(query_in, points_in, k, query_lengths_in, points_lengths_in, op);
  check_on_gpu(query_in, op, "query");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  STD_TORCH_CHECK(D >= 1, op, ": points need at least one coordinate (D >= 1)");
  const DeviceScope device(op, query_in,
                           {{points_in, "points"},
                            {query_lengths_in, "query_lengths"},
                            {points_lengths_in, "points_lengths"}});

  const int64_t out_bytes = static_cast<int64_t>(query_in.element_size()) + 8;
  Tensor dist = alloc_output({B, M, k}, query_in.scalar_type(), query_in, op, "k", k,
                             "dist2 and idx", out_bytes);
  Tensor idx = alloc_output({B, M, k}, torch::headeronly::ScalarType::Long, query_in, op, "k", k,
                            "dist2 and idx", out_bytes);
  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  if (B * M == 0) return std::make_tuple(dist, idx);
  const cudaStream_t stream = device.stream();
  // The search kernels exist for the two accumulation types only (compile time
  // and binary size): float16/bfloat16 inputs are widened to float32 -- exactly,
  // so the distances are the same bits -- and the float32 distances are rounded
  // to the input dtype at the end, as the CPU kernel does when it stores them.
  const auto st = query.scalar_type();
  const bool is_double = st == torch::headeronly::ScalarType::Double;
  const bool is_float = st == torch::headeronly::ScalarType::Float;
  const auto f32 = torch::headeronly::ScalarType::Float;
  if (is_double) {
    knn_dispatch<double>(make_args<double>(query, points, ql, pl, k, use_radius, radius2, dist, idx),
                         query, stream, op);
    return std::make_tuple(dist, idx);
  }
  const Tensor qf = is_float ? query : torch::stable::contiguous(torch::stable::to(query, f32));
  const Tensor pf = is_float ? points : torch::stable::contiguous(torch::stable::to(points, f32));
  Tensor df = is_float ? dist : torch::stable::empty({B, M, k}, f32, std::nullopt, query.device());
  knn_dispatch<float>(make_args<float>(qf, pf, ql, pl, k, use_radius, radius2, df, idx), qf, stream,
                      op);
  if (!is_float) dist = torch::stable::to(df, st);
  return std::make_tuple(dist, idx);
}

}  // namespace cuda
}  // namespace pcgeom

PCGEOM_CUDA_KERNELS(m) {
  m.impl("knn", TORCH_BOX(&pcgeom::cuda::knn_cuda));
  m.impl("knn_backward", TORCH_BOX(&pcgeom::cuda::knn_backward_cuda));
}

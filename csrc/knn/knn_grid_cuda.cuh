// The uniform grid of the CUDA KNN (D == 3): build it, then search it.
//
// Per cloud, a bounding box and cell size computed on the device, a stable
// radix sort of the points by cell, then each query visits shells of cells
// around its own until no unvisited cell can hold a point that beats its k-th
// neighbour (or lies within the radius).  The stopping bound is conservative
// against rounding, so the grid never changes an answer, only the work:
// knn_cuda.cu chooses between it and the brute force (want_grid) and launches
// knn_grid_kernel; build_grid() below leaves the sorted cloud in a GridBuild.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <torch/csrc/stable/ops.h>

#include "common/cuda_utils.cuh"
#include "common/pcgeom_common.h"
#include "common/segments_cuda.h"
#include "knn/knn_cuda_topk.cuh"

namespace pcgeom {
namespace cuda {

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

}  // namespace cuda
}  // namespace pcgeom

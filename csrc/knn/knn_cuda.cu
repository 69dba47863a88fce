// CUDA kernels of pcgeom::knn and pcgeom::knn_backward (ball_query reuses the
// search through knn_search_cuda).
//
// Two exact search paths return the same answer as the CPU kernel, bit for bit
// (distances use pcgeom::sq_dist; --fmad=false keeps the compiler from fusing
// it into FMAs; the top-k lists order keys with pcgeom::key_less):
//
//   * brute force, for any D (here): one thread per query, the points streamed
//     through shared memory in tiles; no M x N buffer.
//   * a uniform grid, for 3-D clouds of many points (knn_grid_cuda.cuh); which
//     of the two runs is want_grid()'s choice, below.
//
// Per-query lists are registers for k <= 32 and a global-memory heap beyond
// (knn_cuda_topk.cuh), so k has no cap; indices are int64 in the heap and int32
// in registers (N <= 2^31-1 there; larger clouds take the heap).
#include "knn/knn_cuda.h"

#include <optional>
#include <string>
#include <type_traits>

#include <torch/csrc/stable/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/segments_cuda.h"
#include "knn/knn_cuda_topk.cuh"
#include "knn/knn_grid_cuda.cuh"

namespace pcgeom {
namespace cuda {
namespace {

constexpr int64_t kSmemBudget = 48 * 1024;             // default dynamic smem limit
constexpr int64_t kHeapBudget = int64_t(256) << 20;    // heap workspace per launch
constexpr int64_t kMaxInt32 = 2147483647;

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

std::tuple<Tensor, Tensor> knn_cuda(Tensor query, Tensor points, int64_t k, Tensor query_lengths,
                                    Tensor points_lengths) {
  return knn_search_cuda(query, points, k, query_lengths, points_lengths, false, 0.0, "knn");
}

std::tuple<Tensor, Tensor> knn_backward_cuda(Tensor grad_in, Tensor query_in, Tensor points_in,
                                             Tensor idx_in) {
  const char* op = "knn_backward";
  check_knn_backward_args(grad_in, query_in, points_in, idx_in, op);
  check_on_gpu(query_in, op, "query");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const int64_t K = idx_in.size(2);
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

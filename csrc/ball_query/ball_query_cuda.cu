// CUDA kernel of pcgeom::ball_query.
//
// order="distance": the CUDA KNN search restricted to dist2 <= radius^2 (the
// grid path also stops at the radius).
// order="index" (index_order=true): PointNet++'s selection, one thread per
// query scanning the points in index order until k are inside the ball --
// the row function is ball_query_common.h's, the CPU kernel's, so both devices
// return the same answer bit for bit (--fmad=false keeps sq_dist unfused).
#include <torch/csrc/stable/library.h>

#include "ball_query/ball_query_common.h"
#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "knn/knn_cuda.h"

namespace pcgeom {
namespace cuda {
namespace {

using ST = torch::headeronly::ScalarType;

template <typename T>
__global__ void ball_query_index_kernel(const T* __restrict__ q, const T* __restrict__ p,
                                        const int64_t* __restrict__ ql,
                                        const int64_t* __restrict__ pl, int64_t B, int64_t M,
                                        int64_t N, int64_t D, int64_t K, acc_t<T> r2,
                                        T* __restrict__ od, int64_t* __restrict__ oi) {
  const int64_t rows = B * M;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = r / M;
    const int64_t m = r - b * M;
    // Lengths are clamped so that a direct torch.ops call can never read out of bounds.
    const int64_t L = m < clamp_len(ql[b], M) ? clamp_len(pl[b], N) : 0;
    ball_query_index_row<T, acc_t<T>>(q + r * D, p + b * N * D, L, D, K, r2, od + r * K,
                                      oi + r * K);
  }
}

std::tuple<Tensor, Tensor> ball_query_index_cuda(const Tensor& query_in, const Tensor& points_in,
                                                 double radius2, int64_t k,
                                                 const Tensor& query_lengths_in,
                                                 const Tensor& points_lengths_in) {
  const char* op = "ball_query";
  check_search_args(query_in, points_in, k, query_lengths_in, points_lengths_in, op);
  check_on_gpu(query_in, op, "query");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const DeviceScope device(op, query_in,
                           {{points_in, "points"},
                            {query_lengths_in, "query_lengths"},
                            {points_lengths_in, "points_lengths"}});
  const int64_t out_bytes = static_cast<int64_t>(query_in.element_size()) + 8;
  Tensor dist = alloc_output({B, M, k}, query_in.scalar_type(), query_in, op, "k", k,
                             "dist2 and idx", out_bytes);
  Tensor idx = alloc_output({B, M, k}, ST::Long, query_in, op, "k", k, "dist2 and idx", out_bytes);
  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  if (B * M == 0) return std::make_tuple(dist, idx);
  const cudaStream_t stream = device.stream();
  constexpr int kThreads = 128;
  PCGEOM_DISPATCH_FLOATING(query.scalar_type(), op, [&] {
    ball_query_index_kernel<scalar_t><<<blocks_for(B * M, kThreads), kThreads, 0, stream>>>(
        query.const_data_ptr<scalar_t>(), points.const_data_ptr<scalar_t>(),
        ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M, N, D, k,
        // rounded once from the double radius^2, as on the CPU
        static_cast<acc_t<scalar_t>>(radius2), dist.mutable_data_ptr<scalar_t>(),
        idx.mutable_data_ptr<int64_t>());
    check_launch(op, "ball_query_index_kernel");
  });
  return std::make_tuple(dist, idx);
}

std::tuple<Tensor, Tensor> ball_query_cuda(Tensor query, Tensor points, double radius, int64_t k,
                                           Tensor query_lengths, Tensor points_lengths,
                                           bool index_order) {
  STD_TORCH_CHECK(radius >= 0.0, "ball_query: radius must be >= 0, got ", radius);
  // radius*radius in double, rounded once to the accumulation type, as on the CPU.
  if (index_order) {
    return ball_query_index_cuda(query, points, radius * radius, k, query_lengths,
                                 points_lengths);
  }
  return knn_search_cuda(query, points, k, query_lengths, points_lengths, true, radius * radius,
                         "ball_query");
}

}  // namespace
}  // namespace cuda
}  // namespace pcgeom

PCGEOM_CUDA_KERNELS(m) {
  m.impl("ball_query", TORCH_BOX(&pcgeom::cuda::ball_query_cuda));
}

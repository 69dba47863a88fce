// CUDA kernel of pcgeom::pca_normals: one thread per neighbourhood, the same
// per-row math as the CPU kernel (pca_normals_common.h), so both devices give
// the same answers.  Indices outside [-1, N) cannot come from pcgeom.knn and
// are rejected by the Python wrapper; here they are treated like -1 (left
// out), so a direct torch.ops call can never read out of bounds.
#include <tuple>

#include <torch/csrc/stable/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "pca_normals/pca_normals_common.h"

namespace pcgeom {
namespace cuda {
namespace {

template <typename T>
__global__ void pca_normals_kernel(const T* __restrict__ points, const int64_t* __restrict__ idx,
                                   int64_t M, int64_t N, int64_t K, int64_t rows,
                                   T* __restrict__ normals, T* __restrict__ curvature) {
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = r / M;
    pca_normal_row<T, A>(points + b * N * 3, idx + r * K, K, N, normals + r * 3, curvature + r);
  }
}

std::tuple<Tensor, Tensor> pca_normals_cuda(Tensor points_in, Tensor idx_in) {
  const char* op = "pca_normals";
  check_pca_args(points_in, idx_in, op);
  check_on_gpu(points_in, op, "points");
  const DeviceScope device(op, points_in, {{idx_in, "idx"}});
  const auto dtype = points_in.scalar_type();
  const int64_t B = points_in.size(0), N = points_in.size(1);
  const int64_t M = idx_in.size(1), K = idx_in.size(2);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  Tensor normals = torch::stable::empty({B, M, 3}, dtype, std::nullopt, points.device());
  Tensor curvature = torch::stable::empty({B, M}, dtype, std::nullopt, points.device());
  if (B * M == 0) return {normals, curvature};
  const cudaStream_t stream = device.stream();
  PCGEOM_DISPATCH_FLOATING(dtype, op, [&] {
    pca_normals_kernel<scalar_t><<<blocks_for(B * M, 128), 128, 0, stream>>>(
        points.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(), M, N, K, B * M,
        normals.mutable_data_ptr<scalar_t>(), curvature.mutable_data_ptr<scalar_t>());
    check_launch(op, "pca_normals_kernel");
  });
  return {normals, curvature};
}

}  // namespace
}  // namespace cuda
}  // namespace pcgeom

PCGEOM_CUDA_KERNELS(m) {
  m.impl("pca_normals", TORCH_BOX(&pcgeom::cuda::pca_normals_cuda));
}

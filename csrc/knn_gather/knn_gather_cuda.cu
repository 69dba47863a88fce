// CUDA kernels of pcgeom::knn_gather and its backward.
//
// The backward sums the gradient of every slot into its source point in slot
// order through a device-built slot index (common/segments_cuda.h) instead of
// atomics: deterministic, and bit-identical to the CPU kernel.  Indices outside
// [-1, N) cannot come from pcgeom.knn and are rejected by the Python wrapper;
// here they are treated like -1 (zeros / no gradient), so a direct torch.ops
// call can never read or write out of bounds.
#include <torch/csrc/stable/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/segments_cuda.h"

namespace pcgeom {
namespace cuda {
namespace {

template <typename T>
__global__ void gather_kernel(const T* __restrict__ x, const int64_t* __restrict__ idx, int64_t N,
                              int64_t C, int64_t MK, int64_t total, T* __restrict__ out) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t slot = e / C;
    const int64_t c = e - slot * C;
    const int64_t b = slot / MK;
    const int64_t j = idx[slot];
    out[e] = (j >= 0 && j < N) ? x[(b * N + j) * C + c] : static_cast<T>(0.0f);
  }
}

template <typename T>
__global__ void gather_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ order,
                                       const int64_t* __restrict__ start, int64_t C, int64_t total,
                                       T* __restrict__ out) {
  using A = acc_t<T>;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / C;
    const int64_t c = e - t * C;
    A acc = A(0);
    const int64_t end = start[t + 1];
    for (int64_t pos = start[t]; pos < end; ++pos) acc += static_cast<A>(g[order[pos] * C + c]);
    out[e] = static_cast<T>(acc);
  }
}

Tensor knn_gather_cuda(Tensor x_in, Tensor idx_in) {
  const char* op = "knn_gather";
  check_rank(x_in, 3, op, "x", "(B, N, C)");
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  check_float_tensor(x_in, op, "x");
  check_int64(idx_in, op, "idx");
  const int64_t B = x_in.size(0), N = x_in.size(1), C = x_in.size(2);
  const int64_t M = idx_in.size(1), K = idx_in.size(2);
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of x");
  check_on_gpu(x_in, op, "x");
  const DeviceScope device(op, x_in, {{idx_in, "idx"}});
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  Tensor out = torch::stable::empty({B, M, K, C}, x.scalar_type(), std::nullopt, x.device());
  if (out.numel() == 0) return out;
  const cudaStream_t stream = device.stream();
  PCGEOM_DISPATCH_FLOATING(x.scalar_type(), op, [&] {
    gather_kernel<scalar_t><<<blocks_for(out.numel(), 256), 256, 0, stream>>>(
        x.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(), N, C, M * K, out.numel(),
        out.mutable_data_ptr<scalar_t>());
    check_launch(op, "gather_kernel");
  });
  return out;
}

Tensor knn_gather_backward_cuda(Tensor grad_in, Tensor idx_in, int64_t n) {
  const char* op = "knn_gather_backward";
  check_rank(grad_in, 4, op, "grad", "(B, M, k, C)");
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  check_float_tensor(grad_in, op, "grad");
  check_int64(idx_in, op, "idx");
  const int64_t B = grad_in.size(0), M = grad_in.size(1), K = grad_in.size(2);
  const int64_t C = grad_in.size(3);
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of grad");
  check_size(idx_in, 1, M, op, "idx", "(B, M, k)", "the M of grad");
  check_size(idx_in, 2, K, op, "idx", "(B, M, k)", "the k of grad");
  STD_TORCH_CHECK(n >= 0, op, ": n must be >= 0, got ", n);
  check_on_gpu(grad_in, op, "grad");
  const DeviceScope device(op, grad_in, {{idx_in, "idx"}});
  const Tensor g = torch::stable::contiguous(grad_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  Tensor out = alloc_output({B, n, C}, g.scalar_type(), g, op, "n", n, "the gradient",
                            static_cast<int64_t>(g.element_size()));
  if (out.numel() == 0) return out;
  const cudaStream_t stream = device.stream();
  PCGEOM_DISPATCH_FLOATING(g.scalar_type(), op, [&] {
    if (B * M * K == 0) {
      // Nothing points anywhere: all-zero bits are +0.0 in every float dtype.
      PCGEOM_CUDA_CHECK(op, cudaMemsetAsync(out.mutable_data_ptr(), 0,
                                            out.numel() * sizeof(scalar_t), stream));
      return;
    }
    const SlotIndex si = build_slot_index(idx, B, M * K, n, stream, op);
    gather_backward_kernel<scalar_t><<<blocks_for(out.numel(), 256), 256, 0, stream>>>(
        g.const_data_ptr<scalar_t>(), si.order.const_data_ptr<int64_t>(),
        si.start.const_data_ptr<int64_t>(), C, out.numel(), out.mutable_data_ptr<scalar_t>());
    check_launch(op, "gather_backward_kernel");
  });
  return out;
}

}  // namespace
}  // namespace cuda
}  // namespace pcgeom

PCGEOM_CUDA_KERNELS(m) {
  m.impl("knn_gather", TORCH_BOX(&pcgeom::cuda::knn_gather_cuda));
  m.impl("knn_gather_backward", TORCH_BOX(&pcgeom::cuda::knn_gather_backward_cuda));
}

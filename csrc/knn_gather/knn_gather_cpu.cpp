// CPU kernels of pcgeom::knn_gather and its backward.
#include <algorithm>
#include <cstring>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/pcgeom_common.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

template <typename T>
void gather_kernel(const T* x, const int64_t* idx, int64_t B, int64_t N, int64_t C, int64_t MK,
                   T* out) {
  pcgeom::parallel_for(0, B * MK, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / MK;
      const int64_t j = idx[r];
      T* o = out + r * C;
      if (j < 0) {
        std::fill(o, o + C, static_cast<T>(0.0f));
      } else {
        std::memcpy(o, x + (b * N + j) * C, sizeof(T) * C);
      }
    }
  });
}

template <typename T>
void gather_backward_kernel(const T* g, const int64_t* idx, int64_t B, int64_t N, int64_t C,
                            int64_t MK, T* out) {
  using A = acc_t<T>;
  // One batch element per task and a fixed accumulation order: deterministic.
  pcgeom::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(N * C);
    for (int64_t b = begin; b < end; ++b) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t r = 0; r < MK; ++r) {
        const int64_t j = idx[b * MK + r];
        if (j < 0) continue;
        const T* gr = g + (b * MK + r) * C;
        for (int64_t c = 0; c < C; ++c) acc[j * C + c] += static_cast<A>(gr[c]);
      }
      for (int64_t i = 0; i < N * C; ++i) out[b * N * C + i] = static_cast<T>(acc[i]);
    }
  });
}

Tensor knn_gather_cpu(Tensor x_in, Tensor idx_in) {
  const char* op = "knn_gather";
  check_rank(x_in, 3, op, "x", "(B, N, C)");
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  check_float_tensor(x_in, op, "x");
  check_int64(idx_in, op, "idx");
  check_cpu(idx_in, op, "idx");
  const int64_t B = x_in.size(0), N = x_in.size(1), C = x_in.size(2);
  const int64_t M = idx_in.size(1), K = idx_in.size(2);
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of x");
  const Tensor x = torch::stable::contiguous(x_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  check_index_range_cpu(idx.const_data_ptr<int64_t>(), idx.numel(), N, op, "idx");
  Tensor out = torch::stable::empty({B, M, K, C}, x.scalar_type(), std::nullopt, x.device());
  if (out.numel() == 0) return out;
  PCGEOM_DISPATCH_FLOATING(x.scalar_type(), op, [&] {
    gather_kernel<scalar_t>(x.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(), B, N, C,
                            M * K, out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

Tensor knn_gather_backward_cpu(Tensor grad_in, Tensor idx_in, int64_t n) {
  const char* op = "knn_gather_backward";
  check_rank(grad_in, 4, op, "grad", "(B, M, k, C)");
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  check_float_tensor(grad_in, op, "grad");
  check_int64(idx_in, op, "idx");
  check_cpu(idx_in, op, "idx");
  const int64_t B = grad_in.size(0), M = grad_in.size(1), K = grad_in.size(2);
  const int64_t C = grad_in.size(3);
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of grad");
  check_size(idx_in, 1, M, op, "idx", "(B, M, k)", "the M of grad");
  check_size(idx_in, 2, K, op, "idx", "(B, M, k)", "the k of grad");
  STD_TORCH_CHECK(n >= 0, op, ": n must be >= 0, got ", n);
  const Tensor g = torch::stable::contiguous(grad_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  check_index_range_cpu(idx.const_data_ptr<int64_t>(), idx.numel(), n, op, "idx");
  Tensor out = alloc_output({B, n, C}, g.scalar_type(), g, op, "n", n, "the gradient",
                            static_cast<int64_t>(g.element_size()));
  if (out.numel() == 0) return out;
  PCGEOM_DISPATCH_FLOATING(g.scalar_type(), op, [&] {
    gather_backward_kernel<scalar_t>(g.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(),
                                     B, n, C, M * K, out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("knn_gather", TORCH_BOX(&pcgeom::knn_gather_cpu));
  m.impl("knn_gather_backward", TORCH_BOX(&pcgeom::knn_gather_backward_cpu));
}

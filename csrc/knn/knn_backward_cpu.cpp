// CPU kernel of pcgeom::knn_backward (ball_query's backward too): the gradient
// of dist2 = |q - p[idx]|^2 with respect to the queries and the points.  The op
// is registered with knn in knn_cpu.cpp; knn_cpu.h declares it.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/pcgeom_common.h"
#include "knn/knn_cpu.h"

namespace pcgeom {

using torch::stable::Tensor;

namespace {

template <typename T>
void knn_backward_cpu_kernel(const T* g, const T* q, const T* p, const int64_t* idx, int64_t B,
                             int64_t M, int64_t N, int64_t D, int64_t K, T* gq, T* gp) {
  using A = acc_t<T>;
  // One batch element per task: points' gradients accumulate in a fixed order,
  // so the result is deterministic.
  pcgeom::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> accp(N * D);
    std::vector<A> accq(D);
    for (int64_t b = begin; b < end; ++b) {
      std::fill(accp.begin(), accp.end(), A(0));
      for (int64_t m = 0; m < M; ++m) {
        const int64_t r = b * M + m;
        const T* qr = q + r * D;
        std::fill(accq.begin(), accq.end(), A(0));
        for (int64_t s = 0; s < K; ++s) {
          const int64_t j = idx[r * K + s];
          if (j < 0 || j >= N) continue;
          const A gs = static_cast<A>(g[r * K + s]);
          if (gs == A(0)) continue;
          const T* pj = p + (b * N + j) * D;
          for (int64_t d = 0; d < D; ++d) {
            const A diff = static_cast<A>(qr[d]) - static_cast<A>(pj[d]);
            const A v = A(2) * gs * diff;
            accq[d] += v;
            accp[j * D + d] -= v;
          }
        }
        for (int64_t d = 0; d < D; ++d) gq[r * D + d] = static_cast<T>(accq[d]);
      }
      for (int64_t i = 0; i < N * D; ++i) gp[b * N * D + i] = static_cast<T>(accp[i]);
    }
  });
}

}  // namespace

std::tuple<Tensor, Tensor> knn_backward_cpu(Tensor grad_in, Tensor query_in, Tensor points_in,
                                            Tensor idx_in) {
  const char* op = "knn_backward";
  check_knn_backward_args(grad_in, query_in, points_in, idx_in, op);
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const int64_t K = idx_in.size(2);
  check_cpu(points_in, op, "points");
  check_cpu(idx_in, op, "idx");
  check_cpu(grad_in, op, "grad_dist2");
  // Like knn_gather: -1 is padding, anything else outside [0, N) is an error
  // (one pass; the kernel would skip such slots, the CUDA kernel does).
  const Tensor g = torch::stable::contiguous(grad_in);
  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  check_index_range_cpu(idx.const_data_ptr<int64_t>(), idx.numel(), N, op, "idx");
  Tensor gq = torch::stable::empty({B, M, D}, query.scalar_type(), std::nullopt, query.device());
  Tensor gp = torch::stable::empty({B, N, D}, query.scalar_type(), std::nullopt, query.device());
  if (B == 0) return std::make_tuple(gq, gp);
  PCGEOM_DISPATCH_FLOATING(query.scalar_type(), op, [&] {
    knn_backward_cpu_kernel<scalar_t>(g.const_data_ptr<scalar_t>(),
                                      query.const_data_ptr<scalar_t>(),
                                      points.const_data_ptr<scalar_t>(),
                                      idx.const_data_ptr<int64_t>(), B, M, N, D, K,
                                      gq.mutable_data_ptr<scalar_t>(),
                                      gp.mutable_data_ptr<scalar_t>());
  });
  return std::make_tuple(gq, gp);
}

}  // namespace pcgeom

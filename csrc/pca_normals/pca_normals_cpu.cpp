// CPU kernel of pcgeom::pca_normals: per neighbourhood, the PCA normal and the
// surface variation (the math is in pca_normals_common.h, shared with CUDA).
#include <algorithm>
#include <cstdint>
#include <tuple>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/pcgeom_common.h"
#include "pca_normals/pca_normals_common.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

std::tuple<Tensor, Tensor> pca_normals_cpu(Tensor points_in, Tensor idx_in) {
  const char* op = "pca_normals";
  check_pca_args(points_in, idx_in, op);
  check_cpu(points_in, op, "points");
  check_cpu(idx_in, op, "idx");
  const int64_t B = points_in.size(0), N = points_in.size(1);
  const int64_t M = idx_in.size(1), K = idx_in.size(2);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
  const int64_t* ip = idx.const_data_ptr<int64_t>();
  check_index_range_cpu(ip, idx.numel(), N, op, "idx");
  Tensor normals = torch::stable::empty({B, M, 3}, points.scalar_type(), std::nullopt, points.device());
  Tensor curvature = torch::stable::empty({B, M}, points.scalar_type(), std::nullopt, points.device());
  if (B * M == 0) return {normals, curvature};
  PCGEOM_DISPATCH_FLOATING(points.scalar_type(), op, [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* p = points.const_data_ptr<scalar_t>();
    scalar_t* on = normals.mutable_data_ptr<scalar_t>();
    scalar_t* oc = curvature.mutable_data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K));
    parallel_for(0, B * M, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / M;
        pca_normal_row<scalar_t, A>(p + b * N * 3, ip + r * K, K, N, on + r * 3, oc + r);
      }
    });
  });
  return {normals, curvature};
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("pca_normals", TORCH_BOX(&pcgeom::pca_normals_cpu));
}

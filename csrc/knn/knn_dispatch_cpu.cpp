// pcgeom::_knn_cpu_plan, a test-only op: which kernel the CPU KNN plan
// (knn_dispatch_cpu.h) picks for a knn / ball_query call, per cloud, so that
// tests can assert the plan on both sides of each boundary (every path gives
// the same answer, so the results alone cannot show it).
//
// Registered with a library fragment of its own: it is not part of pcgeom's
// public op set (no Python schema, reference or fake kernel), and the leading
// underscore keeps it out of the op lists that enumerate the public ones.
#include <cmath>
#include <cstdint>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/pcgeom_common.h"
#include "knn/knn_dispatch_cpu.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

// Finite points among the first L rows of a contiguous (L x D) block, as the
// tree and blocked kernels count them before planning a cloud.
template <typename T>
int64_t count_finite(const T* pb, int64_t L, int64_t D) {
  using A = acc_t<T>;
  int64_t n = 0;
  for (int64_t j = 0; j < L; ++j) {
    bool fin = true;
    for (int64_t d = 0; d < D; ++d) fin = fin && std::isfinite(static_cast<A>(pb[j * D + d]));
    n += fin ? 1 : 0;
  }
  return n;
}

// Same arguments and checks as knn.  Returns int64 (B,): per cloud, the
// KnnPath code of the kernel that searches it (1 tree, 2 blocked, 3 tile,
// 4 brute), or 0 for a cloud with no query or no point (only padding is
// written).  Inside the blocked kernel a cloud whose norms could overflow, and
// in every kernel a NaN/inf query, still goes to the tile path: those are the
// kernels' own fallbacks, not the plan's choice.
Tensor knn_cpu_plan(Tensor query, Tensor points, int64_t k, Tensor query_lengths,
                    Tensor points_lengths) {
  const char* op = "_knn_cpu_plan";
  check_search_args(query, points, k, query_lengths, points_lengths, op);
  check_cpu(query, op, "query");
  check_cpu(points, op, "points");
  check_cpu(query_lengths, op, "query_lengths");
  check_cpu(points_lengths, op, "points_lengths");
  const int64_t B = query.size(0), M = query.size(1), D = query.size(2);
  const int64_t N = points.size(1);
  const Tensor ql = torch::stable::contiguous(query_lengths);
  const Tensor pl = torch::stable::contiguous(points_lengths);
  check_range_cpu(ql.const_data_ptr<int64_t>(), B, 0, M, op, "query_lengths");
  check_range_cpu(pl.const_data_ptr<int64_t>(), B, 0, N, op, "points_lengths");
  const KnnPath forced = knn_path_override(op);

  Tensor out = torch::stable::empty({B}, torch::headeronly::ScalarType::Long, std::nullopt,
                                    query.device());
  int64_t* code = out.mutable_data_ptr<int64_t>();
  const int64_t* qlp = ql.const_data_ptr<int64_t>();
  const int64_t* plp = pl.const_data_ptr<int64_t>();
  const KnnPath call = plan(KnnPath::kAuto, M, N, D, k, forced);
  const bool per_cloud = call == KnnPath::kTree || call == KnnPath::kBlocked;
  // Only a per-cloud plan reads coordinates (the brute path's inputs may be
  // too large to copy).
  const Tensor pc = per_cloud ? torch::stable::contiguous(points) : points;
  for (int64_t b = 0; b < B; ++b) {
    if (qlp[b] == 0 || plp[b] == 0) {
      code[b] = static_cast<int64_t>(KnnPath::kAuto);
      continue;
    }
    KnnPath path = call;
    if (per_cloud) {
      int64_t n_finite = 0;
      PCGEOM_DISPATCH_FLOATING(pc.scalar_type(), op, [&] {
        n_finite = count_finite<scalar_t>(pc.const_data_ptr<scalar_t>() + b * N * D, plp[b], D);
      });
      path = plan(call, qlp[b], n_finite, D, k, forced);
    }
    code[b] = static_cast<int64_t>(path);
  }
  return out;
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_FRAGMENT(pcgeom, m) {
  m.def("_knn_cpu_plan(Tensor query, Tensor points, int k, Tensor query_lengths, "
        "Tensor points_lengths) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("_knn_cpu_plan", TORCH_BOX(&pcgeom::knn_cpu_plan));
}

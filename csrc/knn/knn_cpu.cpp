// CPU kernel of pcgeom::knn (also the search behind ball_query), and the
// registration of knn and knn_backward (knn/knn_backward_cpu.cpp).
//
// Exact paths: a KD-tree per cloud for D <= 8 (knn/knn_lowd_cpu.cpp), blocked
// GEMM candidate selection with exact re-ranking (knn/knn_blocked_cpu.cpp),
// vectorised distance tiles with a partial selection (knn/knn_tile_cpu.cpp)
// and the brute scan below; which one serves a call, and a cloud, is the plan
// of knn/knn_dispatch_cpu.h.
// Every path evaluates the distances it keeps with the one formula of
// pcgeom_common.h and ranks with the pcgeom key order, so all of them return
// the reference's answer bit for bit.  float16/bfloat16 inputs run on float32
// copies (the conversion is exact and is what the formula does anyway); the
// distances are rounded back with aten's conversion, like the reference.
#include "knn/knn_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/topk_cpu.h"
#include "knn/knn_blocked_cpu.h"
#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_lowd_cpu.h"
#include "knn/knn_problem_cpu.h"
#include "knn/knn_rows_cpu.h"
#include "knn/knn_tile_cpu.h"

namespace pcgeom {

using torch::stable::Tensor;

namespace {

using cpu::brute_rows;
using cpu::with_topk;
using cpu::write_row;

// ---------------------------------------------------------------------------
// The brute path (any D): one query row against every point.

// Rows past a cloud's query length find nothing, so write_row pads them too.
template <typename A>
void knn_brute_kernel(const KnnProblem<A>& pr) {
  const A *q = pr.q, *p = pr.p;
  const int64_t *ql = pr.ql, *pl = pr.pl;
  const int64_t B = pr.B, M = pr.M, N = pr.N, D = pr.D, K = pr.K;
  const bool use_radius = pr.use_radius;
  const A r2 = pr.r2();
  pcgeom::parallel_for(0, B * M, grain_for(N * D), [&](int64_t begin, int64_t end) {
    std::vector<A> bd(K);
    std::vector<int64_t> bi(K);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / M;
      const int64_t m = r % M;
      int64_t found = 0;
      if (m < ql[b]) {
        found = with_topk<A>(bd.data(), bi.data(), K, [&](auto& top) {
          brute_rows<A, A>(q + r * D, p + b * N * D, pl[b], D, top, use_radius, r2);
        });
      }
      write_row<A, A>(bd.data(), bi.data(), found, K, pr.out_d + r * K, pr.out_i + r * K);
    }
  });
}

// The search on float32 / float64 arrays.  The kernel is the plan's
// (knn_dispatch_cpu.h); pr.forced is the override.
template <typename A>
void knn_search_acc(const KnnProblem<A>& pr) {
  switch (plan(KnnPath::kAuto, pr.M, pr.N, pr.D, pr.K, pr.forced)) {
    case KnnPath::kTree:
      knn_lowd_cpu<A>(pr);
      return;
    case KnnPath::kBlocked:
      knn_blocked_cpu<A>(pr);
      return;
    case KnnPath::kBrute:
      knn_brute_kernel<A>(pr);
      return;
    default:
      knn_tile_cpu<A>(pr);
      return;
  }
}

// The problem on the accumulation-dtype copies (A = float or double).
template <typename A>
KnnProblem<A> make_problem(const Tensor& query, const Tensor& points, const Tensor& ql,
                           const Tensor& pl, int64_t k, bool use_radius, double radius2,
                           bool self_query, KnnPath forced, Tensor& dist, Tensor& idx) {
  KnnProblem<A> pr;
  pr.q = query.const_data_ptr<A>();
  pr.p = points.const_data_ptr<A>();
  pr.ql = ql.const_data_ptr<int64_t>();
  pr.pl = pl.const_data_ptr<int64_t>();
  pr.B = query.size(0);
  pr.M = query.size(1);
  pr.N = points.size(1);
  pr.D = query.size(2);
  pr.K = k;
  pr.use_radius = use_radius;
  pr.radius2 = radius2;
  pr.self_query = self_query;
  pr.forced = forced;
  pr.out_d = dist.mutable_data_ptr<A>();
  pr.out_i = idx.mutable_data_ptr<int64_t>();
  return pr;
}

// Same storage, same layout: the query set is the point set (self query).
bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.const_data_ptr() != b.const_data_ptr() || a.dim() != b.dim()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != b.size(d) || a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

}  // namespace

std::tuple<Tensor, Tensor> knn_search_cpu(const Tensor& query_in, const Tensor& points_in,
                                          int64_t k, const Tensor& query_lengths_in,
                                          const Tensor& points_lengths_in, bool use_radius,
                                          double radius2, const char* op) {
  check_search_args(query_in, points_in, k, query_lengths_in, points_lengths_in, op);
  check_cpu(points_in, op, "points");
  check_cpu(query_lengths_in, op, "query_lengths");
  check_cpu(points_lengths_in, op, "points_lengths");
  const int64_t B = query_in.size(0), M = query_in.size(1);
  const int64_t N = points_in.size(1);
  const auto dtype = query_in.scalar_type();

  const bool self_query = same_tensor(query_in, points_in);
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  check_range_cpu(ql.const_data_ptr<int64_t>(), B, 0, M, op, "query_lengths");
  check_range_cpu(pl.const_data_ptr<int64_t>(), B, 0, N, op, "points_lengths");
  const KnnPath forced = knn_path_override(op);

  // Half precision runs on exact float32 copies (the formula converts anyway).
  const bool half = dtype == torch::headeronly::ScalarType::Half ||
                    dtype == torch::headeronly::ScalarType::BFloat16;
  const auto acc_type = half ? torch::headeronly::ScalarType::Float : dtype;
  // Outputs first: a k too large for memory is reported before any copy is made.
  const int64_t acc_size = acc_type == torch::headeronly::ScalarType::Float ? 4 : 8;
  Tensor dist = alloc_output({B, M, k}, acc_type, query_in, op, "k", k, "dist2 and idx",
                             acc_size + 8);
  Tensor idx = alloc_output({B, M, k}, torch::headeronly::ScalarType::Long, query_in, op, "k", k,
                            "dist2 and idx", acc_size + 8);
  Tensor query = half ? torch::stable::to(query_in, acc_type) : query_in;
  query = torch::stable::contiguous(query);
  Tensor points = query;
  if (!self_query) {
    points = half ? torch::stable::to(points_in, acc_type) : points_in;
    points = torch::stable::contiguous(points);
  }

  if (B * M > 0) {
    if (acc_type == torch::headeronly::ScalarType::Float) {
      knn_search_acc<float>(make_problem<float>(query, points, ql, pl, k, use_radius, radius2,
                                                self_query, forced, dist, idx));
    } else {
      knn_search_acc<double>(make_problem<double>(query, points, ql, pl, k, use_radius, radius2,
                                                  self_query, forced, dist, idx));
    }
  }
  if (half) dist = torch::stable::to(dist, dtype);
  return std::make_tuple(dist, idx);
}

namespace {

std::tuple<Tensor, Tensor> knn_cpu(Tensor query, Tensor points, int64_t k, Tensor query_lengths,
                                   Tensor points_lengths) {
  return knn_search_cpu(query, points, k, query_lengths, points_lengths, false, 0.0, "knn");
}

}  // namespace

}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("knn", TORCH_BOX(&pcgeom::knn_cpu));
  m.impl("knn_backward", TORCH_BOX(&pcgeom::knn_backward_cpu));
}

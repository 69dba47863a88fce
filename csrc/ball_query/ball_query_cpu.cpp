// CPU kernel of pcgeom::ball_query.
//
// order="distance": the KNN search restricted to dist2 <= radius^2 (the KD-tree
// and scan paths of knn_cpu.cpp stop at the radius).
// order="index" (index_order=true): PointNet++'s selection -- per query, the
// first k points inside the ball in index order -- as a direct scan that stops
// as soon as k points are found.  Distances use pcgeom::sq_dist, the shared
// formula, so both orders agree with the reference bit for bit.
#include <algorithm>
#include <cstdint>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ball_query/ball_query_common.h"
#include "common/checks.h"
#include "knn/knn_cpu.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;
using ST = torch::headeronly::ScalarType;

template <typename A>
void ball_query_index_kernel(const A* q, const A* p, const int64_t* ql, const int64_t* pl,
                             int64_t B, int64_t M, int64_t N, int64_t D, int64_t K, A r2, A* od,
                             int64_t* oi) {
  // A query stops after k hits, so its cost is at most N distance evaluations.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, N * D));
  pcgeom::parallel_for(0, B * M, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / M;
      const int64_t m = r - b * M;
      const int64_t L = m < ql[b] ? pl[b] : 0;
      ball_query_index_row<A, A>(q + r * D, p + b * N * D, L, D, K, r2, od + r * K, oi + r * K);
    }
  });
}

std::tuple<Tensor, Tensor> ball_query_index_cpu(const Tensor& query_in, const Tensor& points_in,
                                                double radius2, int64_t k,
                                                const Tensor& query_lengths_in,
                                                const Tensor& points_lengths_in) {
  const char* op = "ball_query";
  check_search_args(query_in, points_in, k, query_lengths_in, points_lengths_in, op);
  check_cpu(points_in, op, "points");
  check_cpu(query_lengths_in, op, "query_lengths");
  check_cpu(points_lengths_in, op, "points_lengths");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const auto dtype = query_in.scalar_type();
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  check_range_cpu(ql.const_data_ptr<int64_t>(), B, 0, M, op, "query_lengths");
  check_range_cpu(pl.const_data_ptr<int64_t>(), B, 0, N, op, "points_lengths");

  // Half precision runs on exact float32 copies (the formula converts anyway).
  const bool half = dtype == ST::Half || dtype == ST::BFloat16;
  const auto acc_type = half ? ST::Float : dtype;
  const int64_t acc_size = acc_type == ST::Float ? 4 : 8;
  Tensor dist = alloc_output({B, M, k}, acc_type, query_in, op, "k", k, "dist2 and idx",
                             acc_size + 8);
  Tensor idx = alloc_output({B, M, k}, ST::Long, query_in, op, "k", k, "dist2 and idx",
                            acc_size + 8);
  const Tensor query = torch::stable::contiguous(half ? torch::stable::to(query_in, acc_type) : query_in);
  const Tensor points =
      torch::stable::contiguous(half ? torch::stable::to(points_in, acc_type) : points_in);
  if (B * M > 0) {
    if (acc_type == ST::Float) {
      ball_query_index_kernel<float>(query.const_data_ptr<float>(), points.const_data_ptr<float>(),
                                     ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B,
                                     M, N, D, k, static_cast<float>(radius2),
                                     dist.mutable_data_ptr<float>(),
                                     idx.mutable_data_ptr<int64_t>());
    } else {
      ball_query_index_kernel<double>(
          query.const_data_ptr<double>(), points.const_data_ptr<double>(),
          ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M, N, D, k, radius2,
          dist.mutable_data_ptr<double>(), idx.mutable_data_ptr<int64_t>());
    }
  }
  if (half) dist = torch::stable::to(dist, dtype);
  return std::make_tuple(dist, idx);
}

std::tuple<Tensor, Tensor> ball_query_cpu(Tensor query, Tensor points, double radius, int64_t k,
                                          Tensor query_lengths, Tensor points_lengths,
                                          bool index_order) {
  STD_TORCH_CHECK(radius >= 0.0, "ball_query: radius must be >= 0, got ", radius);
  // radius*radius is formed in double and rounded once to the accumulation type,
  // exactly as the reference path does.
  if (index_order) {
    return ball_query_index_cpu(query, points, radius * radius, k, query_lengths, points_lengths);
  }
  return knn_search_cpu(query, points, k, query_lengths, points_lengths, true, radius * radius,
                        "ball_query");
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("ball_query", TORCH_BOX(&pcgeom::ball_query_cpu));
}

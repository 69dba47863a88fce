// CPU kernel of pcgeom::ball_query.
//
// order="distance": the KNN search restricted to dist2 <= radius^2 (the KD-tree
// and scan paths of knn_cpu.cpp stop at the radius).
// order="index" (index_order=true): PointNet++'s selection -- per query, the
// first k points inside the ball in index order.  Where the KNN plan picks the
// KD-tree it is served by the nearest-first search (index_from_nearest below);
// otherwise, and for the rows that search leaves, by a direct scan that stops
// as soon as k points are found.  Distances use pcgeom::sq_dist, the shared
// formula, so both orders agree with the reference bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ball_query/ball_query_common.h"
#include "common/checks.h"
#include "knn/knn_cpu.h"
#include "knn/knn_dispatch_cpu.h"

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

// Sorts the first n slots of a row by index, each distance with its index.
template <typename A>
void sort_by_index(A* d, int64_t* i, int64_t n) {
  if (n <= 48) {  // balls of a few dozen points: insertion sort beats std::sort
    for (int64_t a = 1; a < n; ++a) {
      const int64_t ia = i[a];
      const A da = d[a];
      int64_t b = a;
      for (; b > 0 && i[b - 1] > ia; --b) {
        i[b] = i[b - 1];
        d[b] = d[b - 1];
      }
      i[b] = ia;
      d[b] = da;
    }
    return;
  }
  std::vector<std::pair<int64_t, A>> v(n);
  for (int64_t a = 0; a < n; ++a) v[a] = {i[a], d[a]};
  std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (int64_t a = 0; a < n; ++a) {
    i[a] = v[a].first;
    d[a] = v[a].second;
  }
}

// Slots in use at the front of a nearest-first row (the rest are idx = -1).
inline int64_t found_in(const int64_t* i, int64_t K) {
  int64_t n = 0;
  while (n < K && i[n] >= 0) ++n;
  return n;
}

// order="index" from the nearest-first search (float32/float64, the tree's
// plan).  A row whose last slot stays empty holds the query's whole ball --
// the same points, with the same dist2, that the scan would test -- so the
// first k in index order are that row sorted by index.  The scan instead reads
// the cloud until k points are inside, the whole cloud for a ball of fewer
// than k: at PyG's radius_graph sizes (a few dozen neighbours, 10^5 points a
// cloud) that is almost every row.  Full rows are searched again with 4x the
// slots while the plan still picks the tree, the rest get the scan.
template <typename A>
void index_from_nearest(const Tensor& query, const Tensor& points, const Tensor& ql,
                        const Tensor& pl, int64_t K, double radius2, KnnPath forced, A* od,
                        int64_t* oi, const char* op) {
  const int64_t B = query.size(0), M = query.size(1), D = query.size(2);
  const int64_t N = points.size(1);
  const int64_t* plp = pl.const_data_ptr<int64_t>();
  const A* q = query.const_data_ptr<A>();
  const A* p = points.const_data_ptr<A>();
  const A r2 = static_cast<A>(radius2);
  // What a full row (its kc slots all used) needs next: the ball's size if the
  // density were uniform out to r (kc points within the kc-th distance) prices
  // both routes -- the scan reads about n * K / ball points before it has K,
  // the search again costs a few dozen point visits per point of the ball.
  // Dense balls (many more points than K) go to the scan, which stops early.
  constexpr double kSearchCost = 32.0;
  const bool always_search = forced == KnnPath::kTree;
  auto ball_estimate = [&](const A* dr, int64_t kc) {
    const double last = static_cast<double>(dr[kc - 1]);
    if (!(last > 0.0)) return std::numeric_limits<double>::infinity();
    return static_cast<double>(kc) * std::pow(static_cast<double>(r2) / last, 0.5 * static_cast<double>(D));
  };
  // 0: the row is complete; 1: search again; 2: scan.
  auto next_step = [&](const A* dr, const int64_t* ir, int64_t kc, int64_t b, double* est) -> char {
    if (ir[kc - 1] < 0 || kc >= plp[b]) return 0;
    *est = ball_estimate(dr, kc);
    if (always_search) return 1;
    return kSearchCost * *est * *est < static_cast<double>(plp[b]) * static_cast<double>(K) ? 1 : 2;
  };
  std::vector<char> step(B * M, 0);
  std::vector<double> est(B * M, 0.0);
  pcgeom::parallel_for(0, B * M, grain_for(4 * K), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t* ir = oi + r * K;
      step[r] = next_step(od + r * K, ir, K, r / M, &est[r]);
      if (step[r] == 0) sort_by_index(od + r * K, ir, found_in(ir, K));
    }
  });
  std::vector<int64_t> rows, scan;  // ascending, so grouped by cloud
  double widest = 0.0;
  for (int64_t r = 0; r < B * M; ++r) {
    if (step[r] == 1) {
      rows.push_back(r);
      widest = std::max(widest, est[r]);
    } else if (step[r] == 2) {
      scan.push_back(r);
    }
  }
  int64_t k2 = K;
  while (!rows.empty()) {
    // Room for the widest ball expected, at least twice and at most 8x the
    // slots of the last round (a row of duplicates expects an infinite ball).
    const double want = std::min(1.25 * widest + 1.0, 8.0 * static_cast<double>(k2));
    k2 = std::min<int64_t>(std::max<int64_t>(2 * k2, static_cast<int64_t>(want)), N);
    // The full rows as a padded batch of their own, cloud by cloud.
    std::vector<int64_t> count(B, 0), start(B, 0);
    for (int64_t r : rows) ++count[r / M];
    int64_t M2 = 0;
    for (int64_t b = 0; b < B; ++b) M2 = std::max(M2, count[b]);
    for (size_t j = 1; j < rows.size(); ++j) {
      const int64_t b = rows[j] / M;
      if (b != rows[j - 1] / M) start[b] = static_cast<int64_t>(j);
    }
    Tensor q2 = alloc_output({B, M2, D}, query.scalar_type(), query, op, "k", K, "the full rows",
                             static_cast<int64_t>(sizeof(A)));
    Tensor ql2 = torch::stable::empty({B}, ScalarType::Long, std::nullopt, query.device());
    A* q2p = q2.mutable_data_ptr<A>();
    std::memset(q2p, 0, sizeof(A) * B * M2 * D);
    int64_t* ql2p = ql2.mutable_data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) ql2p[b] = count[b];
    for (size_t j = 0; j < rows.size(); ++j) {
      const int64_t b = rows[j] / M;
      std::memcpy(q2p + (b * M2 + (static_cast<int64_t>(j) - start[b])) * D, q + rows[j] * D,
                  sizeof(A) * D);
    }
    auto [d2, i2] = knn_search_cpu(q2, points, k2, ql2, pl, true, radius2, op);
    A* d2p = d2.mutable_data_ptr<A>();
    int64_t* i2p = i2.mutable_data_ptr<int64_t>();
    std::vector<char> next(rows.size(), 0);
    std::vector<double> next_est(rows.size(), 0.0);
    pcgeom::parallel_for(0, static_cast<int64_t>(rows.size()), grain_for(4 * k2),
                         [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const int64_t r = rows[j], b = r / M;
        const int64_t s = b * M2 + (j - start[b]);
        int64_t* ir = i2p + s * k2;
        A* dr = d2p + s * k2;
        next[j] = next_step(dr, ir, k2, b, &next_est[j]);
        if (next[j] != 0) continue;
        const int64_t n = found_in(ir, k2);
        sort_by_index(dr, ir, n);
        const int64_t keep = std::min(n, K);
        std::copy(ir, ir + keep, oi + r * K);
        std::copy(dr, dr + keep, od + r * K);
        for (int64_t t = keep; t < K; ++t) {
          oi[r * K + t] = -1;
          od[r * K + t] = pos_inf<A>();
        }
      }
    });
    std::vector<int64_t> left;
    widest = 0.0;
    for (size_t j = 0; j < rows.size(); ++j) {
      if (next[j] == 1) {
        left.push_back(rows[j]);
        widest = std::max(widest, next_est[j]);
      } else if (next[j] == 2) {
        scan.push_back(rows[j]);
      }
    }
    rows.swap(left);
  }
  pcgeom::parallel_for(0, static_cast<int64_t>(scan.size()), grain_for(N * D),
                       [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int64_t r = scan[j], b = r / M;
      ball_query_index_row<A, A>(q + r * D, p + b * N * D, plp[b], D, K, r2, od + r * K, oi + r * K);
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
  // The nearest-first route (index_from_nearest) where the tree serves the
  // search and the ball is finite: an infinite radius would make the
  // non-finite points' distances count, which the scan alone decides.
  const KnnPath forced = knn_path_override(op);
  const bool finite_ball = acc_type == ST::Float ? std::isfinite(static_cast<float>(radius2))
                                                 : std::isfinite(radius2);
  if (!half && finite_ball && B * M > 0 && plan(KnnPath::kAuto, M, N, D, k, forced) == KnnPath::kTree) {
    auto [dist, idx] = knn_search_cpu(query_in, points_in, k, ql, pl, true, radius2, op);
    const Tensor query = torch::stable::contiguous(query_in);
    const Tensor points = torch::stable::contiguous(points_in);
    if (acc_type == ST::Float) {
      index_from_nearest<float>(query, points, ql, pl, k, radius2, forced,
                                dist.mutable_data_ptr<float>(), idx.mutable_data_ptr<int64_t>(), op);
    } else {
      index_from_nearest<double>(query, points, ql, pl, k, radius2, forced,
                                 dist.mutable_data_ptr<double>(), idx.mutable_data_ptr<int64_t>(), op);
    }
    return std::make_tuple(dist, idx);
  }
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

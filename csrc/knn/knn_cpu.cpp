// CPU kernels of pcgeom::knn and pcgeom::knn_backward (exact brute force).
#include "knn/knn_cpu.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "knn/knn_common.h"

namespace pcgeom {

using torch::stable::Tensor;

namespace {

// Below this k an insertion list beats a partial sort of all candidates.
constexpr int64_t kInsertionMaxK = 64;

template <typename T>
void knn_brute_cpu_kernel(const T* q, const T* p, const int64_t* ql, const int64_t* pl, int64_t B,
                          int64_t M, int64_t N, int64_t D, int64_t K, bool use_radius,
                          double radius2, T* out_d, int64_t* out_i) {
  using A = acc_t<T>;
  const A r2 = static_cast<A>(radius2);
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, N));
  torch::stable::parallel_for(0, B * M, grain, [&](int64_t begin, int64_t end) {
    std::vector<A> best_d(K);
    std::vector<int64_t> best_i(K);
    std::vector<std::pair<A, int64_t>> cand;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / M;
      const int64_t m = r % M;
      T* od = out_d + r * K;
      int64_t* oi = out_i + r * K;
      int64_t found = 0;
      if (m < ql[b]) {
        const T* qr = q + r * D;
        const T* pb = p + b * N * D;
        const int64_t L = pl[b];
        if (K <= kInsertionMaxK) {
          SortedTopK<A> top(best_d.data(), best_i.data(), K);
          for (int64_t j = 0; j < L; ++j) {
            const A d = sq_dist<T, A>(qr, pb + j * D, D);
            if (use_radius && !(d <= r2)) continue;
            top.push(d, j);
          }
          found = top.count;
        } else {
          cand.clear();
          for (int64_t j = 0; j < L; ++j) {
            const A d = sq_dist<T, A>(qr, pb + j * D, D);
            if (use_radius && !(d <= r2)) continue;
            cand.emplace_back(d, j);
          }
          found = std::min<int64_t>(K, static_cast<int64_t>(cand.size()));
          std::partial_sort(cand.begin(), cand.begin() + found, cand.end(),
                            [](const std::pair<A, int64_t>& x, const std::pair<A, int64_t>& y) {
                              return key_less(x.first, x.second, y.first, y.second);
                            });
          for (int64_t s = 0; s < found; ++s) {
            best_d[s] = cand[s].first;
            best_i[s] = cand[s].second;
          }
        }
      }
      for (int64_t s = 0; s < found; ++s) {
        od[s] = static_cast<T>(best_d[s]);
        oi[s] = best_i[s];
      }
      for (int64_t s = found; s < K; ++s) {
        od[s] = static_cast<T>(pos_inf<A>());
        oi[s] = -1;
      }
    }
  });
}

template <typename T>
void knn_backward_cpu_kernel(const T* g, const T* q, const T* p, const int64_t* idx, int64_t B,
                             int64_t M, int64_t N, int64_t D, int64_t K, T* gq, T* gp) {
  using A = acc_t<T>;
  // One batch element per task: points' gradients accumulate in a fixed order,
  // so the result is deterministic.
  torch::stable::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
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

std::tuple<Tensor, Tensor> knn_search_cpu(const Tensor& query_in, const Tensor& points_in,
                                          int64_t k, const Tensor& query_lengths_in,
                                          const Tensor& points_lengths_in, bool use_radius,
                                          double radius2, const char* op) {
  check_rank(query_in, 3, op, "query");
  check_rank(points_in, 3, op, "points");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  STD_TORCH_CHECK(points_in.size(0) == B && points_in.size(2) == D, op,
                  ": query and points must share batch size and dimension");
  STD_TORCH_CHECK(query_in.scalar_type() == points_in.scalar_type(), op,
                  ": query and points must have the same dtype");
  STD_TORCH_CHECK(k >= 1, op, ": k must be >= 1, got ", k);
  check_int64_vector(query_lengths_in, B, op, "query_lengths");
  check_int64_vector(points_lengths_in, B, op, "points_lengths");

  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  check_range_cpu(ql.const_data_ptr<int64_t>(), B, 0, M, op, "query_lengths");
  check_range_cpu(pl.const_data_ptr<int64_t>(), B, 0, N, op, "points_lengths");

  Tensor dist = torch::stable::empty({B, M, k}, query.scalar_type(), std::nullopt, query.device());
  Tensor idx = torch::stable::empty({B, M, k}, torch::headeronly::ScalarType::Long, std::nullopt,
                                    query.device());
  if (B * M == 0) return std::make_tuple(dist, idx);
  PCGEOM_DISPATCH_FLOATING(query.scalar_type(), op, [&] {
    knn_brute_cpu_kernel<scalar_t>(query.const_data_ptr<scalar_t>(),
                                   points.const_data_ptr<scalar_t>(), ql.const_data_ptr<int64_t>(),
                                   pl.const_data_ptr<int64_t>(), B, M, N, D, k, use_radius,
                                   radius2, dist.mutable_data_ptr<scalar_t>(),
                                   idx.mutable_data_ptr<int64_t>());
  });
  return std::make_tuple(dist, idx);
}

std::tuple<Tensor, Tensor> knn_backward_cpu(Tensor grad_in, Tensor query_in, Tensor points_in,
                                            Tensor idx_in) {
  const char* op = "knn_backward";
  check_rank(query_in, 3, op, "query");
  check_rank(points_in, 3, op, "points");
  check_rank(idx_in, 3, op, "idx");
  check_rank(grad_in, 3, op, "grad_dist2");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const int64_t K = idx_in.size(2);
  STD_TORCH_CHECK(idx_in.size(0) == B && idx_in.size(1) == M && grad_in.size(0) == B &&
                      grad_in.size(1) == M && grad_in.size(2) == K,
                  op, ": grad_dist2 and idx must have shape (B, M, k)");
  STD_TORCH_CHECK(grad_in.scalar_type() == query_in.scalar_type(), op,
                  ": grad_dist2 must have the dtype of query");
  const Tensor g = torch::stable::contiguous(grad_in);
  const Tensor query = torch::stable::contiguous(query_in);
  const Tensor points = torch::stable::contiguous(points_in);
  const Tensor idx = torch::stable::contiguous(idx_in);
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

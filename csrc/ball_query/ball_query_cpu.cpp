// CPU kernel of pcgeom::ball_query.
//
// order="distance": the KNN search restricted to dist2 <= radius^2 (the KD-tree
// and scan paths of knn_cpu.cpp stop at the radius).
// order="index" (index_order=true): PointNet++'s selection -- per query, the
// first k points inside the ball in index order.  Where the KNN plan picks the
// KD-tree, from each query's whole ball collected in a tree of the cloud
// (index_order_tree below); otherwise, and for very full balls, by a direct
// scan that stops as soon as k points are found.  Distances use
// pcgeom::sq_dist, the shared formula, so both orders agree with the
// reference bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ball_query/ball_query_common.h"
#include "common/checks.h"
#include "common/kdtree_cpu.h"
#include "knn/knn_cpu.h"
#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_tree_cpu.h"

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

// The index-order answer of one query from its whole ball, cnt points
// (bi index, bd dist2) in any order: the K lowest indices, ascending, then
// padding.  Balls are mostly a few dozen points: an insertion sort on the
// index alone is faster there than std::sort.
template <typename A>
void write_first_by_index(int32_t* bi, A* bd, int64_t cnt, int64_t K, A* dr, int64_t* ir) {
  const int64_t keep = std::min(cnt, K);
  if (cnt <= 64) {
    for (int64_t a = 1; a < cnt; ++a) {
      const int32_t ia = bi[a];
      const A da = bd[a];
      int64_t b = a;
      for (; b > 0 && bi[b - 1] > ia; --b) {
        bi[b] = bi[b - 1];
        bd[b] = bd[b - 1];
      }
      bi[b] = ia;
      bd[b] = da;
    }
    for (int64_t s = 0; s < keep; ++s) {
      ir[s] = bi[s];
      dr[s] = bd[s];
    }
  } else {
    std::vector<std::pair<int32_t, A>> v(cnt);
    for (int64_t a = 0; a < cnt; ++a) v[a] = {bi[a], bd[a]};
    auto by_index = [](const std::pair<int32_t, A>& x, const std::pair<int32_t, A>& y) {
      return x.first < y.first;
    };
    if (cnt > K) std::nth_element(v.begin(), v.begin() + K, v.end(), by_index);
    std::sort(v.begin(), v.begin() + keep, by_index);
    for (int64_t s = 0; s < keep; ++s) {
      ir[s] = v[s].first;
      dr[s] = v[s].second;
    }
  }
  for (int64_t s = keep; s < K; ++s) {
    ir[s] = -1;
    dr[s] = pos_inf<A>();
  }
}

// order="index" through a KD-tree per cloud (D <= 8, finite r2): each
// query's whole ball, then its first K by index.  The scan it replaces reads
// the cloud until K points are inside -- the whole cloud for a ball of fewer
// than K, which is most rows at PyG's radius_graph sizes (a few dozen
// neighbours, 10^5 points a cloud).  Queries go in groups of nearby ones (a
// leaf's points for a self query, else the queries sharing a home leaf): one
// traversal by box-to-box distance lists the leaves the group can reach, and
// each query scans those its own box bound does not rule out.  A box is
// skipped only when its shrunk bound exceeds r2, which no point inside can
// then beat (kdtree_cpu.h), and each kept dist2 is the shared formula's.  A
// ball past 16 K points goes to the scan instead, which stops early there.
// Points with a NaN/inf coordinate are never inside a finite ball, and a query
// with one has an empty ball.  Two parallel regions in all (the trees, then
// every group of every cloud): each region costs thread wake-ups.
template <int D, typename A>
struct IndexOrderCloud {
  cpu::KdTree<D, A> tree;
  int64_t n = 0;  // finite points in the tree
  std::vector<int32_t> order;  // the searched queries, group after group
  std::vector<int64_t> first;  // group starts in order
};

// Builds cloud b's tree and groups; `parallel`: the build may use threads.
template <int D, typename A>
void prepare_index_order_cloud(const A* qb, int64_t Mq, const A* pb, int64_t L, bool parallel,
                               IndexOrderCloud<D, A>& c) {
  std::vector<int32_t> finite;
  for (int64_t j = 0; j < L; ++j) {
    if (cpu::all_finite<D, A>(pb + j * D)) finite.push_back(static_cast<int32_t>(j));
  }
  c.n = static_cast<int64_t>(finite.size());
  if (c.n == 0 || Mq == 0) return;
  cpu::KdBuilder<D, A> bl(&c.tree);
  bl.init(c.n, cpu::kTreeLeafSize);
  for (int64_t i = 0; i < c.n; ++i) {
    auto& rec = bl.rec(i);
    for (int d = 0; d < D; ++d) rec.c[d] = pb[finite[i] * D + d];
    rec.idx = finite[i];
  }
  const int64_t threads = parallel ? std::max<int64_t>(1, torch::stable::get_num_threads()) : 1;
  const int64_t cut = threads > 1 ? std::max<int64_t>(8192, c.n / (4 * threads)) : int64_t(1) << 40;
  std::vector<typename cpu::KdBuilder<D, A>::Task> tasks;
  bl.split_top(cut, &tasks);
  if (tasks.size() > 1) {
    pcgeom::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) bl.build_task(tasks[i]);
    });
  } else {
    for (const auto& t : tasks) bl.build_task(t);
  }
  bl.finish();
  const cpu::KdTree<D, A>& t = c.tree;
  std::vector<char> grouped(Mq, 0);
  if (qb == pb) {  // the tree's leaves are the groups
    for (const int32_t leaf : t.leaves) {
      const int64_t at = static_cast<int64_t>(c.order.size());
      for (int32_t pos = t.nodes[leaf].begin; pos < t.nodes[leaf].end; ++pos) {
        const int32_t m = t.index[pos];
        if (m < Mq) {
          c.order.push_back(m);
          grouped[m] = 1;
        }
      }
      if (static_cast<int64_t>(c.order.size()) > at) c.first.push_back(at);
    }
  }
  // The other finite queries, bucketed by home leaf, at most kMaxGroup a group.
  std::vector<int32_t> home(Mq, -1);
  for (int64_t m = 0; m < Mq; ++m) {
    if (!grouped[m] && cpu::all_finite<D, A>(qb + m * D)) home[m] = cpu::home_leaf<D, A>(t, qb + m * D);
  }
  const int64_t nn = static_cast<int64_t>(t.nodes.size());
  std::vector<int64_t> start(nn + 1, 0);
  for (int64_t m = 0; m < Mq; ++m) {
    if (home[m] >= 0) ++start[home[m] + 1];
  }
  for (int64_t i = 0; i < nn; ++i) start[i + 1] += start[i];
  const int64_t base = static_cast<int64_t>(c.order.size());
  c.order.resize(base + start[nn]);
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t m = 0; m < Mq; ++m) {
    if (home[m] >= 0) c.order[base + fill[home[m]]++] = static_cast<int32_t>(m);
  }
  for (int64_t i = 0; i < nn; ++i) {
    for (int64_t at = start[i]; at < start[i + 1]; at += cpu::kMaxGroup) c.first.push_back(base + at);
  }
}

template <int D, typename A>
void index_order_tree(const A* q, const A* p, const int64_t* ql, const int64_t* pl, int64_t B,
                      int64_t M, int64_t N, int64_t K, A r2, A* od, int64_t* oi) {
  std::vector<IndexOrderCloud<D, A>> clouds(B);
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  auto prep = [&](int64_t b, bool parallel) {
    const int64_t Mq = pl[b] > 0 ? ql[b] : 0;
    IndexOrderCloud<D, A>& c = clouds[b];
    prepare_index_order_cloud<D, A>(q + b * M * D, Mq, p + b * N * D, pl[b], parallel, c);
    // The rows no group searches are padding: past the query length, a
    // NaN/inf query, a cloud without a finite point.
    std::vector<char> searched(M, 0);
    for (const int32_t m : c.order) searched[m] = 1;
    for (int64_t m = 0; m < M; ++m) {
      if (searched[m]) continue;
      for (int64_t s = 0; s < K; ++s) {
        oi[(b * M + m) * K + s] = -1;
        od[(b * M + m) * K + s] = pos_inf<A>();
      }
    }
  };
  if (B >= threads) {
    pcgeom::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) prep(b, false);
    });
  } else {
    for (int64_t b = 0; b < B; ++b) prep(b, true);
  }
  std::vector<std::pair<int32_t, int64_t>> groups;  // (cloud, group)
  for (int64_t b = 0; b < B; ++b) {
    auto& c = clouds[b];
    for (int64_t g = 0; g < static_cast<int64_t>(c.first.size()); ++g) groups.emplace_back(b, g);
    c.first.push_back(static_cast<int64_t>(c.order.size()));
  }
  const int64_t limit = 16 * K;
  pcgeom::parallel_for(0, static_cast<int64_t>(groups.size()), 4, [&](int64_t begin, int64_t end) {
    // room for a ball past the limit by one leaf
    std::vector<int32_t> bi(limit + cpu::kTreeLeafSize);
    std::vector<A> bd(limit + cpu::kTreeLeafSize);
    std::vector<int32_t> stack, leaves;
    A buf[cpu::kTreeLeafSize];
    for (int64_t w = begin; w < end; ++w) {
      const int64_t b = groups[w].first, g = groups[w].second;
      const auto& c = clouds[b];
      const auto& tree = c.tree;
      const A* qb = q + b * M * D;
      const A* pb = p + b * N * D;
      A* odb = od + b * M * K;
      int64_t* oib = oi + b * M * K;
      A glo[D], ghi[D];
      for (int d = 0; d < D; ++d) {
        glo[d] = pos_inf<A>();
        ghi[d] = -pos_inf<A>();
      }
      for (int64_t i = c.first[g]; i < c.first[g + 1]; ++i) {
        const A* qq = qb + static_cast<int64_t>(c.order[i]) * D;
        for (int d = 0; d < D; ++d) {
          glo[d] = std::min(glo[d], qq[d]);
          ghi[d] = std::max(ghi[d], qq[d]);
        }
      }
      leaves.clear();
      stack.assign(1, 0);
      while (!stack.empty()) {
        const auto& node = tree.nodes[stack.back()];
        stack.pop_back();
        if (cpu::shrink_bound(cpu::box_box_dist2<D, A>(glo, ghi, node.lo, node.hi)) > r2) continue;
        if (node.leaf()) {
          leaves.push_back(static_cast<int32_t>(&node - tree.nodes.data()));
        } else {
          stack.push_back(node.right);
          stack.push_back(node.left);
        }
      }
      for (int64_t i = c.first[g]; i < c.first[g + 1]; ++i) {
        const int64_t m = c.order[i];
        const A* qq = qb + m * D;
        int64_t cnt = 0;
        bool whole = true;
        for (const int32_t leaf : leaves) {
          const auto& node = tree.nodes[leaf];
          if (cpu::shrink_bound(cpu::box_dist2<D, A>(qq, node.lo, node.hi)) > r2) continue;
          const int32_t b0 = node.begin, n_leaf = node.end - node.begin;
          for (int32_t j = 0; j < n_leaf; ++j) {  // vectorised: no branch
            A acc = A(0);
            for (int d = 0; d < D; ++d) {
              const A diff = qq[d] - tree.coord(d)[b0 + j];
              acc += diff * diff;
            }
            buf[j] = acc;
          }
          for (int32_t j = 0; j < n_leaf; ++j) {  // branch-free compaction
            bi[cnt] = tree.index[b0 + j];
            bd[cnt] = buf[j];
            cnt += buf[j] <= r2 ? 1 : 0;
          }
          if (cnt > limit) {
            whole = false;
            break;
          }
        }
        if (whole) {
          write_first_by_index(bi.data(), bd.data(), cnt, K, odb + m * K, oib + m * K);
        } else {
          ball_query_index_row<A, A>(qq, pb, pl[b], D, K, r2, odb + m * K, oib + m * K);
        }
      }
    }
  });
}

template <typename A>
void index_order_tree_any(const A* q, const A* p, const int64_t* ql, const int64_t* pl, int64_t B,
                          int64_t M, int64_t N, int64_t D, int64_t K, A r2, A* od, int64_t* oi) {
  switch (D) {
#define PCGEOM_BQ_CASE(DD)                                            \
  case DD:                                                            \
    index_order_tree<DD, A>(q, p, ql, pl, B, M, N, K, r2, od, oi);    \
    return;
    PCGEOM_BQ_CASE(1)
    PCGEOM_BQ_CASE(2)
    PCGEOM_BQ_CASE(3)
    PCGEOM_BQ_CASE(4)
    PCGEOM_BQ_CASE(5)
    PCGEOM_BQ_CASE(6)
    PCGEOM_BQ_CASE(7)
    PCGEOM_BQ_CASE(8)
#undef PCGEOM_BQ_CASE
    default:
      STD_TORCH_CHECK(false, "ball_query: the index-order tree needs 1 <= D <= 8, got ", D);
  }
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
  // The tree where the KNN plan picks it for these sizes and the ball is
  // finite (an infinite radius takes in the non-finite points, which only the
  // scan handles).
  const KnnPath forced = knn_path_override(op);
  const bool finite_ball = acc_type == ST::Float ? std::isfinite(static_cast<float>(radius2))
                                                 : std::isfinite(radius2);
  const bool tree = finite_ball && D >= 1 && D <= kMaxTreeDim &&
                    plan(KnnPath::kAuto, M, N, D, k, forced) == KnnPath::kTree;
  if (B * M > 0 && tree) {
    if (acc_type == ST::Float) {
      index_order_tree_any<float>(query.const_data_ptr<float>(), points.const_data_ptr<float>(),
                                  ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M,
                                  N, D, k, static_cast<float>(radius2),
                                  dist.mutable_data_ptr<float>(), idx.mutable_data_ptr<int64_t>());
    } else {
      index_order_tree_any<double>(query.const_data_ptr<double>(), points.const_data_ptr<double>(),
                                   ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M,
                                   N, D, k, radius2, dist.mutable_data_ptr<double>(),
                                   idx.mutable_data_ptr<int64_t>());
    }
  } else if (B * M > 0) {
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

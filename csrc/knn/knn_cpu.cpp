// CPU kernels of pcgeom::knn and pcgeom::knn_backward (also the search behind
// ball_query).
//
// Exact paths: a KD-tree per cloud for D <= 8 (common/kdtree_cpu.h,
// knn/knn_tree_cpu.h), blocked GEMM candidate selection with exact re-ranking
// (knn/knn_blocked_cpu.cpp), vectorised distance tiles with a partial
// selection (knn/knn_tile_cpu.cpp) and the brute scan below; which one serves
// a call, and a cloud, is the plan of knn/knn_dispatch_cpu.h.
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
#include "common/kdtree_cpu.h"
#include "common/topk_cpu.h"
#include "knn/knn_blocked_cpu.h"
#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_problem_cpu.h"
#include "knn/knn_rows_cpu.h"
#include "knn/knn_tile_cpu.h"
#include "knn/knn_tree_cpu.h"

namespace pcgeom {

using torch::stable::Tensor;

namespace {

using cpu::FiniteKey;
using cpu::FiniteTopK;
using cpu::HeapTopK;
using cpu::KdBuilder;
using cpu::KdTree;
using cpu::SortedTopKList;
using cpu::offer;
using cpu::brute_rows;
using cpu::write_row;

// Runs f(top) with the generic (NaN-aware) top-k container suited to K.
template <typename A, class Fn>
inline int64_t with_topk(A* bd, int64_t* bi, int64_t K, Fn&& f) {
  if (K <= cpu::kSortedListMaxK) {
    SortedTopKList<A> top(bd, bi, K);
    f(top);
    top.finish();
    return top.count;
  }
  HeapTopK<A> top(bd, bi, K);
  f(top);
  top.finish();
  return top.count;
}

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

// ---------------------------------------------------------------------------
// Low-dimensional path.

template <int D, typename A>
struct LowDCloud {
  bool use_tree = false;
  KdTree<D, A> tree;               // finite points
  std::vector<int32_t> nonfinite;  // valid points with a NaN/inf coordinate, ascending
  std::vector<int32_t> tree_q;     // queries searched in the tree, grouped
  std::vector<int32_t> tile_q;     // queries searched on the tile path
};

// A unit of parallel work: a group of tree queries sharing a start leaf, or a
// run of queries for the tile path.
struct WorkItem {
  int32_t cloud;
  int32_t leaf;  // -1: tile path
  int64_t first;
  int64_t count;
};

// Everything done for one cloud before the search: write its padding rows,
// split finite / non-finite points, pick the path, build the tree, lay out the
// query groups.  `parallel` lets the tree build and the home-leaf descent use
// threads (for a batch smaller than the thread count).  pr.D == D.
template <int D, typename A>
void prepare_lowd_cloud(const KnnProblem<A>& pr, int64_t b, bool parallel, LowDCloud<D, A>& c,
                        std::vector<WorkItem>& items) {
  const int64_t M = pr.M, N = pr.N, K = pr.K;
  const int64_t L = pr.pl[b];
  const int64_t Mq = pr.ql[b];
  write_padding_rows(pr, b);
  if (Mq == 0 || L == 0) return;
  const A* pb = pr.p + b * N * D;
  for (int64_t j = 0; j < L; ++j) {
    if (!cpu::all_finite<D, A>(pb + j * D)) c.nonfinite.push_back(static_cast<int32_t>(j));
  }
  const int64_t n_finite = L - static_cast<int64_t>(c.nonfinite.size());
  c.use_tree = plan(KnnPath::kTree, Mq, n_finite, D, K, pr.forced) == KnnPath::kTree;
  const int32_t cb = static_cast<int32_t>(b);
  if (c.use_tree) {
    KdBuilder<D, A> bl(&c.tree);
    bl.init(n_finite, cpu::kTreeLeafSize);
    int64_t pos = 0;
    size_t nf = 0;
    for (int64_t j = 0; j < L; ++j) {
      if (nf < c.nonfinite.size() && c.nonfinite[nf] == j) {
        ++nf;
        continue;
      }
      auto& rec = bl.rec(pos++);
      for (int d = 0; d < D; ++d) rec.c[d] = pb[j * D + d];
      rec.idx = static_cast<int32_t>(j);
    }
    // A large cloud: split its top serially, build the subtrees in parallel.
    const int64_t threads = parallel ? std::max<int64_t>(1, torch::stable::get_num_threads()) : 1;
    const int64_t cut = threads > 1 ? std::max<int64_t>(8192, n_finite / (4 * threads))
                                    : int64_t(1) << 40;
    std::vector<typename KdBuilder<D, A>::Task> tasks;
    bl.split_top(cut, &tasks);
    const int64_t nt = static_cast<int64_t>(tasks.size());
    if (nt > 1) {
      pcgeom::parallel_for(0, nt, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) bl.build_task(tasks[i]);
      });
    } else {
      for (const auto& t : tasks) bl.build_task(t);
    }
    bl.finish();
  }

  if (!c.use_tree) {
    for (int64_t m = 0; m < Mq; ++m) c.tile_q.push_back(static_cast<int32_t>(m));
  } else if (pr.self_query) {
    // A self query walks the tree's leaves: each leaf's points are one group,
    // and consecutive groups share nodes and points in cache.
    const KdTree<D, A>& t = c.tree;
    for (const int32_t leaf : t.leaves) {
      const int64_t first = static_cast<int64_t>(c.tree_q.size());
      for (int32_t pos = t.nodes[leaf].begin; pos < t.nodes[leaf].end; ++pos) {
        if (t.index[pos] < Mq) c.tree_q.push_back(t.index[pos]);
      }
      const int64_t cnt = static_cast<int64_t>(c.tree_q.size()) - first;
      if (cnt > 0) items.push_back({cb, leaf, first, cnt});
    }
    for (const int32_t j : c.nonfinite) {
      if (j < Mq) c.tile_q.push_back(j);
    }
    // Query rows past the points' length are not in the tree.
    for (int64_t m = L; m < Mq; ++m) c.tile_q.push_back(static_cast<int32_t>(m));
  } else {
    // Other queries are bucketed by the leaf a descent reaches (counting sort
    // by node id), so each group is spatially tight.
    const A* qb = pr.q + b * M * D;
    std::vector<int32_t> home(Mq, -1);
    auto descend = [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        if (cpu::all_finite<D, A>(qb + m * D)) home[m] = cpu::home_leaf<D, A>(c.tree, qb + m * D);
      }
    };
    if (parallel) {
      pcgeom::parallel_for(0, Mq, grain_for(64), descend);
    } else {
      descend(0, Mq);
    }
    const int64_t nn = static_cast<int64_t>(c.tree.nodes.size());
    std::vector<int32_t> start(nn + 1, 0);
    for (int64_t m = 0; m < Mq; ++m) {
      if (home[m] >= 0) {
        ++start[home[m] + 1];
      } else {
        c.tile_q.push_back(static_cast<int32_t>(m));
      }
    }
    for (int64_t i = 0; i < nn; ++i) start[i + 1] += start[i];
    c.tree_q.resize(start[nn]);
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int64_t m = 0; m < Mq; ++m) {
      if (home[m] >= 0) c.tree_q[fill[home[m]]++] = static_cast<int32_t>(m);
    }
    for (const int32_t leaf : c.tree.leaves) {
      for (int64_t s = start[leaf]; s < start[leaf + 1]; s += cpu::kMaxGroup) {
        items.push_back({cb, leaf, s, std::min<int64_t>(cpu::kMaxGroup, start[leaf + 1] - s)});
      }
    }
  }
  const int64_t chunk = std::max<int64_t>(1, grain_for(L * D) / 4);
  const int64_t ntile = static_cast<int64_t>(c.tile_q.size());
  for (int64_t s = 0; s < ntile; s += chunk) {
    items.push_back({cb, -1, s, std::min(chunk, ntile - s)});
  }
}

// The tree path for D = pr.D.
template <int D, typename A>
void knn_lowd(const KnnProblem<A>& pr) {
  using Key = typename FiniteKey<A>::type;
  const A *q = pr.q, *p = pr.p;
  const int64_t *ql = pr.ql, *pl = pr.pl;
  const int64_t B = pr.B, M = pr.M, N = pr.N, K = pr.K;
  const bool use_radius = pr.use_radius;
  const A r2 = pr.r2();
  std::vector<LowDCloud<D, A>> clouds(B);
  std::vector<std::vector<WorkItem>> items_per_cloud(B);

  // 1. Prepare: one parallel region over the clouds for a batch; for fewer
  //    clouds than threads, each cloud's build and descent use the threads.
  //    A light call runs inline: waking threads costs more than it saves.
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) work += (pl[b] + ql[b]) * (K + 8);
  const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
  const bool light = work < 4 * kParallelWork;
  if (B >= threads || light) {
    pcgeom::parallel_for(0, B, light ? B : 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        prepare_lowd_cloud<D, A>(pr, b, false, clouds[b], items_per_cloud[b]);
      }
    });
  } else {
    for (int64_t b = 0; b < B; ++b) {
      prepare_lowd_cloud<D, A>(pr, b, true, clouds[b], items_per_cloud[b]);
    }
  }
  std::vector<WorkItem> items;
  for (auto& v : items_per_cloud) items.insert(items.end(), v.begin(), v.end());
  std::vector<std::vector<WorkItem>>().swap(items_per_cloud);

  // 2. Search.
  const int64_t tree_cost = 64 * (K + 16);
  const int64_t n_items = static_cast<int64_t>(items.size());
  pcgeom::parallel_for(
      0, n_items, light ? std::max<int64_t>(1, n_items) : grain_for(cpu::kMaxGroup * tree_cost),
      [&](int64_t begin, int64_t end) {
        cpu::GroupSearch<D, A> gs(K, use_radius, r2);
        std::vector<A> qa(cpu::kMaxGroup * D);
        // Sized on the first tree item: a call served by the tile path alone
        // (k up to N) must not hold kMaxGroup * k keys per thread.
        std::vector<Key> keys;
        std::vector<FiniteTopK<A>> tops;
        std::vector<A> bd;
        std::vector<int64_t> bi;
        for (int64_t w = begin; w < end; ++w) {
          const WorkItem& it = items[w];
          const int64_t b = it.cloud;
          const LowDCloud<D, A>& c = clouds[b];
          const A* pb = p + b * N * D;
          if (it.leaf < 0) {
            knn_tile_rows<A>(q + b * M * D, c.tile_q.data() + it.first, it.count, pb, pl[b], D,
                             K, use_radius, r2, pr.out_d + b * M * K, pr.out_i + b * M * K);
            continue;
          }
          if (bd.empty()) {
            bd.resize(K);
            bi.resize(K);
          }
          const int64_t g = it.count;
          const int32_t* qs = c.tree_q.data() + it.first;
          A glo[D], ghi[D];
          for (int64_t i = 0; i < g; ++i) {
            const A* src = q + (b * M + qs[i]) * D;
            for (int d = 0; d < D; ++d) {
              qa[i * D + d] = src[d];
              glo[d] = i == 0 || src[d] < glo[d] ? src[d] : glo[d];
              ghi[d] = i == 0 || src[d] > ghi[d] ? src[d] : ghi[d];
            }
          }
          // kKeySlack slots before the first list: the AVX2 insertion reads
          // up to four slots below a list's start (and rewrites them unchanged).
          constexpr int64_t kKeySlack = 4;
          if (keys.empty()) keys.resize(kKeySlack + cpu::kMaxGroup * K);
          tops.clear();
          for (int64_t i = 0; i < g; ++i) tops.emplace_back(keys.data() + kKeySlack + i * K, K);
          gs.run(c.tree, qa.data(), g, tops.data(), glo, ghi);
          for (int64_t i = 0; i < g; ++i) {
            FiniteTopK<A>& top = tops[i];
            top.finish();
            const int64_t r = b * M + qs[i];
            int64_t found = top.count;
            for (int64_t s = 0; s < found; ++s) {
              bd[s] = FiniteKey<A>::dist(top.keys[s]);
              bi[s] = FiniteKey<A>::idx(top.keys[s]);
            }
            if (!c.nonfinite.empty()) {
              // Top-k of a union = top-k of (the finite part's top-k, the rest).
              std::vector<A> fd(bd.begin(), bd.begin() + found);
              std::vector<int64_t> fi(bi.begin(), bi.begin() + found);
              found = with_topk<A>(bd.data(), bi.data(), K, [&](auto& t2) {
                for (size_t s = 0; s < fd.size(); ++s) t2.push(fd[s], fi[s]);
                for (const int32_t j : c.nonfinite) {
                  offer(t2, sq_dist<A, A>(qa.data() + i * D, pb + static_cast<int64_t>(j) * D, D),
                        j, use_radius, r2);
                }
              });
            }
            write_row<A, A>(bd.data(), bi.data(), found, K, pr.out_d + r * K, pr.out_i + r * K);
          }
        }
      });
}

// The tree path: knn_lowd compiled for D = 1 .. 8 (plan() answers tree only there).
template <typename A>
void knn_lowd_dispatch(const KnnProblem<A>& pr) {
  switch (pr.D) {
#define PCGEOM_LOWD_CASE(DD) \
  case DD:                   \
    knn_lowd<DD, A>(pr);     \
    return;
    PCGEOM_LOWD_CASE(1)
    PCGEOM_LOWD_CASE(2)
    PCGEOM_LOWD_CASE(3)
    PCGEOM_LOWD_CASE(4)
    PCGEOM_LOWD_CASE(5)
    PCGEOM_LOWD_CASE(6)
    PCGEOM_LOWD_CASE(7)
    PCGEOM_LOWD_CASE(8)
#undef PCGEOM_LOWD_CASE
    default:
      knn_tile_cpu<A>(pr);
  }
}

// The search on float32 / float64 arrays.  The kernel is the plan's
// (knn_dispatch_cpu.h); pr.forced is the override.
template <typename A>
void knn_search_acc(const KnnProblem<A>& pr) {
  switch (plan(KnnPath::kAuto, pr.M, pr.N, pr.D, pr.K, pr.forced)) {
    case KnnPath::kTree:
      knn_lowd_dispatch<A>(pr);
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

// ---------------------------------------------------------------------------
// Backward.

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

std::tuple<Tensor, Tensor> knn_backward_cpu(Tensor grad_in, Tensor query_in, Tensor points_in,
                                            Tensor idx_in) {
  const char* op = "knn_backward";
  check_rank(grad_in, 3, op, "grad_dist2", "(B, M, k)");
  check_rank(query_in, 3, op, "query", "(B, M, D)");
  check_rank(points_in, 3, op, "points", "(B, N, D)");
  check_rank(idx_in, 3, op, "idx", "(B, M, k)");
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const int64_t K = idx_in.size(2);
  check_size(points_in, 0, B, op, "points", "(B, N, D)", "the B of query");
  check_size(points_in, 2, D, op, "points", "(B, N, D)", "the D of query");
  check_size(idx_in, 0, B, op, "idx", "(B, M, k)", "the B of query");
  check_size(idx_in, 1, M, op, "idx", "(B, M, k)", "the M of query");
  check_size(grad_in, 0, B, op, "grad_dist2", "(B, M, k)", "the B of query");
  check_size(grad_in, 1, M, op, "grad_dist2", "(B, M, k)", "the M of query");
  check_size(grad_in, 2, K, op, "grad_dist2", "(B, M, k)", "the k of idx");
  check_float_tensor(query_in, op, "query");
  check_same_dtype(points_in, query_in, op, "points", "query");
  check_same_dtype(grad_in, query_in, op, "grad_dist2", "query");
  check_int64(idx_in, op, "idx");
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

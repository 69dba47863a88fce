// CPU kernels of pcgeom::knn and pcgeom::knn_backward (also the search behind
// ball_query).
//
// Exact paths, chosen per call and per cloud by the dispatcher (choose_path,
// choose_tree below, with the measurements behind the rule):
//   * low dimensions (D <= 8): a KD-tree per cloud (common/kdtree_cpu.h) and a
//     grouped best-first search (knn/knn_tree_cpu.h) for clouds that are large
//     against k and have enough queries to pay for the build;
//   * high dimensions, large enough clouds: blocked GEMM candidate selection
//     with exact re-ranking (knn/knn_blocked_cpu.cpp);
//   * everything else -- small clouds, k a large share of N, small
//     high-dimensional batches, NaN/inf queries: the tile path
//     (knn/knn_tile_cpu.cpp), vectorised exact distances with a partial
//     selection;
//   * the scalar scan only for clouds (or query sets) of 2^31 - 1 points or more.
// PCGEOM_KNN_CPU_PATH=tree|blocked|tile|scan forces one (knn_scan_cpu.h).
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
#include "knn/knn_common.h"
#include "knn/knn_scan_cpu.h"
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
using cpu::scan_rows;
using cpu::write_padding;
using cpu::write_row;

constexpr int kMaxTreeDim = 8;
// Below roughly this much work (distance evaluations) a loop runs inline:
// starting threads costs more, and a lot more on a busy machine.
constexpr int64_t kParallelWork = 1 << 15;

inline int64_t grain_for(int64_t cost_per_item) {
  return std::max<int64_t>(1, kParallelWork / std::max<int64_t>(1, cost_per_item));
}

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
// Generic direct scan (any D): one query row against all points.

template <typename A>
void knn_brute_kernel(const A* q, const A* p, const int64_t* ql, const int64_t* pl, int64_t B,
                      int64_t M, int64_t N, int64_t D, int64_t K, bool use_radius, double radius2,
                      A* out_d, int64_t* out_i) {
  const A r2 = static_cast<A>(radius2);
  pcgeom::parallel_for(0, B * M, grain_for(N * D), [&](int64_t begin, int64_t end) {
    std::vector<A> bd(K);
    std::vector<int64_t> bi(K);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / M;
      const int64_t m = r % M;
      int64_t found = 0;
      if (m < ql[b]) {
        found = with_topk<A>(bd.data(), bi.data(), K, [&](auto& top) {
          scan_rows<A, A>(q + r * D, p + b * N * D, pl[b], D, top, use_radius, r2);
        });
      }
      write_row<A, A>(bd.data(), bi.data(), found, K, out_d + r * K, out_i + r * K);
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
  std::vector<int32_t> scan_q;     // queries scanned directly
};

// A unit of parallel work: a group of tree queries sharing a start leaf, or a
// run of directly scanned queries.
struct WorkItem {
  int32_t cloud;
  int32_t leaf;  // -1: direct scan
  int64_t first;
  int64_t count;
};

// The KD-tree pays off when there are enough queries to amortise the build and
// k is small against the cloud; otherwise the tile path wins.  The tree costs
// a build of O(n log n) plus a per-query search that grows with k and, on
// uniform data, steeply with D; the tile path costs O(n D) per query.  So the
// crossover is a number of queries per cloud, nearly independent of n in
// 3-D, and a cloud size as well from D = 5 on.  Measured on the project's
// 2-core machine (2 threads, uniform cube, best of 7 interleaved runs, ms,
// both kernels forced with PCGEOM_KNN_CPU_PATH; tile / tree):
//   B x M x N, D, k            tree   tile  tile/tree
//   128 x 64 x 1024, 3, 32     20.5   13.1   0.64   (group-mae)
//   32 x 128 x 1024, 3, 32      8.5    7.1   0.84
//   32 x 192 x 1024, 3, 16      7.2    6.7   0.93
//   8 x 256 x 2048, 3, 32       4.1    5.1   1.25
//   1 x 256 x 65536, 3, 16      8.2    7.8   0.96
//   1 x 512 x 65536, 3, 16      7.2   10.8   1.51
//   16 x 1024 x 1024, 3, 16    12.8   21.4   1.67
//   16 x 1024 x 1024, 3, 32    20.7   24.8   1.20
//   64 x 256 x 256, 3, 32      15.7   14.7   0.94   (k = n/8)
//   4 x 2048 x 2048, 5, 16     15.1   16.2   1.07
//   2 x 4096 x 4096, 6, 16     29.3   29.7   1.01
//   2 x 4096 x 4096, 7, 16     36.9   30.4   0.82
//   1 x 8192 x 8192, 8, 16     70.0   63.0   0.90
//   1 x 1024 x 8192, 8, 16     19.8    8.2   0.42
//   1 x 16384 x 16384, 8, 16  145    158     1.09
// Rule: >= 256 finite points, 8k <= n, and at least kTreeMin(D) queries;
// for D >= 5 also at least kTreeMin(D) points.
inline int64_t tree_min(int64_t D) {
  switch (D) {
    case 5: return 2048;
    case 6: return 4096;
    case 7: return 6144;
    case 8: return 12288;
    default: return 192;  // D <= 4
  }
}

inline bool choose_tree(int64_t M_b, int64_t n_finite, int64_t K, int64_t D, KnnPath path) {
  if (path == KnnPath::kTree) return n_finite > 0;
  if (path != KnnPath::kAuto) return false;
  if (n_finite < 256) return false;
  if (K * 8 > n_finite) return false;
  const int64_t need = tree_min(D);
  if (D >= 5 && n_finite < need) return false;
  return M_b >= need;
}

// Everything done for one cloud before the search: split finite / non-finite
// points, pick the path, build the tree, lay out the query groups, write the
// padding rows.  `parallel` lets the tree build and the home-leaf descent use
// threads (for a batch smaller than the thread count).
template <int D, typename A>
void prepare_lowd_cloud(const A* q, const A* p, const int64_t* ql, const int64_t* pl, int64_t b,
                        int64_t M, int64_t N, int64_t K, bool self_query, bool parallel,
                        KnnPath path, LowDCloud<D, A>& c, std::vector<WorkItem>& items, A* out_d,
                        int64_t* out_i) {
  const int64_t L = pl[b];
  const int64_t Mq = ql[b];
  const int64_t from = L == 0 ? 0 : Mq;
  for (int64_t m = from; m < M; ++m) {
    write_padding<A, A>(K, out_d + (b * M + m) * K, out_i + (b * M + m) * K);
  }
  if (Mq == 0 || L == 0) return;
  const A* pb = p + b * N * D;
  for (int64_t j = 0; j < L; ++j) {
    if (!cpu::all_finite<D, A>(pb + j * D)) c.nonfinite.push_back(static_cast<int32_t>(j));
  }
  const int64_t n_finite = L - static_cast<int64_t>(c.nonfinite.size());
  c.use_tree = choose_tree(Mq, n_finite, K, D, path);
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
    for (int64_t m = 0; m < Mq; ++m) c.scan_q.push_back(static_cast<int32_t>(m));
  } else if (self_query) {
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
      if (j < Mq) c.scan_q.push_back(j);
    }
    // Query rows past the points' length are not in the tree.
    for (int64_t m = L; m < Mq; ++m) c.scan_q.push_back(static_cast<int32_t>(m));
  } else {
    // Other queries are bucketed by the leaf a descent reaches (counting sort
    // by node id), so each group is spatially tight.
    const A* qb = q + b * M * D;
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
        c.scan_q.push_back(static_cast<int32_t>(m));
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
  const int64_t nscan = static_cast<int64_t>(c.scan_q.size());
  for (int64_t s = 0; s < nscan; s += chunk) {
    items.push_back({cb, -1, s, std::min(chunk, nscan - s)});
  }
}

template <int D, typename A>
void knn_lowd(const A* q, const A* p, const int64_t* ql, const int64_t* pl, int64_t B, int64_t M,
              int64_t N, int64_t K, bool use_radius, double radius2, bool self_query, KnnPath path,
              A* out_d, int64_t* out_i) {
  using Key = typename FiniteKey<A>::type;
  const A r2 = static_cast<A>(radius2);
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
        prepare_lowd_cloud<D, A>(q, p, ql, pl, b, M, N, K, self_query, false, path, clouds[b],
                                 items_per_cloud[b], out_d, out_i);
      }
    });
  } else {
    for (int64_t b = 0; b < B; ++b) {
      prepare_lowd_cloud<D, A>(q, p, ql, pl, b, M, N, K, self_query, true, path, clouds[b],
                               items_per_cloud[b], out_d, out_i);
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
          if (it.leaf < 0 && path != KnnPath::kScan) {
            knn_tile_rows<A>(q + b * M * D, c.scan_q.data() + it.first, it.count, pb, pl[b], D,
                             K, use_radius, r2, out_d + b * M * K, out_i + b * M * K);
            continue;
          }
          if (bd.empty()) {
            bd.resize(K);
            bi.resize(K);
          }
          if (it.leaf < 0) {
            for (int64_t s = 0; s < it.count; ++s) {
              const int64_t m = c.scan_q[it.first + s];
              const int64_t r = b * M + m;
              const int64_t found = with_topk<A>(bd.data(), bi.data(), K, [&](auto& top) {
                scan_rows<A, A>(q + r * D, pb, pl[b], D, top, use_radius, r2);
              });
              write_row<A, A>(bd.data(), bi.data(), found, K, out_d + r * K, out_i + r * K);
            }
            continue;
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
            write_row<A, A>(bd.data(), bi.data(), found, K, out_d + r * K, out_i + r * K);
          }
        }
      });
}

template <typename A>
bool knn_lowd_dispatch(int64_t D, const A* q, const A* p, const int64_t* ql, const int64_t* pl,
                       int64_t B, int64_t M, int64_t N, int64_t K, bool use_radius,
                       double radius2, bool self_query, KnnPath path, A* out_d,
                       int64_t* out_i) {
  switch (D) {
#define PCGEOM_LOWD_CASE(DD)                                                                 \
  case DD:                                                                                   \
    knn_lowd<DD, A>(q, p, ql, pl, B, M, N, K, use_radius, radius2, self_query, path, out_d, \
                    out_i);                                                                  \
    return true;
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
      return false;
  }
}

// The dispatcher: which kernel serves a call.
//
//   N or M >= 2^31 - 1                    -> scan (the other paths index in int32)
//   D <= 8, per cloud (choose_tree):
//     >= 256 finite points, 8k <= n, >= 192 queries (D <= 4), or
//     >= 2048 / 4096 / 6144 / 12288 points and queries (D = 5 / 6 / 7 / 8)
//                                                                  -> KD-tree
//     otherwise                                                    -> tile
//   D > 8, per call:
//     N * D >= 2^18, 4k <= N, M >= 32 and (k <= 64 or N * D >= 2^19)
//                                         -> blocked GEMM (+ tile for the rows it
//                                            cannot take: NaN/inf, overflow)
//     otherwise                           -> tile
//
// Measured on the project's 2-core machine (2 threads, best of 7 interleaved
// runs, uniform cube, ms, kernel forced with PCGEOM_KNN_CPU_PATH; the tree /
// tile rows are at choose_tree above):
//   B x M x N, D, k          tile  blocked
//   32 x 256^2, 64, 20         8.9    22.9     tile below N*D = 2^18
//   4 x 1024^2, 64, 20        12.1    15.5
//   8 x 512^2, 512, 32        46.0    42.7     blocked from N*D = 2^18
//   4 x 4096^2, 64, 20         161     120
//   1 x 2048^2, 128, 64       27.5    27.9
//   1 x 2048^2, 128, 100      34.6    42.9     tile for k > 64 below N*D = 2^19
//   4 x 4096^2, 64, 100        274     349
//   1 x 4096^2, 128, 100       121     108
//   1 x 8192^2, 64, 100        196     204
//   1 x 2048^2, 128, 2048      214    1116     tile for k > N/4 (previous build)
// (The direct tile computes 3 flops per coordinate pair; the GEMM does the bulk
// at BLAS speed, but its candidate bookkeeping and re-ranking only pay once a
// tile row is long and deep enough, and grow with k while the tile path's
// bootstrap keeps its survivors near k.)
inline bool blocked_pays(int64_t M, int64_t N, int64_t D, int64_t K) {
  return N * D >= (int64_t(1) << 18) && 4 * K <= N && M >= 32 &&
         (K <= 64 || N * D >= (int64_t(1) << 19));
}

inline KnnPath choose_path(int64_t B, int64_t M, int64_t N, int64_t D, int64_t K) {
  (void)B;
  // choose_tree only grows more willing with more points and queries, so the
  // padded sizes bound every cloud: if even they get no tree, no cloud does,
  // and the call skips the per-cloud preparation.
  if (D <= kMaxTreeDim) return choose_tree(M, N, K, D, KnnPath::kAuto) ? KnnPath::kAuto : KnnPath::kTile;
  if (blocked_pays(M, N, D, K)) return KnnPath::kBlocked;
  return KnnPath::kTile;
}

// The search on float32 / float64 arrays; `dist` has the same dtype.
template <typename A>
void knn_search_acc(const A* qp, const A* pp, const int64_t* qlp, const int64_t* plp, int64_t B,
                    int64_t M, int64_t N, int64_t D, int64_t k, bool use_radius, double radius2,
                    bool self_query, A* od, int64_t* oi) {
  // The tree, blocked and tile paths store point and query indices as int32.
  const bool small_index = N < (int64_t(1) << 31) - 1 && M < (int64_t(1) << 31) - 1;
  if (!small_index) {
    knn_brute_kernel<A>(qp, pp, qlp, plp, B, M, N, D, k, use_radius, radius2, od, oi);
    return;
  }
  const KnnPath forced = knn_path_override();
  KnnPath path = forced;
  if (path == KnnPath::kTree && D > kMaxTreeDim) path = KnnPath::kAuto;
  if (path == KnnPath::kAuto) path = choose_path(B, M, N, D, k);
  switch (path) {
    case KnnPath::kBlocked:
      knn_blocked_cpu<A>(qp, pp, qlp, plp, B, M, N, D, k, use_radius, radius2, self_query,
                         forced == KnnPath::kBlocked, od, oi);
      return;
    case KnnPath::kTile:
      knn_tile_cpu<A>(qp, pp, qlp, plp, B, M, N, D, k, use_radius, radius2, od, oi);
      return;
    case KnnPath::kScan:
      if (D > kMaxTreeDim) {
        knn_brute_kernel<A>(qp, pp, qlp, plp, B, M, N, D, k, use_radius, radius2, od, oi);
        return;
      }
      break;
    default:
      break;
  }
  // kAuto here means the per-cloud KD-tree / tile choice of knn_lowd.
  knn_lowd_dispatch<A>(D, qp, pp, qlp, plp, B, M, N, k, use_radius, radius2, self_query,
                       forced == KnnPath::kTree || forced == KnnPath::kScan ? forced
                                                                            : KnnPath::kAuto,
                       od, oi);
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
  const int64_t B = query_in.size(0), M = query_in.size(1), D = query_in.size(2);
  const int64_t N = points_in.size(1);
  const auto dtype = query_in.scalar_type();

  const bool self_query = same_tensor(query_in, points_in);
  const Tensor ql = torch::stable::contiguous(query_lengths_in);
  const Tensor pl = torch::stable::contiguous(points_lengths_in);
  check_range_cpu(ql.const_data_ptr<int64_t>(), B, 0, M, op, "query_lengths");
  check_range_cpu(pl.const_data_ptr<int64_t>(), B, 0, N, op, "points_lengths");

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
      knn_search_acc<float>(query.const_data_ptr<float>(), points.const_data_ptr<float>(),
                            ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M, N,
                            D, k, use_radius, radius2, self_query, dist.mutable_data_ptr<float>(),
                            idx.mutable_data_ptr<int64_t>());
    } else {
      knn_search_acc<double>(query.const_data_ptr<double>(), points.const_data_ptr<double>(),
                             ql.const_data_ptr<int64_t>(), pl.const_data_ptr<int64_t>(), B, M, N,
                             D, k, use_radius, radius2, self_query,
                             dist.mutable_data_ptr<double>(), idx.mutable_data_ptr<int64_t>());
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

// High-dimensional exact KNN on the CPU: blocked GEMM candidate selection with
// exact re-ranking.
//
// For feature vectors (D = 16 ... 1024) the cost is the M x N x D distance
// work, which a GEMM does at the machine's peak.  So, per cloud:
//   1. centre the finite points (and queries) on the points' mean and take the
//      squared norms;
//   2. for tiles of queries x points, G = Qc Pc^T by aten::mm (BLAS) into a
//      fixed-size buffer, and v = |p|^2 - 2 q.p, which equals the squared
//      distance minus |q|^2 up to a rounding error bounded by
//      m_q = delta * (|q|^2 + max |p|^2), delta = (8D + 64) * unit roundoff;
//   3. keep, per query, every candidate with v <= V_k + 2 m_q, V_k being the
//      k-th smallest v seen so far.  A point dropped this way has an exact
//      distance *strictly* larger than that of k kept points, so it cannot be
//      in the answer, ties included;
//   4. re-rank the survivors with the exact distance formula of
//      pcgeom_common.h (coordinate order, float32 / float64 accumulation) and
//      the pcgeom key order.
// Self queries (the same tensor as query and points) compute only the upper
// triangle of tiles and feed each tile to both its rows and its columns, which
// halves the GEMM work; the tile pairs run in rounds of disjoint pairs (the
// circle method), so no two threads touch one query's candidates.  Each task
// multiplies its own tile (single-threaded inside the parallel region).
// Memory is fixed: one tile per thread plus the candidate lists, never an
// M x N matrix.
//
// Points with a NaN/inf coordinate are left out of the GEMM and merged in at
// the end (the top-k of a union is the top-k of the parts' top-k); queries with
// a NaN/inf coordinate, clouds whose norms could overflow, and clouds the plan
// (knn_dispatch_cpu.h) sends elsewhere go to the tile path.
#include "knn/knn_blocked_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "common/checks.h"
#include "common/pcgeom_common.h"
#include "common/topk_cpu.h"
#include "knn/knn_dispatch_cpu.h"
#include "knn/knn_problem_cpu.h"
#include "knn/knn_rows_cpu.h"
#include "knn/knn_tile_cpu.h"

namespace pcgeom {
namespace {

using torch::stable::Tensor;

constexpr int64_t kBlock = 256;

template <typename A>
struct Numeric;
template <>
struct Numeric<float> {
  static constexpr float unit = 5.9604644775390625e-08f;  // 2^-24
  static constexpr float tiny = 1e-30f;
  static constexpr float huge = 1e36f;
  static constexpr torch::headeronly::ScalarType dtype = torch::headeronly::ScalarType::Float;
};
template <>
struct Numeric<double> {
  static constexpr double unit = 1.1102230246251565e-16;  // 2^-53
  static constexpr double tiny = 1e-290;
  static constexpr double huge = 1e300;
  static constexpr torch::headeronly::ScalarType dtype = torch::headeronly::ScalarType::Double;
};

// out (m x n, contiguous) = a (m x D rows) . b (n x D rows)^T, through aten::mm.out.
template <typename A>
void gemm_nt(const A* a, int64_t m, const A* b, int64_t n, int64_t D, A* out) {
  const torch::stable::Device cpu(torch::headeronly::DeviceType::CPU);
  const auto st = Numeric<A>::dtype;
  Tensor ta = torch::stable::from_blob(const_cast<A*>(a), {m, D}, {D, 1}, cpu, st);
  Tensor tb = torch::stable::from_blob(const_cast<A*>(b), {D, n}, {1, D}, cpu, st);
  Tensor to = torch::stable::from_blob(out, {m, n}, {n, 1}, cpu, st);
  std::array<StableIValue, 3> stack{torch::stable::detail::from(ta),
                                    torch::stable::detail::from(tb),
                                    torch::stable::detail::from(to)};
  STABLE_TORCH_ERROR_CODE_CHECK(
      torch_call_dispatcher("aten::mm", "out", stack.data(), TORCH_ABI_VERSION));
  (void)torch::stable::detail::to<Tensor>(stack[0]);
}

// Candidates of one query: (v, position among the finite points).
template <typename A>
struct QueryState {
  std::vector<std::pair<A, int32_t>> cand;
  A* tv;      // keep v <= *tv (a slot of a contiguous array, read by vector code)
  A margin;   // m_q
  int64_t cap;
  bool seeded;

  void init(A qn, A pmax, A delta, int64_t K, bool use_radius, A r2, A* tv_slot) {
    cand.clear();
    tv = tv_slot;
    margin = delta * (qn + pmax) + Numeric<A>::tiny;
    // Radius: exact <= r2 needs v <= r2 - |q|^2 + m (r2 padded for its own rounding).
    *tv = use_radius ? (r2 + r2 * A(1.0 / 65536) + margin) - qn : pos_inf<A>();
    cap = std::max<int64_t>(2 * K + 32, 64);
    seeded = false;
  }

  void lower(A t) {
    if (t < *tv) *tv = t;
  }

  void compact(int64_t K) {
    if (static_cast<int64_t>(cand.size()) >= K) {
      auto by_v = [](const std::pair<A, int32_t>& x, const std::pair<A, int32_t>& y) {
        return x.first < y.first;
      };
      std::nth_element(cand.begin(), cand.begin() + (K - 1), cand.end(), by_v);
      lower(cand[K - 1].first + A(2) * margin);
      const A lim = *tv;
      cand.erase(std::remove_if(cand.begin(), cand.end(),
                                [lim](const std::pair<A, int32_t>& x) { return x.first > lim; }),
                 cand.end());
    }
    // Many near-ties within the margin: grow instead of compacting every time.
    if (2 * static_cast<int64_t>(cand.size()) > cap) cap *= 2;
  }

  inline void add(A v, int32_t j, int64_t K) {
    if (cand.empty()) cand.reserve(cap);
    cand.emplace_back(v, j);
    if (static_cast<int64_t>(cand.size()) >= cap) compact(K);
  }
};

// Exact squared distances of one query to rows `rows` of P (n x D), eight
// independent accumulation chains at a time (each in coordinate order).
template <typename A>
void exact_dists(const A* q, const A* P, int64_t D, const int32_t* rows, int64_t n, A* out) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const A* pr[8];
    for (int u = 0; u < 8; ++u) pr[u] = P + static_cast<int64_t>(rows[c + u]) * D;
    A acc[8] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
    for (int64_t d = 0; d < D; ++d) {
      const A qd = q[d];
      for (int u = 0; u < 8; ++u) {
        const A diff = qd - pr[u][d];
        acc[u] += diff * diff;
      }
    }
    for (int u = 0; u < 8; ++u) out[c + u] = acc[u];
  }
  for (; c < n; ++c) {
    const A* pr = P + static_cast<int64_t>(rows[c]) * D;
    A acc = A(0);
    for (int64_t d = 0; d < D; ++d) {
      const A diff = q[d] - pr[d];
      acc += diff * diff;
    }
    out[c] = acc;
  }
}

template <typename T>
struct Cloud {
  using A = acc_t<T>;
  std::vector<int32_t> fidx;       // original index of each finite point
  std::vector<int32_t> nonfinite;  // original indices of the other valid points
  std::vector<A> pn;               // |p - mu|^2 of each finite point
  std::vector<A> mu;               // centre
  A pmax = A(0);
  bool ok = true;                  // false: norms could overflow, scan instead
};

template <typename T>
void prepare_points(const T* pb, int64_t L, int64_t D, Cloud<T>* c) {
  using A = acc_t<T>;
  c->fidx.reserve(L);
  std::vector<double> sum(D, 0.0);
  for (int64_t j = 0; j < L; ++j) {
    bool fin = true;
    for (int64_t d = 0; d < D; ++d) fin = fin && std::isfinite(static_cast<A>(pb[j * D + d]));
    if (!fin) {
      c->nonfinite.push_back(static_cast<int32_t>(j));
      continue;
    }
    c->fidx.push_back(static_cast<int32_t>(j));
    for (int64_t d = 0; d < D; ++d) sum[d] += static_cast<double>(static_cast<A>(pb[j * D + d]));
  }
  const int64_t nF = static_cast<int64_t>(c->fidx.size());
  c->mu.assign(D, A(0));
  for (int64_t d = 0; d < D; ++d) c->mu[d] = nF ? static_cast<A>(sum[d] / nF) : A(0);
  c->pn.resize(nF);
  A pmax = A(0);
  for (int64_t r = 0; r < nF; ++r) {
    const T* src = pb + static_cast<int64_t>(c->fidx[r]) * D;
    A s = A(0);
    for (int64_t d = 0; d < D; ++d) {
      const A x = static_cast<A>(src[d]);
      const A y = x - c->mu[d];
      s += y * y;
    }
    c->pn[r] = s;
    pmax = s > pmax ? s : pmax;
  }
  c->pmax = pmax;
  c->ok = std::isfinite(pmax) && pmax < Numeric<A>::huge;
}

// Final answer of one query from its candidates (+ the non-finite points).
template <typename A>
void finalize(const Cloud<A>& c, const A* qt, const A* pb, int64_t D, int64_t K,
              QueryState<A>& st, bool use_radius, A r2, std::vector<int32_t>& rows,
              std::vector<A>& dd, A* bd, int64_t* bi, A* od, int64_t* oi) {
  st.compact(K);
  const int64_t n = static_cast<int64_t>(st.cand.size());
  rows.resize(n);
  dd.resize(n);
  for (int64_t s = 0; s < n; ++s) rows[s] = c.fidx[st.cand[s].second];
  exact_dists<A>(qt, pb, D, rows.data(), n, dd.data());
  auto push_all = [&](auto& top) {
    for (int64_t s = 0; s < n; ++s) {
      cpu::offer(top, dd[s], static_cast<int64_t>(rows[s]), use_radius, r2);
    }
    for (const int32_t j : c.nonfinite) {
      cpu::offer(top, sq_dist<A, A>(qt, pb + static_cast<int64_t>(j) * D, D), j, use_radius, r2);
    }
    top.finish();
    cpu::write_row<A, A>(bd, bi, top.count, K, od, oi);
  };
  if (K <= cpu::kSortedListMaxK) {
    cpu::SortedTopKList<A> top(bd, bi, K);
    push_all(top);
  } else {
    cpu::HeapTopK<A> top(bd, bi, K);
    push_all(top);
  }
}

// v = |p|^2 - 2 q.p for one tile row (2g is exact, so every path agrees).
template <typename A>
inline void tile_values(const A* g, const A* pn, int64_t n, A* v) {
  for (int64_t c = 0; c < n; ++c) v[c] = pn[c] - (g[c] + g[c]);
}

// Adds the entries of v (candidates j0 + c) that pass the query's threshold.
template <typename A>
inline void filter_row(const A* v, int64_t n, int32_t j0, QueryState<A>& st, int64_t K) {
  for (int64_t c = 0; c < n; ++c) {
    if (v[c] <= *st.tv) st.add(v[c], j0 + static_cast<int32_t>(c), K);
  }
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
// Almost every entry fails the threshold: test four at a time.
template <>
inline void filter_row<float>(const float* v, int64_t n, int32_t j0, QueryState<float>& st,
                              int64_t K) {
  int64_t c = 0;
  __m128 t4 = _mm_set1_ps(*st.tv);
  for (; c + 4 <= n; c += 4) {
    int m = _mm_movemask_ps(_mm_cmple_ps(_mm_loadu_ps(v + c), t4));
    while (m) {
      const int l = __builtin_ctz(static_cast<unsigned>(m));
      m &= m - 1;
      if (v[c + l] <= *st.tv) st.add(v[c + l], j0 + static_cast<int32_t>(c + l), K);
    }
    t4 = _mm_set1_ps(*st.tv);
  }
  for (; c < n; ++c) {
    if (v[c] <= *st.tv) st.add(v[c], j0 + static_cast<int32_t>(c), K);
  }
}
#endif

// Offers candidates j0 + c (c in [0, n)) of one tile row to one query.  The
// first row a query sees sets its threshold with one selection, which spares
// the many compactions a cold start would cost.
template <typename A>
void scan_tile_row(const A* g, const A* pn, int64_t n, int32_t j0, QueryState<A>& st, int64_t K,
                   std::vector<A>& vbuf) {
  vbuf.resize(2 * n);
  A* v = vbuf.data();
  tile_values(g, pn, n, v);
  if (!st.seeded && n >= K) {
    A* sel = v + n;
    int64_t m = n;
    if (n >= 4 * K) {
      // An upper bound of the k-th smallest v instead of the exact one: the
      // k-th smallest of 2k strided group minima (k distinct entries lie at
      // or below it).  A selection over the whole row was a third of the
      // scan's time; this one is over 2k numbers.
      m = 2 * K;
      cpu::strided_group_min(v, n, m, sel);
    } else {
      std::copy(v, v + n, sel);
    }
    std::nth_element(sel, sel + (K - 1), sel + m);
    st.lower(sel[K - 1] + A(2) * st.margin);
    st.seeded = true;
  }
  filter_row(v, n, j0, st, K);
}

// The transposed use of a tile row: candidate i (norm pr) for the queries of
// columns [0, n), whose thresholds are tv[0, n).
template <typename A>
inline void scan_tile_col(const A* g, A pr, int64_t n, int32_t i, QueryState<A>* st, const A* tv,
                          int64_t K) {
  for (int64_t j = 0; j < n; ++j) {
    const A v = pr - (g[j] + g[j]);
    if (v <= tv[j]) st[j].add(v, i, K);
  }
}

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
template <>
inline void scan_tile_col<float>(const float* g, float pr, int64_t n, int32_t i,
                                 QueryState<float>* st, const float* tv, int64_t K) {
  const __m128 p4 = _mm_set1_ps(pr);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m128 g4 = _mm_loadu_ps(g + j);
    const __m128 v4 = _mm_sub_ps(p4, _mm_add_ps(g4, g4));
    int m = _mm_movemask_ps(_mm_cmple_ps(v4, _mm_loadu_ps(tv + j)));
    if (m == 0) continue;
    alignas(16) float vv[4];
    _mm_store_ps(vv, v4);
    while (m) {
      const int l = __builtin_ctz(static_cast<unsigned>(m));
      m &= m - 1;
      if (vv[l] <= tv[j + l]) st[j + l].add(vv[l], i, K);
    }
  }
  for (; j < n; ++j) {
    const float v = pr - (g[j] + g[j]);
    if (v <= tv[j]) st[j].add(v, i, K);
  }
}
#endif

// Everything the blocked search keeps about one cloud.
template <typename A>
struct CloudWork {
  bool active = false;     // has queries and points
  bool blocked = false;    // GEMM path (else every query is scanned)
  bool symmetric = false;  // self query over identical rows
  Cloud<A> c;
  std::vector<int32_t> qrows;  // row of each finite query
  std::vector<int32_t> qbad;   // rows searched directly (tile path)
  std::vector<A> qn;           // |q - mu|^2 of the finite queries (non-symmetric clouds)
  const A* qb = nullptr;       // this cloud's query rows and points (caller's arrays)
  const A* pb = nullptr;
  std::vector<QueryState<A>> states;
  std::vector<A> tv;           // per query: keep candidates with v <= tv
  int64_t nblocks = 0;         // query blocks (row blocks of the tile grid)
  int64_t qblock = kBlock;     // rows per query block

  // Query i of the GEMM is row qsrc()[qmap()[i]].
  const A* qsrc() const { return symmetric ? pb : qb; }
  const int32_t* qmap() const { return symmetric ? c.fidx.data() : qrows.data(); }
  const A* qnorm() const { return symmetric ? c.pn.data() : qn.data(); }
  int64_t nq() const { return static_cast<int64_t>(qrows.size()); }
};

template <typename A>
void prepare_cloud(const A* qb, const A* pb, int64_t Lq, int64_t L, int64_t D, int64_t K,
                   bool use_radius, A r2, bool self_query, KnnPath forced, CloudWork<A>* w) {
  w->qb = qb;
  w->pb = pb;
  w->active = Lq > 0 && L > 0;
  if (!w->active) return;
  Cloud<A>& c = w->c;
  prepare_points<A>(pb, L, D, &c);
  const int64_t nF = static_cast<int64_t>(c.fidx.size());
  w->blocked = c.ok && plan(KnnPath::kBlocked, Lq, nF, D, K, forced) == KnnPath::kBlocked;
  if (!w->blocked) {
    for (int64_t m = 0; m < Lq; ++m) w->qbad.push_back(static_cast<int32_t>(m));
    return;
  }
  w->symmetric = self_query && Lq == L;
  if (w->symmetric) {
    w->qrows = c.fidx;
    w->qbad = c.nonfinite;
  } else {
    for (int64_t m = 0; m < Lq; ++m) {
      bool fin = true;
      for (int64_t d = 0; d < D; ++d) fin = fin && std::isfinite(qb[m * D + d]);
      (fin ? w->qrows : w->qbad).push_back(static_cast<int32_t>(m));
    }
    const int64_t nQ = w->nq();
    w->qn.resize(nQ);
    A qmax = A(0);
    for (int64_t r = 0; r < nQ; ++r) {
      A s = A(0);
      for (int64_t d = 0; d < D; ++d) {
        const A y = qb[static_cast<int64_t>(w->qrows[r]) * D + d] - c.mu[d];
        s += y * y;
      }
      w->qn[r] = s;
      qmax = s > qmax ? s : qmax;
    }
    if (!(std::isfinite(qmax) && qmax < Numeric<A>::huge)) {
      // Norms could overflow: scan every query.
      w->blocked = false;
      w->qrows.clear();
      w->qbad.clear();
      for (int64_t m = 0; m < Lq; ++m) w->qbad.push_back(static_cast<int32_t>(m));
      return;
    }
  }
  const A delta = static_cast<A>(8 * D + 64) * Numeric<A>::unit;
  const int64_t nQ = w->nq();
  w->states.resize(nQ);
  w->tv.resize(nQ);
  const A* qn = w->qnorm();
  for (int64_t i = 0; i < nQ; ++i) {
    w->states[i].init(qn[i], c.pmax, delta, K, use_radius, r2, &w->tv[i]);
  }
  if (!w->symmetric) {
    // A query block is one task: with few queries, smaller blocks keep every
    // thread busy (a 64 x 16384 gallery search is otherwise one task).
    const int64_t threads = std::max<int64_t>(1, torch::stable::get_num_threads());
    const int64_t want = (nQ + 2 * threads - 1) / (2 * threads);
    w->qblock = std::min<int64_t>(kBlock, std::max<int64_t>(16, (want + 15) / 16 * 16));
  }
  w->nblocks = (nQ + w->qblock - 1) / w->qblock;
}

// One tile task: query block I against point block J of one cloud.  For a
// symmetric cloud the tile also serves point block J's queries (columns).
struct TileTask {
  int32_t cloud;
  int32_t I;
  int32_t J;  // -1: a non-symmetric query block against every point block
};

// Rows src[map[first .. first + n)] centred on mu, into out (n x D): the GEMM
// operands are made one tile at a time, so no centred copy of the cloud exists.
// (The values are those the norms were computed from: same arithmetic.)
template <typename A>
void load_centred(const A* src, const int32_t* map, int64_t first, int64_t n, int64_t D,
                  const A* mu, A* out) {
  for (int64_t r = 0; r < n; ++r) {
    const A* x = src + static_cast<int64_t>(map[first + r]) * D;
    for (int64_t d = 0; d < D; ++d) out[r * D + d] = x[d] - mu[d];
  }
}

template <typename A>
void run_tile(CloudWork<A>& w, const TileTask& t, int64_t D, int64_t K, std::vector<A>& G,
              std::vector<A>& vbuf, std::vector<A>& QI, std::vector<A>& PJ) {
  const Cloud<A>& c = w.c;
  const int64_t nF = static_cast<int64_t>(c.fidx.size());
  const int64_t i0 = t.I * w.qblock;
  const int64_t ri = std::min(w.qblock, w.nq() - i0);
  G.resize(kBlock * kBlock);
  QI.resize(kBlock * D);
  PJ.resize(kBlock * D);
  load_centred<A>(w.qsrc(), w.qmap(), i0, ri, D, c.mu.data(), QI.data());
  if (t.J < 0) {
    for (int64_t c0 = 0; c0 < nF; c0 += kBlock) {
      const int64_t cn = std::min(kBlock, nF - c0);
      load_centred<A>(w.pb, c.fidx.data(), c0, cn, D, c.mu.data(), PJ.data());
      gemm_nt<A>(QI.data(), ri, PJ.data(), cn, D, G.data());
      for (int64_t r = 0; r < ri; ++r) {
        scan_tile_row<A>(G.data() + r * cn, c.pn.data() + c0, cn, static_cast<int32_t>(c0),
                         w.states[i0 + r], K, vbuf);
      }
    }
    return;
  }
  const int64_t j0 = t.J * kBlock;
  const int64_t cn = std::min(kBlock, nF - j0);
  const A* pj = QI.data();
  if (t.I != t.J) {
    load_centred<A>(w.pb, c.fidx.data(), j0, cn, D, c.mu.data(), PJ.data());
    pj = PJ.data();
  }
  gemm_nt<A>(QI.data(), ri, pj, cn, D, G.data());
  for (int64_t r = 0; r < ri; ++r) {
    scan_tile_row<A>(G.data() + r * cn, c.pn.data() + j0, cn, static_cast<int32_t>(j0),
                     w.states[i0 + r], K, vbuf);
  }
  if (t.I == t.J) return;
  // The transpose: point block J's queries against point block I.
  for (int64_t r = 0; r < ri; ++r) {
    scan_tile_col<A>(G.data() + r * cn, c.pn[i0 + r], cn, static_cast<int32_t>(i0 + r),
                     w.states.data() + j0, w.tv.data() + j0, K);
  }
}

}  // namespace

template <typename A>
void knn_blocked_cpu(const KnnProblem<A>& pr) {
  const A *q = pr.q, *p = pr.p;
  const int64_t *ql = pr.ql, *pl = pr.pl;
  const int64_t B = pr.B, M = pr.M, N = pr.N, D = pr.D, K = pr.K;
  const bool use_radius = pr.use_radius;
  const A r2 = pr.r2();
  std::vector<CloudWork<A>> works(B);
  pcgeom::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      prepare_cloud<A>(q + b * M * D, p + b * N * D, ql[b], pl[b], D, K, use_radius, r2,
                       pr.self_query, pr.forced, &works[b]);
    }
  });

  // Rounds of tile tasks.  Round 0: the diagonal tiles of symmetric clouds and
  // the whole rows of the others; then the circle method pairs the blocks of
  // every symmetric cloud so that each round's pairs are disjoint.
  int64_t max_nb = 0;
  std::vector<TileTask> round;
  for (int64_t b = 0; b < B; ++b) {
    const CloudWork<A>& w = works[b];
    if (!w.active || !w.blocked) continue;
    for (int64_t I = 0; I < w.nblocks; ++I) {
      round.push_back({static_cast<int32_t>(b), static_cast<int32_t>(I),
                       w.symmetric ? static_cast<int32_t>(I) : -1});
    }
    if (w.symmetric) max_nb = std::max(max_nb, w.nblocks);
  }
  auto run_round = [&](const std::vector<TileTask>& tasks) {
    pcgeom::parallel_for(0, static_cast<int64_t>(tasks.size()), 1,
                                [&](int64_t begin, int64_t end) {
                                  std::vector<A> G, vbuf, QI, PJ;
                                  for (int64_t i = begin; i < end; ++i) {
                                    run_tile<A>(works[tasks[i].cloud], tasks[i], D, K, G,
                                                vbuf, QI, PJ);
                                  }
                                });
  };
  run_round(round);
  const int64_t n = max_nb % 2 ? max_nb + 1 : max_nb;  // even, with a dummy block
  for (int64_t r = 0; r + 1 < n; ++r) {
    round.clear();
    for (int64_t b = 0; b < B; ++b) {
      const CloudWork<A>& w = works[b];
      if (!w.active || !w.blocked || !w.symmetric) continue;
      for (int64_t i = 0; i < n / 2; ++i) {
        // Circle method: block n-1 stays, the others rotate.
        const int64_t x = i == 0 ? n - 1 : (r + i) % (n - 1);
        const int64_t y = (r - i + (n - 1)) % (n - 1);
        const int64_t I = std::min(x, y), J = std::max(x, y);
        if (J >= w.nblocks) continue;
        round.push_back({static_cast<int32_t>(b), static_cast<int32_t>(I),
                         static_cast<int32_t>(J)});
      }
    }
    if (!round.empty()) run_round(round);
  }

  // Final answers, and the rows scanned directly.
  std::vector<int64_t> offsets(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    offsets[b + 1] = offsets[b] + works[b].nq() + static_cast<int64_t>(works[b].qbad.size());
  }
  pcgeom::parallel_for(0, offsets[B], 8, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> rows;
    std::vector<A> dd;
    std::vector<A> bd(K);
    std::vector<int64_t> bi(K);
    int64_t b = std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1;
    for (int64_t s = begin; s < end; ++s) {
      while (s >= offsets[b + 1]) ++b;
      CloudWork<A>& w = works[b];
      const int64_t i = s - offsets[b];
      const A* qb = q + b * M * D;
      const A* pb = p + b * N * D;
      A* od = pr.out_d + b * M * K;
      int64_t* oi = pr.out_i + b * M * K;
      if (i < w.nq()) {
        const int64_t m = w.qrows[i];
        finalize<A>(w.c, qb + m * D, pb, D, K, w.states[i], use_radius, r2, rows, dd, bd.data(),
                    bi.data(), od + m * K, oi + m * K);
        std::vector<std::pair<A, int32_t>>().swap(w.states[i].cand);
      } else {
        const int32_t m = w.qbad[i - w.nq()];
        knn_tile_rows<A>(qb, &m, 1, pb, pl[b], D, K, use_radius, r2, od, oi);
      }
    }
  });

  write_padding_rows(pr);
}

template void knn_blocked_cpu<float>(const KnnProblem<float>&);
template void knn_blocked_cpu<double>(const KnnProblem<double>&);

}  // namespace pcgeom

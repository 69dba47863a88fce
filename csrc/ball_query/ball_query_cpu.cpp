// CPU kernel of pcgeom::ball_query: the KNN search restricted to dist2 <= radius^2.
#include <torch/csrc/stable/library.h>

#include "knn/knn_cpu.h"

namespace pcgeom {
namespace {

std::tuple<torch::stable::Tensor, torch::stable::Tensor> ball_query_cpu(
    torch::stable::Tensor query, torch::stable::Tensor points, double radius, int64_t k,
    torch::stable::Tensor query_lengths, torch::stable::Tensor points_lengths) {
  STD_TORCH_CHECK(radius >= 0.0, "ball_query: radius must be >= 0, got ", radius);
  // radius*radius is formed in double and rounded once to the accumulation type,
  // exactly as the reference path does.
  return knn_search_cpu(query, points, k, query_lengths, points_lengths, true, radius * radius,
                        "ball_query");
}

}  // namespace
}  // namespace pcgeom

STABLE_TORCH_LIBRARY_IMPL(pcgeom, CPU, m) {
  m.impl("ball_query", TORCH_BOX(&pcgeom::ball_query_cpu));
}

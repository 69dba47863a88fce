// CUDA kernel of pcgeom::ball_query: the CUDA KNN search restricted to
// dist2 <= radius^2 (the grid path also stops at the radius).
#include <torch/csrc/stable/library.h>

#include "knn/knn_cuda.h"

namespace pcgeom {
namespace cuda {
namespace {

std::tuple<torch::stable::Tensor, torch::stable::Tensor> ball_query_cuda(
    torch::stable::Tensor query, torch::stable::Tensor points, double radius, int64_t k,
    torch::stable::Tensor query_lengths, torch::stable::Tensor points_lengths) {
  STD_TORCH_CHECK(radius >= 0.0, "ball_query: radius must be >= 0, got ", radius);
  // radius*radius in double, rounded once to the accumulation type, as on the CPU.
  return knn_search_cuda(query, points, k, query_lengths, points_lengths, true, radius * radius,
                         "ball_query");
}

}  // namespace
}  // namespace cuda
}  // namespace pcgeom

#ifndef PCGEOM_CUDA_EMULATION
STABLE_TORCH_LIBRARY_IMPL(pcgeom, CUDA, m) {
  m.impl("ball_query", TORCH_BOX(&pcgeom::cuda::ball_query_cuda));
}
#else  // scripts/cuda_emu: the same kernels, run on the CPU by the emulator
STABLE_TORCH_LIBRARY_IMPL(pcgeom_emu, CPU, m) {
  m.impl("ball_query", TORCH_BOX(&pcgeom::cuda::ball_query_cuda));
}
#endif

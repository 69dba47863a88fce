// The one schema registration of the pcgeom op library (stable ABI).
// Kernels register themselves per device in csrc/<op>/<op>_{cpu,cuda}.*; the
// same schema strings are repeated in pcgeom/_schema.py for the pure-torch path,
// and tests/test_backend.py checks that the two agree.
#include <Python.h>

#include <torch/csrc/stable/library.h>

extern "C" {
// pcgeom loads this library with torch.ops.load_library; the module object only
// exists so that setuptools (and Windows linkers) see a valid extension module.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

STABLE_TORCH_LIBRARY(pcgeom, m) {
  m.def("knn(Tensor query, Tensor points, int k, Tensor query_lengths, Tensor points_lengths) -> (Tensor, Tensor)");
  m.def("knn_backward(Tensor grad_dist2, Tensor query, Tensor points, Tensor idx) -> (Tensor, Tensor)");
  m.def("ball_query(Tensor query, Tensor points, float radius, int k, Tensor query_lengths, Tensor points_lengths, bool index_order=False) -> (Tensor, Tensor)");
  m.def("knn_gather(Tensor x, Tensor idx) -> Tensor");
  m.def("knn_gather_backward(Tensor grad, Tensor idx, int n) -> Tensor");
  m.def("farthest_point_sample(Tensor points, int n_samples, Tensor lengths, Tensor start_index) -> Tensor");
  m.def("pca_normals(Tensor points, Tensor idx) -> (Tensor, Tensor)");
}

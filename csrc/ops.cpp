// The one schema registration of the pcgeom op library (stable ABI).
// Kernels register themselves per device in csrc/<op>/<op>_{cpu,cuda}.*; the m.def
// lines are generated at build time from the op registry, pcgeom/ops/registry.py,
// which the pure-torch path reads too (csrc/build_config.py writes the header).
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
#include "generated_schemas.h"
}

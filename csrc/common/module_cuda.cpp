// Module object for pcgeom._C_cuda (the CUDA kernels register themselves with
// STABLE_TORCH_LIBRARY_IMPL in csrc/<op>/<op>_cuda.cu; the schema lives in _C).
#include <Python.h>

extern "C" {
PyObject* PyInit__C_cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

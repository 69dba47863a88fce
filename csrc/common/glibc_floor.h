// Force-included into every pcgeom translation unit (csrc/build_config.py), host and CUDA.
//
// Why: the prebuilt wheels promise glibc 2.28 (manylinux_2_28, torch's own floor), but
// GCC >= 11's libstdc++ headers, on a glibc >= 2.32 build host, read the variable
// `__libc_single_threaded@GLIBC_2.32` in every shared_ptr / atomic refcount update
// (ext/atomicity.h). That one symbol would raise the wheel's floor to glibc 2.32
// (tag manylinux_2_34). glibc documents the variable as an optimisation hint only:
// "zero means the process might be multi-threaded". Answering zero, always, keeps the
// atomic (always-correct) path and removes the reference; nothing else changes.
// `auditwheel show` on the built wheel checks that no GLIBC_2.29+ symbol is left.
#pragma once
#if defined(__linux__) && defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>  // declares the real variable once, before the rename below
static inline char pcgeom_libc_may_be_multithreaded() { return 0; }
#define __libc_single_threaded pcgeom_libc_may_be_multithreaded()
#endif
#endif

// torch >= 2.14's stable headers (torch/csrc/stable/macros.h) look shims up with dlsym.
// glibc 2.34 moved dlopen/dlsym/dlclose from libdl into libc under a new version, so a
// build on glibc >= 2.34 would need GLIBC_2.34. Bind the original GLIBC_2.2.5 versions
// instead: libc still exports them (for old binaries), and on glibc < 2.34 libdl.so.2
// (linked by csrc/build_config.py's LINK_FLAGS, and by torch itself) provides them.
#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__CUDA_ARCH__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#endif

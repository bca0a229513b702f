#include "base/cublas_library.hpp"

#include <dlfcn.h>

#include <string>

#include "base/check.hpp"

// The expanded name: cublasCreate is a macro for cublasCreate_v2, the symbol the library exports.
#define MPITRON_CUBLAS_STRING(x) #x
#define MPITRON_CUBLAS_NAME(x) MPITRON_CUBLAS_STRING(x)

namespace mpitron::cublas {

namespace {

// By soname first (the executable's run path, LD_LIBRARY_PATH), then the toolkit it was built with.
void* open_library() {
  if (void* h = dlopen(MPITRON_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string first = dlerror();
  const std::string path = std::string(MPITRON_CUBLAS_DIR) + "/" + MPITRON_CUBLAS_SONAME;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  fail_at(__FILE__, __LINE__, "dlopen(" MPITRON_CUBLAS_SONAME ")",
          first + "; " + path + ": " + dlerror());
}

Library load() {
  void* h = open_library();  // libcublas; dlsym searches its dependency libcublasLt too
  Library lib;
#define MPITRON_CUBLAS_RESOLVE(name)                                                    \
  lib.name = reinterpret_cast<decltype(lib.name)>(dlsym(h, MPITRON_CUBLAS_NAME(name))); \
  if (!lib.name)                                                                        \
    fail_at(__FILE__, __LINE__, "dlsym(" MPITRON_CUBLAS_NAME(name) ")",                 \
            std::string("not in " MPITRON_CUBLAS_SONAME ": ") + dlerror());
  MPITRON_CUBLAS_FUNCTIONS(MPITRON_CUBLAS_RESOLVE)
  MPITRON_CUBLAS_RESOLVE(cublasGemmEx)
#undef MPITRON_CUBLAS_RESOLVE
  return lib;
}

}  // namespace

const Library& library() {
  static const Library lib = load();
  return lib;
}

}  // namespace mpitron::cublas

#include "base/cudnn_library.hpp"

#include <dlfcn.h>

#include <string>

#define MPITRON_CUDNN_STRING(x) #x
#define MPITRON_CUDNN_NAME(x) MPITRON_CUDNN_STRING(x)
// libcudnn.so.<major>: the shim that loads cuDNN's sub-libraries (cnn, ops, graph) on demand.
#define MPITRON_CUDNN_SONAME "libcudnn.so." MPITRON_CUDNN_NAME(CUDNN_MAJOR)

namespace mpitron::cudnn {

namespace {

// By soname first (the run path, LD_LIBRARY_PATH, the system's), then where the build found it.
void* open_library() {
  if (void* h = dlopen(MPITRON_CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string first = dlerror();
  const std::string path = std::string(MPITRON_CUDNN_DIR) + "/" + MPITRON_CUDNN_SONAME;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  fail_at(__FILE__, __LINE__, "dlopen(" MPITRON_CUDNN_SONAME ")",
          first + "; " + path + ": " + dlerror());
}

Library load() {
  void* h = open_library();
  Library lib;
#define MPITRON_CUDNN_RESOLVE(name)                                 \
  lib.name = reinterpret_cast<decltype(lib.name)>(dlsym(h, #name)); \
  if (!lib.name)                                                    \
    fail_at(__FILE__, __LINE__, "dlsym(" #name ")",                 \
            std::string("not in " MPITRON_CUDNN_SONAME ": ") + dlerror());
  MPITRON_CUDNN_FUNCTIONS(MPITRON_CUDNN_RESOLVE)
#undef MPITRON_CUDNN_RESOLVE
  // Built against one major version, run with it: the ABI of the legacy calls is per major.
  // cuDNN 9 numbers itself major * 10000 + minor * 100 + patch, cuDNN 8 major * 1000 + ...
  const size_t version = lib.cudnnGetVersion();
  if ((version >= 10000 ? version / 10000 : version / 1000) != CUDNN_MAJOR)
    fail_at(__FILE__, __LINE__, "cudnnGetVersion()",
            "the cuDNN loaded is " + std::to_string(version) +
                ", this build was made with major version " MPITRON_CUDNN_NAME(CUDNN_MAJOR));
  return lib;
}

}  // namespace

const Library& library() {
  static const Library lib = load();
  return lib;
}

}  // namespace mpitron::cudnn

// Opening one of the node's own libraries at run time (NCCL, the CUDA runtime, NVML) where a
// program of the user's would find it: in LD_LIBRARY_PATH's directories first (where
// `module load cuda` puts CUDA), then where the loader looks. Started from its bundle, muster
// runs under a loader given --library-path, which then ignores LD_LIBRARY_PATH, so its
// directories are searched here, in their order, before the system's.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace muster {

inline void* open_node_library(const char* name, int flags) {
  const char* path = std::getenv("LD_LIBRARY_PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty())
      if (void* handle = dlopen((dir + "/" + name).c_str(), flags)) return handle;
  return dlopen(name, flags);
}

}  // namespace muster

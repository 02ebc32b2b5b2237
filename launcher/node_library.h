// Opening one of the node's own libraries at run time (NCCL, the CUDA runtime, NVML) where a
// program of the user's would find it: in LD_LIBRARY_PATH's directories first (where
// `module load cuda` puts CUDA), then where the loader looks. Started from its bundle, muster
// runs under a loader given --library-path, which then ignores LD_LIBRARY_PATH, so its
// directories are searched here, in their order, before the system's.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <span>
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

// The first of a library's sonames (newest first) that opens.
inline void* open_node_library(std::span<const char* const> names, int flags) {
  for (const char* name : names)
    if (void* handle = open_node_library(name, flags)) return handle;
  return nullptr;
}

// A library of the node's opened at run time (open_node_library) and closed with this
// object, unless it is one that cannot be unloaded safely once used (the CUDA runtime with
// contexts, NCCL), its entry points bound by name. Whether it loaded: loaded().
class NodeLibrary {
 public:
  enum class Close { WithThis, Never };
  NodeLibrary(const char* name, int flags, Close close = Close::WithThis)
      : handle_(open_node_library(name, flags)), close_(close) {}
  // The first of these sonames that opens.
  NodeLibrary(std::span<const char* const> names, int flags, Close close = Close::WithThis)
      : handle_(open_node_library(names, flags)), close_(close) {}
  // One of muster's own libraries, which its bundle carries (libdw): found by the loader's
  // own search, the bundle's library path on a node, and never first in the user's
  // LD_LIBRARY_PATH, where another build would not match what the bundle loads beside it.
  static NodeLibrary musters_own(const char* soname, int flags, Close close = Close::WithThis) {
    return NodeLibrary(dlopen(soname, flags), close);
  }
  ~NodeLibrary() {
    if (handle_ && close_ == Close::WithThis) dlclose(handle_);
  }
  NodeLibrary(const NodeLibrary&) = delete;
  NodeLibrary& operator=(const NodeLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  // Sets `fn` to the entry point `symbol`; false (and `fn` null) when the library lacks it.
  template <typename Fn>
  bool bind(Fn& fn, const char* symbol) const {
    fn = handle_ ? reinterpret_cast<Fn>(dlsym(handle_, symbol)) : nullptr;
    return fn != nullptr;
  }

 private:
  NodeLibrary(void* handle, Close close) : handle_(handle), close_(close) {}
  void* handle_;
  Close close_;
};

}  // namespace muster

// libFuzzer: cluster files, as a user writes them. Every problem is an Error with messages,
// never a crash, a hang or an exception of another kind.
#include <cstdint>
#include <string_view>

#include "launcher/cluster/cluster_file.h"
#include "launcher/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    muster::ClusterSpec spec =
        muster::parse_cluster_yaml(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    if (spec.nodes.empty()) __builtin_trap();  // a valid file names at least one node
  } catch (const muster::Error& e) {
    if (e.messages().empty()) __builtin_trap();
  }
  return 0;
}

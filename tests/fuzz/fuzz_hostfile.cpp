// libFuzzer: Open MPI / DeepSpeed hostfiles (first byte even) and -H (odd).
#include <cstdint>
#include <string_view>

#include "launcher/cluster/hostfile.h"
#include "launcher/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    muster::ClusterSpec spec = data[0] % 2 ? muster::parse_host_option(text)
                                           : muster::parse_hostfile(text, "fuzz-hostfile");
    for (const auto& node : spec.nodes)
      if (node.slots.fixed && (*node.slots.fixed < 1 || *node.slots.fixed > muster::kMaxSlotsPerNode))
        __builtin_trap();
  } catch (const muster::Error& e) {
    if (e.messages().empty()) __builtin_trap();
  }
  return 0;
}

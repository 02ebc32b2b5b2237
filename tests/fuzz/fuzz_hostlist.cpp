// libFuzzer: host lists, as nodeset-style input from a user or a file. Expansion, folding,
// sorting, and fold-then-expand giving back the same set.
#include <cstdint>
#include <set>
#include <string>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> names;
  try {
    names = muster::expand_hostlist(text);
  } catch (const muster::Error&) {
    return 0;  // refused, with a message: fine
  }
  const std::string folded = muster::fold_hostlist(names);
  const std::vector<std::string> sorted = muster::sort_hostlist(names);
  if (names.empty()) return 0;
  // Folding loses no name and adds none.
  std::vector<std::string> again = muster::expand_hostlist(folded);
  if (std::set<std::string>(again.begin(), again.end()) != std::set<std::string>(names.begin(), names.end()))
    __builtin_trap();
  if (std::set<std::string>(sorted.begin(), sorted.end()).size() != sorted.size()) __builtin_trap();
  return 0;
}

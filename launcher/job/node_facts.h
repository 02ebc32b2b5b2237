// Comparing what nodes say they are: the facts that set a node apart from the majority
// (a missing GPU, another kernel). `ping` warns about each; `doctor`'s topology stage
// checks every node against the others with the same comparison.
#pragma once

#include <string>
#include <vector>

#include "launcher/remote/launch_spec.h"

namespace muster {

// One fact of one node that differs from what most nodes have.
struct FactDifference {
  std::string what;   // "GPUs", "NICs", "CPUs", "memory", "kernel", "muster"
  std::string value;  // the node's, as shown: "7 (NVIDIA H100)"
  std::string usual;  // most nodes'
};

// For each of `nodes`, the facts in which it differs from a strict majority of them (with
// two nodes that differ, neither is odd).
std::vector<std::vector<FactDifference>> differences_from_majority(
    const std::vector<NodeHello>& nodes);

// "8 GPUs (NVIDIA H100 x8), 4 NICs, 224 CPUs, 2015 GiB, kernel 6.1.0" ("no GPUs" without).
std::string describe_node(const NodeHello& node);

// "8 GPUs (NVIDIA H100 x8)", "1 GPU (NVIDIA A10)" or "no GPUs".
std::string describe_gpus(int count, const std::vector<std::string>& models);

}  // namespace muster

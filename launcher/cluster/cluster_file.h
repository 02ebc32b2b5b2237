// Reading and validating YAML cluster files (annotated example: share/cluster.example.yaml).
#pragma once

#include <string>
#include <string_view>

#include "launcher/cluster/cluster_spec.h"

namespace muster {

// Reads a cluster file; every problem is reported at once as Error(Config) with
// "FILE:LINE:COLUMN: problem" messages.
ClusterSpec load_cluster_file(const std::string& path, ClusterUse use = ClusterUse::Ranks);

// Parses cluster YAML held in memory; `source` names it in messages.
ClusterSpec parse_cluster_yaml(std::string_view text, const std::string& source,
                               ClusterUse use = ClusterUse::Ranks);

}  // namespace muster

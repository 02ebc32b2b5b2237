// The flags that say which cluster a command works on, shared by every subcommand.
#pragma once

#include <optional>
#include <string>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/cluster/rank_plan.h"

namespace CLI {
class App;
}

namespace muster::cli {

// -f, --hostfile, -H, -n and --map-by as given.
struct ClusterInputOptions {
  std::string cluster_file;
  std::string hostfile;
  std::string hosts;
  std::optional<int> ranks;  // -n
  std::string map_by = "slot";
};

// Declares the cluster flags on `app`.
void add_cluster_input_options(CLI::App& app, ClusterInputOptions& options);

// The cluster the flags name; this machine when none of -f, --hostfile, -H was given.
ClusterSpec load_cluster(const ClusterInputOptions& options);

// --map-by as an enum.
MapBy map_by_of(const ClusterInputOptions& options);

}  // namespace muster::cli

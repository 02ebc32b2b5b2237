// Which cluster a command works on, as the user named it: a cluster file, a hostfile, -H,
// or nothing (this machine, with -n ranks).
#pragma once

#include <optional>
#include <string>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/cluster/slurm_allocation.h"

namespace muster {

struct ClusterInput {
  std::string cluster_file;   // -f
  std::string hostfile;       // --hostfile
  std::string hosts;          // -H
  std::optional<int> ranks;   // -n
  MapBy map_by = MapBy::Slot; // --map-by
  LauncherChoice launcher = LauncherChoice::Auto;  // --launcher
  ClusterUse use = ClusterUse::Ranks;               // exec's is Command
};

// The cluster `input` names; with none of -f, --hostfile, -H, the Slurm allocation muster
// runs in (with --launcher auto or slurm), else this machine. `env` is muster's environment.
// Throws Error(Config) with every problem of the input at once.
ClusterSpec load_cluster(const ClusterInput& input, const Environment& env = Environment::current());

}  // namespace muster

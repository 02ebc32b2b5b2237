// The flags that say which cluster a command works on, shared by every subcommand.
#pragma once

#include <optional>

#include "launcher/cluster/cluster_input.h"
#include "launcher/cluster/cluster_spec.h"

namespace CLI {
class App;
}

namespace muster::cli {

// Whether a command places ranks (-n and --map-by mean something to it).
enum class RankFlags { Declared, Omitted };

// Declares -f, --hostfile and -H on `app`, and -n and --map-by when `ranks` says so.
void add_cluster_input_options(CLI::App& app, ClusterInput& input, RankFlags ranks = RankFlags::Declared);

// Which nodes are held back as spares: --spares K (the last K) or -N/--nodes N (the first N
// run the job, as srun -N inside a larger allocation); the cluster file's 'spare: true' too.
struct SpareFlags {
  int spares = 0;
  std::optional<int> nodes;
};
void add_spare_flags(CLI::App& app, SpareFlags& flags, const std::string& spares_help);
// Marks `cluster`'s spares as `flags` say; throws Error(Usage) when they leave none to run on.
void hold_spares(ClusterSpec& cluster, const SpareFlags& flags);

}  // namespace muster::cli

// The flags that say which cluster a command works on, shared by every subcommand.
#pragma once

#include "launcher/cluster/cluster_input.h"

namespace CLI {
class App;
}

namespace muster::cli {

// Whether a command places ranks (-n and --map-by mean something to it).
enum class RankFlags { Declared, Omitted };

// Declares -f, --hostfile and -H on `app`, and -n and --map-by when `ranks` says so.
void add_cluster_input_options(CLI::App& app, ClusterInput& input, RankFlags ranks = RankFlags::Declared);

}  // namespace muster::cli

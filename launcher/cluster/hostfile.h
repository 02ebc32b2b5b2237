// The other ways to name a cluster: Open MPI / DeepSpeed hostfiles, `-H`, and `-n` alone.
#pragma once

#include <string>
#include <string_view>

#include "launcher/cluster/cluster_spec.h"

namespace muster {

// Reads an Open MPI or DeepSpeed hostfile: "host slots=N" lines, '#' comments.
ClusterSpec load_hostfile(const std::string& path, ClusterUse use = ClusterUse::Ranks);

// Parses hostfile text held in memory; `source` names it in messages.
ClusterSpec parse_hostfile(std::string_view text, const std::string& source,
                          ClusterUse use = ClusterUse::Ranks);

// Parses `-H host[:slots],...`, where each host may be a host list ("gpu[01-04]:8").
ClusterSpec parse_host_option(std::string_view text, ClusterUse use = ClusterUse::Ranks);

// The cluster when none is given: this machine, under the name "localhost".
ClusterSpec this_machine_cluster();

// The name this machine gives itself (gethostname), "localhost" when it has none.
std::string this_hostname();

// True when `host` names the machine muster runs on (localhost, its hostname).
bool is_this_machine(const std::string& host);

// True when every node of `cluster` is this machine: it runs without SSH.
bool only_this_machine(const ClusterSpec& cluster);

}  // namespace muster

#include "cli/cluster_input.h"

#include <CLI/CLI.hpp>

#include "cli/flag_checks.h"
#include "launcher/cluster/cluster_file.h"
#include "launcher/cluster/hostfile.h"

namespace muster::cli {

void add_cluster_input_options(CLI::App& app, ClusterInputOptions& options) {
  auto* file = app.add_option("-f,--cluster", options.cluster_file,
                              "cluster file (YAML); see share/cluster.example.yaml");
  auto* hostfile = app.add_option("--hostfile", options.hostfile,
                                  "Open MPI / DeepSpeed hostfile ('HOST slots=N' lines)");
  auto* hosts = app.add_option("-H,--hosts", options.hosts,
                               "hosts as HOST[:SLOTS],... (host lists allowed: gpu[01-04]:8)");
  file->excludes(hostfile, hosts);
  hostfile->excludes(hosts);
  app.add_option("-n,--np", options.ranks,
                 "number of ranks (default: every slot; alone: N ranks on this machine)")
      ->check(at_least(1));
  app.add_option("--map-by", options.map_by,
                 "slot: fill each node in turn; node: round-robin over nodes")
      ->check(CLI::IsMember({"slot", "node"}));
}

ClusterSpec load_cluster(const ClusterInputOptions& options) {
  if (!options.cluster_file.empty()) return load_cluster_file(options.cluster_file);
  if (!options.hostfile.empty()) return load_hostfile(options.hostfile);
  if (!options.hosts.empty()) return parse_host_option(options.hosts);
  ClusterSpec spec = this_machine_cluster();
  // `-n N` alone means N ranks here, as with torchrun --nproc-per-node.
  if (options.ranks) spec.nodes.front().slots.fixed = *options.ranks;
  return spec;
}

MapBy map_by_of(const ClusterInputOptions& options) {
  return options.map_by == "node" ? MapBy::Node : MapBy::Slot;
}

}  // namespace muster::cli

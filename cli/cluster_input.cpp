#include "cli/cluster_input.h"

#include <map>

#include <CLI/CLI.hpp>

#include "cli/flag_checks.h"

namespace muster::cli {

void add_cluster_input_options(CLI::App& app, ClusterInput& input, RankFlags ranks) {
  auto* file = app.add_option("-f,--cluster", input.cluster_file,
                              "cluster file (YAML); see share/cluster.example.yaml")
                   ->check(not_empty("-f cluster.yaml"));
  auto* hostfile = app.add_option("--hostfile", input.hostfile,
                                  "Open MPI / DeepSpeed hostfile ('HOST slots=N' lines)")
                       ->check(not_empty("--hostfile hosts.txt"));
  auto* hosts = app.add_option("-H,--hosts", input.hosts,
                               "hosts as HOST[:SLOTS],... (host lists allowed: gpu[01-04]:8)")
                    ->check(not_empty("-H node1,node2"));
  file->excludes(hostfile, hosts);
  hostfile->excludes(hosts);
  static const std::map<std::string, LauncherChoice> kLaunchers = {
      {"auto", LauncherChoice::Auto}, {"ssh", LauncherChoice::Ssh}, {"slurm", LauncherChoice::Slurm}};
  add_choice(app, "--launcher", input.launcher, kLaunchers,
             "how agents reach the nodes: ssh, slurm (srun inside an allocation, whose nodes are "
             "the cluster when none is named) or auto (slurm inside an allocation, else ssh)");
  if (ranks == RankFlags::Omitted) return;
  app.add_option("-n,--np", input.ranks,
                 "number of ranks (default: every slot; alone: N ranks on this machine)")
      ->check(at_least(1))
      ->check(at_most(kMaxRanks));
  static const std::map<std::string, MapBy> kMapBy = {{"slot", MapBy::Slot}, {"node", MapBy::Node}};
  add_choice(app, "--map-by", input.map_by, kMapBy,
             "slot: fill each node in turn; node: round-robin over nodes");
}

}  // namespace muster::cli

#include "cli/cluster_input.h"

#include <map>

#include <CLI/CLI.hpp>

#include "cli/flag_checks.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/job/restarts.h"

namespace muster::cli {

void add_cluster_input_options(CLI::App& app, ClusterInput& input, RankFlags ranks) {
  auto* file = app.add_option("-f,--cluster", input.cluster_file,
                              "cluster file (YAML); see muster-cluster(5)")
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

void add_spare_flags(CLI::App& app, SpareFlags& flags, const std::string& spares_help) {
  auto* spares = app.add_option("--spares", flags.spares, spares_help)
                     ->option_text("K")
                     ->check(in_range(0, double(kMaxHostListSize), true));
  app.add_option("-N,--nodes", flags.nodes,
                 "run on the first N nodes and hold the rest back as spares, as srun -N inside a larger "
                 "Slurm allocation")
      ->option_text("N")
      ->check(in_range(1, double(kMaxHostListSize), true))
      ->excludes(spares);
}

void hold_spares(ClusterSpec& cluster, const SpareFlags& flags) {
  set_spares(cluster, flags.nodes ? spares_beyond(cluster, *flags.nodes) : flags.spares);
}

}  // namespace muster::cli

#include "launcher/cluster/cluster_input.h"

#include "launcher/cluster/cluster_file.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/error.h"

namespace muster {
namespace {

ClusterSpec named_cluster(const ClusterInput& input) {
  if (!input.cluster_file.empty()) return load_cluster_file(input.cluster_file, input.use);
  if (!input.hostfile.empty()) return load_hostfile(input.hostfile, input.use);
  return parse_host_option(input.hosts, input.use);
}

}  // namespace

ClusterSpec load_cluster(const ClusterInput& input, const Environment& env) {
  const bool named = !input.cluster_file.empty() || !input.hostfile.empty() || !input.hosts.empty();
  if (named) {
    ClusterSpec spec = named_cluster(input);
    // --launcher wins over the file's `launcher:`; auto keeps what the file says (SSH).
    if (input.launcher != LauncherChoice::Auto)
      spec.launcher = input.launcher == LauncherChoice::Slurm ? Launcher::Slurm : Launcher::Ssh;
    if (spec.launcher == Launcher::Slurm && !inside_slurm_allocation(env))
      throw Error(ErrorKind::Config,
                  spec.source + ": the Slurm launcher needs a Slurm allocation that holds these nodes "
                  "(SLURM_JOB_ID is not set); run muster inside salloc or sbatch, or use --launcher ssh");
    return spec;
  }
  // Inside an allocation the allocation is the cluster, as it is for srun and torchrun.
  if (input.launcher == LauncherChoice::Slurm ||
      (input.launcher == LauncherChoice::Auto && inside_slurm_allocation(env))) {
    return slurm_allocation_cluster(env);
  }
  ClusterSpec spec = this_machine_cluster();
  // `-n N` alone means N ranks here, as with torchrun --nproc-per-node.
  if (input.ranks) spec.nodes.front().slots.fixed = *input.ranks;
  return spec;
}

}  // namespace muster

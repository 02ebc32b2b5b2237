// A Slurm allocation as the cluster: inside `salloc`, `sbatch` or `srun --pty`, the nodes
// come from SLURM_JOB_NODELIST and the ranks per node from SLURM_TASKS_PER_NODE, so that no
// cluster file is needed where the scheduler already knows the machines.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/cluster/environment.h"

namespace muster {

// How agents are started on the nodes: over SSH, or as one Slurm step inside an allocation.
enum class LauncherChoice {
  Auto,   // Slurm inside an allocation, else SSH
  Ssh,
  Slurm,
};

// "ssh", "slurm", "auto": the spelling of --launcher and of a cluster file's `launcher:`.
std::optional<LauncherChoice> parse_launcher_choice(const std::string& text);

// True when `env` is inside a Slurm allocation (SLURM_JOB_ID and a node list are set).
bool inside_slurm_allocation(const Environment& env);

// Expands Slurm's compressed per-node counts ("2(x3),1" is 2,2,2,1). Throws Error(Config)
// naming `what` on anything else, and bounds every count by the ranks a node may run.
std::vector<int> expand_slurm_counts(const std::string& text, const std::string& what);

// The allocation in `env` as a cluster: one node per host of SLURM_JOB_NODELIST in order,
// slots from SLURM_TASKS_PER_NODE (or `slots: auto` when `auto_slots`), launched through
// srun. Throws Error(Config) when `env` is not inside an allocation or its variables do not
// parse, naming the variable and what to do.
ClusterSpec slurm_allocation_cluster(const Environment& env, bool auto_slots = false);

// The variables of Slurm's own that srun sets for one task (its rank, its step). A rank that
// srun did not start must not see them: they would describe the agent, not the rank.
bool is_slurm_task_variable(const std::string& name);

}  // namespace muster

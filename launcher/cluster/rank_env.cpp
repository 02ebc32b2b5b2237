#include "launcher/cluster/rank_env.h"

#include <regex>

#include <fmt/format.h>

#include "launcher/cluster/slurm_allocation.h"
#include "launcher/error.h"

namespace muster {

namespace {
// torch's TCPStore and JAX's coordinator honour proxy variables; a proxy that cannot reach
// the rendezvous turns into a hang at init (field notes #13).
void bypass_proxy_for(Environment& env, const std::string& address) {
  bool proxied = false;
  for (const char* name : {"http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                           "ALL_PROXY"})
    proxied |= !env.get(name).empty();
  if (!proxied || address.empty()) return;
  for (const char* name : {"NO_PROXY", "no_proxy"}) {
    std::string list = env.get(name);
    std::string padded = "," + list + ",";
    if (padded.find("," + address + ",") != std::string::npos) continue;
    env.set(name, list.empty() ? address : list + "," + address);
  }
}
}  // namespace

std::vector<std::string> job_markers(const JobEnvironment& job, int node_rank) {
  return {"MUSTER_JOB_ID=" + job.job_id, "MUSTER_NODE_RANK=" + std::to_string(node_rank)};
}

std::map<std::string, std::string> resolve_exports(const std::vector<std::string>& options,
                                                   const Environment& muster_env) {
  static const std::regex name_pattern("[A-Za-z_][A-Za-z0-9_]*");
  std::map<std::string, std::string> out;
  for (const auto& option : options) {
    auto eq = option.find('=');
    std::string name = option.substr(0, eq);
    if (!std::regex_match(name, name_pattern))
      throw Error(ErrorKind::Usage, fmt::format("-x '{}': '{}' is not a valid environment "
                                                "variable name", option, name));
    if (eq != std::string::npos) {
      out[name] = option.substr(eq + 1);
    } else if (muster_env.has(name)) {
      out[name] = muster_env.get(name);
    } else {
      throw Error(ErrorKind::Usage, fmt::format("-x {}: {} is not set in muster's environment; "
                                                "set it or write -x {}=VALUE", name, name, name));
    }
  }
  return out;
}

namespace {

// Whether the user chose what default `name` would: on the node, in launch.env or with -x.
// Open MPI refuses an include list beside an exclude list, so either is the user's choice.
bool chosen_by_user(const Environment& base, const JobEnvironment& job, const std::string& name) {
  std::vector<std::string> names{name};
  if (const size_t at = name.rfind("_if_include"); at != std::string::npos)
    names.push_back(name.substr(0, at) + "_if_exclude");
  for (const auto& n : names)
    if (base.has(n) || job.launch_env.count(n) || job.exports.count(n)) return true;
  return false;
}

}  // namespace

Environment rank_environment(const Environment& base, const RankPlan& plan, int rank,
                             const JobEnvironment& job) {
  const RankAssignment& r = plan.ranks.at(size_t(rank));
  return rank_environment(base, node_view(plan, r.node_rank), r, job);
}

Environment rank_environment(const Environment& base, const NodeView& node, const RankAssignment& r,
                             const JobEnvironment& job) {
  const std::string world = std::to_string(node.world_size);
  const std::string local_size = std::to_string(node.ranks.size());
  const int nodes_used = node.nodes_used;

  Environment env = base;
  // srun set these for the agent that starts this rank (or for a batch script's own task),
  // not for the rank: code that reads SLURM_PROCID would take the agent's id for its own.
  for (const auto& [name, value] : base.vars())
    if (is_slurm_task_variable(name)) env.unset(name);
  // torch (env:// and torchrun's names)
  env.set("RANK", std::to_string(r.rank));
  env.set("LOCAL_RANK", std::to_string(r.local_rank));
  env.set("WORLD_SIZE", world);
  env.set("LOCAL_WORLD_SIZE", local_size);
  env.set("GROUP_RANK", std::to_string(r.group_rank));
  env.set("MASTER_ADDR", job.master_addr);
  env.set("MASTER_PORT", std::to_string(job.master_port));
  // JAX: what jax.distributed.initialize(coordinator_address, num_processes, process_id,
  // local_device_ids) takes; the rank's own GPU, so that JAX uses that one and no other.
  env.set("JAX_COORDINATOR_ADDRESS",
          fmt::format("{}:{}", job.master_addr, job.jax_coordinator_port));
  env.set("JAX_NUM_PROCESSES", world);
  env.set("JAX_PROCESS_ID", std::to_string(r.rank));
  if (r.gpu) env.set("JAX_LOCAL_DEVICE_IDS", std::to_string(*r.gpu));
  // Open MPI-aware code (Horovod, mpi4py users, nccl-tests)
  env.set("OMPI_COMM_WORLD_SIZE", world);
  env.set("OMPI_COMM_WORLD_RANK", std::to_string(r.rank));
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r.local_rank));
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", local_size);
  env.set("OMPI_COMM_WORLD_NODE_RANK", std::to_string(r.local_rank));  // among the node's processes, as mpirun
  env.set("MUSTER_JOB_ID", job.job_id);
  // torchrun's name too, so that a script written for torchrun resumes from its checkpoint.
  env.set("MUSTER_RESTART_COUNT", std::to_string(job.restart_count));
  env.set("TORCHELASTIC_RESTART_COUNT", std::to_string(job.restart_count));
  env.set("MUSTER_NNODES", std::to_string(nodes_used));
  env.set("MUSTER_NODE_RANK", std::to_string(r.node_rank));
  // torchrun's rule: several ranks on one node would otherwise oversubscribe its cores.
  if (node.ranks.size() > 1 && !base.has("OMP_NUM_THREADS") &&
      !job.launch_env.count("OMP_NUM_THREADS") && !job.exports.count("OMP_NUM_THREADS"))
    env.set("OMP_NUM_THREADS", "1");
  // muster numbers GPUs in PCI bus order; CUDA must count the same way for LOCAL_RANK to
  // name the GPU the rank was bound next to.
  if (!base.has("CUDA_DEVICE_ORDER")) env.set("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  if (auto it = job.node_defaults.find(r.node_rank); it != job.node_defaults.end())
    for (const auto& [name, value] : it->second)
      if (!chosen_by_user(base, job, name)) env.set(name, value);
  if (auto it = job.node_env.find(r.node_rank); it != job.node_env.end())
    for (const auto& [name, value] : it->second) env.set(name, value);
  for (const auto& [name, value] : job.launch_env) env.set(name, value);
  for (const auto& [name, value] : job.exports) env.set(name, value);
  bypass_proxy_for(env, env.get("MASTER_ADDR"));
  return env;
}

}  // namespace muster

// The environment each rank starts with: what torch, JAX, Open MPI-aware code and muster
// itself read, then the cluster file's launch.env, then -x.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/cluster/environment.h"
#include "launcher/cluster/rank_plan.h"

namespace muster {

// Facts shared by every rank of one job.
struct JobEnvironment {
  std::string job_id;             // MUSTER_JOB_ID: how cleanup recognises this job's processes
  std::string master_addr;        // where rank 0's rendezvous listens
  int master_port = 0;            // torch's MASTER_PORT
  int jax_coordinator_port = 0;   // JAX's coordinator; its own port so torch and JAX can coexist
  int restart_count = 0;          // how many times the job was started again (--restarts)
  // Per node (by node rank), chosen from measurements (NCCL_SOCKET_IFNAME, ...); the
  // cluster file's launch.env and -x still win.
  std::map<int, std::map<std::string, std::string>> node_env;
  // Per node, what the node's own environment overrides (the interface MPI uses).
  std::map<int, std::map<std::string, std::string>> node_defaults;
  std::map<std::string, std::string> launch_env;  // cluster file's launch.env
  std::map<std::string, std::string> exports;     // -x, already resolved to values
};

// The environment entries that mark this job's processes on node `node_rank`: cleanup
// recognises them by these, never by a pattern (several nodes may share a pid namespace).
std::vector<std::string> job_markers(const JobEnvironment& job, int node_rank);

// Resolves `-x VAR` (copy from muster's environment) and `-x VAR=VALUE`.
// Throws Error(Usage) naming the option when a name is invalid or VAR is unset.
std::map<std::string, std::string> resolve_exports(const std::vector<std::string>& options,
                                                   const Environment& muster_env);

// The environment of `rank`: `base` (the node's own), then the variables frameworks read,
// then the node's measured choices, then launch.env, then -x; later ones win. When a proxy
// is configured, MASTER_ADDR joins NO_PROXY/no_proxy so rendezvous never goes through it.
Environment rank_environment(const Environment& base, const NodeView& node, const RankAssignment& rank,
                             const JobEnvironment& job);
// The same for `rank` of a whole plan.
Environment rank_environment(const Environment& base, const RankPlan& plan, int rank,
                             const JobEnvironment& job);

}  // namespace muster

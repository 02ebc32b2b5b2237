// A real Slurm on the test cluster: munged, slurmctld in the head's namespace (under this
// machine's own hostname, as SlurmctldHost requires) and one slurmd per test host, each in
// that host's namespaces with its own node name and spool directory. proctrack/linuxproc and
// task/none keep slurmd off the cgroup hierarchy, which network namespaces hide. Everything
// is stopped (by pid) and removed afterwards, also when a test fails. Needs root.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace muster::testing {

class SlurmCluster {
 public:
  // Why this machine cannot run Slurm's daemons (not root, slurm-wlm or munge missing), or "".
  static std::string unavailable_reason();

  // Each node's gres: gpu, as many as the fake machine eight-gpus-nvswitch has.
  static constexpr int kGpusPerNode = 8;
  static constexpr int kCpusPerNode = 8;

  // `hidden_from_nodes`: a directory that every slurmd but the first (and so every task of
  // theirs) sees empty, as nodes that do not share the head's file system would, beside a
  // batch node that does (a tmpfs over it in their mount namespace).
  explicit SlurmCluster(int hosts, const std::string& hidden_from_nodes = "");
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  TestCluster& hosts() { return cluster_; }
  // SLURM_CONF=..., for every Slurm command and for muster.
  std::string conf_variable() const { return "SLURM_CONF=" + dir_ + "/slurm.conf"; }
  // `argv` run in the head's namespace with SLURM_CONF set (salloc, sbatch, scancel...).
  std::vector<std::string> head_command(const std::vector<std::string>& argv) const;
  CommandResult run(const std::vector<std::string>& argv, int limit_s = 120) const;
  // `salloc -N<nodes> --time=<minutes> -- muster ARGS`.
  std::vector<std::string> salloc_muster(int nodes, const std::vector<std::string>& args,
                                         const std::vector<std::string>& salloc_options = {}) const;
  const std::string& dir() const { return dir_; }

  // Kills host i's slurmd and every process of that host (a node that lost its power).
  void lose_host(int i);
  // The pids of processes on host i whose command line starts with `word`.
  std::vector<pid_t> processes_on(int i, const std::string& word) const;

 private:
  void write_config() const;
  void wait_until_idle() const;
  void stop();

  TestCluster cluster_;
  std::string dir_;
  pid_t munged_ = -1, slurmctld_ = -1;
  std::vector<pid_t> slurmd_;
};

}  // namespace muster::testing

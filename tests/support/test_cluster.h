// A cluster of test hosts on this machine: each host a network namespace and a UTS
// namespace (its own hostname) running Debian's sshd with keys made in a temporary
// directory, all joined by a bridge. The head (muster) runs in a namespace of its own on
// the same bridge. Everything is removed afterwards, also when a test fails; a run that was
// killed outright is cleaned up by the next one. Needs root.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/command_runner.h"

// In a test's SetUp: skip (or, in CI, fail) when this machine cannot host a test cluster.
// A suite that brings up a cluster is named "...Cluster": tests/CMakeLists.txt gives every
// such suite the one cluster lock by that name, and a test that is not is failed here, so
// that no suite is ever left out of the lock by hand.
#define MUSTER_REQUIRE_TEST_CLUSTER_OF(Cluster)                                                    \
  do {                                                                                             \
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name(); \
    if (!suite.ends_with("Cluster"))                                                               \
      FAIL() << "suite " << suite << " brings up a test cluster: its name must end in Cluster, "  \
             << "which is how tests/CMakeLists.txt gives it the cluster lock";                    \
    std::string why_not = Cluster::unavailable_reason();                                           \
    if (!why_not.empty()) {                                                                        \
      if (::muster::testing::in_ci()) FAIL() << why_not;                                           \
      GTEST_SKIP() << why_not;                                                                     \
    }                                                                                              \
  } while (0)
#define MUSTER_REQUIRE_TEST_CLUSTER() MUSTER_REQUIRE_TEST_CLUSTER_OF(::muster::testing::TestCluster)

namespace muster::testing {

// How a test host differs from a Debian node with muster's libraries installed.
struct HostSetup {
  std::vector<std::string> hidden_libraries;  // sonames bind-mounted over with an empty file
  bool sftp = true;                            // sshd offers the sftp subsystem
  bool own_cache = false;                      // ~/.cache is the host's own, not the shared one
  bool busybox_root = false;                   // sessions are chrooted into a directory that
                                               // holds only a statically linked busybox
  bool installed_muster = false;               // build/muster on the host's PATH
  std::vector<std::string> environment;        // NAME=VALUE in every session (sshd's SetEnv)
  std::string force_command;                   // run instead of every command (a site's
                                               // wrapper; sshd's ForceCommand)
};

class TestCluster {
 public:
  // Why this machine cannot host a test cluster (not root, no sshd, no ip), or "".
  static std::string unavailable_reason();

  explicit TestCluster(int hosts);
  ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  int size() const { return int(hosts_.size()); }
  // "node1", ...: the hostname inside host i (0-based) and its name in cluster files.
  std::string host(int i) const;
  // 10.x.y.(i+1): where host i's sshd listens.
  std::string address(int i) const;

  // A cluster file for the hosts with the test keys; `extra` is appended (e.g. "launch: ...").
  std::string write_cluster_file(const std::string& extra = "",
                                 const std::string& host_keys = "strict") const;
  const std::string& dir() const { return dir_; }
  std::string known_hosts() const { return dir_ + "/known_hosts"; }

  // Runs build/muster ARGS in the head's namespace.
  CommandResult muster(const std::vector<std::string>& args, int limit_s = 180) const;
  std::vector<std::string> muster_argv(const std::vector<std::string>& args) const;
  // A command run in the head's network namespace (where muster runs).
  std::vector<std::string> head_argv(const std::vector<std::string>& argv) const;
  // Every process in host i's network namespace (its sshd, sessions, agent, ranks).
  std::vector<pid_t> processes_on(int i) const;
  // Runs a command inside host i's network namespace.
  CommandResult on_host(int i, const std::vector<std::string>& argv) const;
  std::vector<std::string> host_argv(int i, const std::vector<std::string>& argv) const;

  // Caps host i's link to the LAN at `rate` (in tc's words: "30mbit") both ways, as a
  // degraded NIC or cable would: a tbf on its eth0 and on the bridge's port toward it.
  void cap_host(int i, const std::string& rate);
  // Caps only the traffic between hosts a and b at `rate`, both ways, as a bad route or
  // switch port between them would: on each one's eth0, an htb class for the other's address.
  void cap_link(int a, int b, const std::string& rate);

  // Adds a second LAN: every host gets eth1 with second_address(i).
  void add_second_network();
  std::string second_address(int i) const;

  // How many SSH connections host i's sshd has accepted (authenticated) so far.
  int accepted_connections(int i) const;

  // Restarts host i's sshd as `setup` says (HostSetup{} undoes it).
  void set_up_host(int i, const HostSetup& setup);
  // Where host i's ~/.cache/muster is, seen from outside the host.
  std::string muster_cache(int i) const;

  void stop_sshd(int i);
  // Freezes (SIGSTOP) or thaws (SIGCONT) host i's sshd: it accepts TCP but never answers.
  void freeze_sshd(int i, bool frozen);
  void start_sshd(int i);
  // Gives host i a new host key (as a reinstall would); known_hosts keeps the old one.
  void change_host_key(int i);
  // Rewrites known_hosts with every host's current key, leaving out host `except`.
  void trust_host_keys(int except = -1) const;

  // The head's network namespace, where muster (and a Slurm controller) runs.
  const std::string& head_namespace() const { return head_ns_; }
  // Starts `command` (a shell command that execs a daemon) as host i's own process: in its
  // network namespace, with its hostname, machine-id and boot id; output to `log`. /sys stays
  // the machine's, so that cgroup file systems remain visible (slurmd needs them).
  pid_t start_on_host(int i, const std::string& command, const std::string& log) const;

  // Stops every sshd and removes the namespaces and files (also called on SIGINT/SIGTERM).
  void tear_down();

  struct Host {
    std::string ns;
    pid_t sshd = -1;
    HostSetup setup;
  };

 private:
  void make_network();
  void make_keys();
  void write_sshd_config(int i) const;
  void wait_for_sshd(int i) const;
  std::string chroot_dir(int i) const;
  void make_busybox_root(int i) const;
  std::string setup_script(int i) const;
  // Which /sys a host process sees: the host's own (`ip netns exec` mounts it), or the
  // machine's, where the cgroup file systems stay visible.
  enum class SysView { Host, Machine };
  // Forks `sh -c` in host i's namespaces (its hostname, machine-id, boot id, Debian's
  // ~/.bashrc) running `script_tail`, with its output to `log_path`.
  pid_t spawn_on_host(int i, const std::string& script_tail, const std::string& log_path, SysView sys) const;

  std::string prefix_;   // namespace names start with it
  std::string subnet_;   // "10.N.M"
  std::string second_subnet_;
  std::string dir_;
  std::string head_ns_, lan_ns_;
  std::vector<Host> hosts_;
};

}  // namespace muster::testing

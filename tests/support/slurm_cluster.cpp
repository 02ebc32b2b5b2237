#include "tests/support/build_paths.h"
#include "tests/support/slurm_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace muster::testing {
namespace {

void stop_pid(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  for (int tries = 0; tries < 150 && waitpid(pid, &status, WNOHANG) == 0; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

std::string this_hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string s = name;
  return s.substr(0, s.find('.'));
}

}  // namespace

std::string SlurmCluster::unavailable_reason() {
  std::string why = TestCluster::unavailable_reason();
  if (!why.empty()) return why;
  for (const char* tool : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun", "/usr/bin/salloc",
                           "/usr/sbin/munged", "/usr/bin/nsenter"})
    if (access(tool, X_OK) != 0)
      return fmt::format("{} is missing (apt-get install slurm-wlm munge)", tool);
  return "";
}

SlurmCluster::SlurmCluster(int hosts, const std::string& hidden_from_nodes) : cluster_(hosts) {
  dir_ = cluster_.dir() + "/slurm";
  try {
    std::filesystem::create_directories(dir_ + "/state");
    for (int i = 0; i < hosts; ++i) std::filesystem::create_directories(dir_ + "/spool-" + cluster_.host(i));
    // munged insists on a key only its user can read, in directories no one else can write.
    std::filesystem::permissions(cluster_.dir(), std::filesystem::perms(0755));
    std::filesystem::permissions(dir_, std::filesystem::perms(0755));
    {
      std::ofstream key(dir_ + "/munge.key", std::ios::binary);
      std::ifstream random("/dev/urandom", std::ios::binary);
      char bytes[128];
      random.read(bytes, sizeof bytes);
      key.write(bytes, sizeof bytes);
    }
    std::filesystem::permissions(dir_ + "/munge.key", std::filesystem::perms(0600));
    write_config();

    munged_ = fork();
    if (munged_ == 0) {
      int log = open((dir_ + "/munged.out").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(log, 1);
      dup2(log, 2);
      execl("/usr/sbin/munged", "munged", "--foreground", "--force", ("--socket=" + dir_ + "/munge.sock").c_str(),
            ("--key-file=" + dir_ + "/munge.key").c_str(), ("--pid-file=" + dir_ + "/munged.pid").c_str(),
            ("--log-file=" + dir_ + "/munged.log").c_str(), ("--seed-file=" + dir_ + "/munged.seed").c_str(),
            nullptr);
      _exit(127);
    }
    if (!wait_until([&] { return std::filesystem::exists(dir_ + "/munge.sock"); }, std::chrono::seconds(10)))
      throw std::runtime_error("slurm cluster: munged did not start");

    slurmctld_ = fork();
    if (slurmctld_ == 0) {
      int log = open((dir_ + "/slurmctld.out").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(log, 1);
      dup2(log, 2);
      const std::string net = "--net=/run/netns/" + cluster_.head_namespace();
      execlp("nsenter", "nsenter", net.c_str(), "/usr/sbin/slurmctld", "-D", "-i", "-f",
             (dir_ + "/slurm.conf").c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < hosts; ++i) {
      std::string slurmd = fmt::format("/usr/sbin/slurmd -D -f {}/slurm.conf -N {}", dir_, cluster_.host(i));
      // The host's own mount namespace: the tmpfs hides the directory from this host alone.
      if (!hidden_from_nodes.empty() && i > 0)
        slurmd = fmt::format("sh -c 'mount -t tmpfs muster-hidden {} && exec {}'", hidden_from_nodes, slurmd);
      slurmd_.push_back(cluster_.start_on_host(i, slurmd, fmt::format("{}/slurmd-{}.out", dir_, cluster_.host(i))));
    }
    wait_until_idle();
  } catch (...) {
    stop();
    throw;
  }
}

SlurmCluster::~SlurmCluster() { stop(); }

void SlurmCluster::stop() {
  for (pid_t& pid : slurmd_) stop_pid(std::exchange(pid, -1));
  stop_pid(std::exchange(slurmctld_, -1));
  stop_pid(std::exchange(munged_, -1));
}

void SlurmCluster::write_config() const {
  std::ofstream out(dir_ + "/slurm.conf");
  out << "ClusterName=mustertest\n"
      << "SlurmctldHost=" << this_hostname() << "(" << cluster_.address(0).substr(0, cluster_.address(0).rfind('.'))
      << ".254)\n"
      << "SlurmUser=root\nSlurmdUser=root\n"
      << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << dir_ << "/munge.sock\n"
      << "StateSaveLocation=" << dir_ << "/state\n"
      << "SlurmdSpoolDir=" << dir_ << "/spool-%n\n"
      << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
      << "SlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
      << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\n"
      << "SlurmdLogFile=" << dir_ << "/slurmd-%n.log\n"
      // No cgroups: network namespaces hide the hierarchy, and muster must not lean on it.
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nMpiDefault=none\n"
      << "ReturnToService=2\nSlurmdTimeout=10\nKillWait=3\nMessageTimeout=5\n"
      // Eight GPUs a node, as gres: files stand in for /dev/nvidia0..7 (without cgroups Slurm
      // only names them), so that --gres=gpu:N sets CUDA_VISIBLE_DEVICES and SLURM_*_GPUS as on
      // a GPU cluster, for the fake GPUs to be shared by jobs.
      << "GresTypes=gpu\n"
      // Four CPUs a node where the test hosts share two: room for a GPU job's four tasks a node
      // beside another job's (slurmd takes the configured count, not the hardware's).
      << "SlurmdParameters=config_overrides\n";
  for (int i = 0; i < cluster_.size(); ++i)
    out << "NodeName=" << cluster_.host(i) << " NodeAddr=" << cluster_.address(i)
        << " CPUs=" << kCpusPerNode << " Gres=gpu:" << kGpusPerNode << " State=UNKNOWN\n";
  out << "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  std::ofstream gres(dir_ + "/gres.conf");
  gres << "Name=gpu File=" << dir_ << "/nvidia[0-" << kGpusPerNode - 1 << "]\n";
  // Character devices with the NVIDIA driver's numbers (major 195): Slurm takes only devices
  // for gres files. No driver answers them; nothing opens them.
  for (int g = 0; g < kGpusPerNode; ++g)
    if (mknod((dir_ + "/nvidia" + std::to_string(g)).c_str(), S_IFCHR | 0666, makedev(195, g)) != 0)
      throw std::runtime_error(fmt::format("slurm cluster: mknod {}/nvidia{}: {}", dir_, g, std::strerror(errno)));
}

std::vector<std::string> SlurmCluster::head_command(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", cluster_.head_namespace(), "env", conf_variable()};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

CommandResult SlurmCluster::run(const std::vector<std::string>& argv, int limit_s) const {
  return run_command(head_command(argv), {}, std::chrono::seconds(limit_s));
}

std::vector<std::string> SlurmCluster::salloc_muster(int nodes, const std::vector<std::string>& args,
                                                     const std::vector<std::string>& salloc_options) const {
  std::vector<std::string> argv = {"salloc", "-N" + std::to_string(nodes), "--quiet"};
  argv.insert(argv.end(), salloc_options.begin(), salloc_options.end());
  argv.insert(argv.end(), {"--", muster_binary()});
  argv.insert(argv.end(), args.begin(), args.end());
  return head_command(argv);
}

void SlurmCluster::wait_until_idle() const {
  auto idle = [&] {
    CommandResult r = run({"sinfo", "-h", "-o", "%t %D"}, 10);
    return r.exit_code == 0 && r.out.rfind("idle " + std::to_string(cluster_.size()), 0) == 0;
  };
  if (!wait_until(idle, std::chrono::seconds(30)))
    throw std::runtime_error("slurm cluster: the nodes did not become idle: " +
                             run({"sinfo"}, 10).out + run({"sinfo", "-R"}, 10).out);
}

void SlurmCluster::lose_host(int i) {
  stop_pid(std::exchange(slurmd_[size_t(i)], -1));
  // All of them frozen first, then killed: a node that vanishes says nothing more. Killed one
  // by one, a rank could die first and its agent report that death before its own, and the
  // head would rightly name the rank, not the node (seen once in a sanitizer run).
  const std::vector<pid_t> on_host = cluster_.processes_on(i);
  for (pid_t pid : on_host) kill(pid, SIGSTOP);
  for (pid_t pid : on_host) kill(pid, SIGKILL);
}

std::vector<pid_t> SlurmCluster::processes_on(int i, const std::string& word) const {
  std::vector<pid_t> out;
  for (pid_t pid : cluster_.processes_on(i)) {
    std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
    std::string first;
    std::getline(in, first, '\0');
    if (first == word || first.rfind(word + " ", 0) == 0 ||
        (first.size() > word.size() && first.compare(first.size() - word.size() - 1, std::string::npos, "/" + word) == 0))
      out.push_back(pid);
  }
  return out;
}

}  // namespace muster::testing

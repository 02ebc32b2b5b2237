#include "tests/support/build_paths.h"
#include "tests/support/test_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace muster::testing {
namespace {

CommandResult must(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv, {}, std::chrono::seconds(60));
  if (r.exit_code != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    throw std::runtime_error(fmt::format("test cluster: '{}' failed ({}): {}", cmd, r.exit_code, r.err));
  }
  return r;
}

std::vector<std::string> namespaces() {
  std::vector<std::string> out;
  std::istringstream in(run_command({"ip", "netns", "list"}).out);
  std::string line;
  while (std::getline(in, line)) out.push_back(line.substr(0, line.find(' ')));
  return out;
}

void kill_namespace(const std::string& ns) {
  std::istringstream pids(run_command({"ip", "netns", "pids", ns}).out);
  pid_t pid;
  while (pids >> pid) kill(pid, SIGKILL);
  run_command({"ip", "netns", "del", ns});
}

// Namespaces left by a test run that was killed before it could clean up ("mt<pid>-...").
void remove_leftovers() {
  auto abandoned = [](const std::string& name) {
    if (name.rfind("mt", 0) != 0) return false;
    pid_t owner = pid_t(std::atol(name.c_str() + 2));
    return owner > 0 && owner != getpid() && kill(owner, 0) != 0;
  };
  for (const auto& ns : namespaces())
    if (abandoned(ns)) kill_namespace(ns);
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/run/muster-test", ignored))
    if (abandoned(entry.path().filename().string())) std::filesystem::remove_all(entry.path(), ignored);
}

// Clusters alive in this process, so a SIGINT/SIGTERM still removes them.
std::mutex g_live_mutex;
std::set<TestCluster*> g_live;

void on_fatal_signal(int sig) {
  for (TestCluster* c : g_live) c->tear_down();
  signal(sig, SIG_DFL);
  raise(sig);
}

// The lane this test process's clusters belong to: MUSTER_TEST_CLUSTER_LANE, 0 unless ctest
// says otherwise (tests/CMakeLists.txt). One cluster at a time in a lane; lanes run side by side
// and share nothing but this machine's cores, each with its own lock, subnets and namespaces.
int cluster_lane() {
  static const int lane = [] {
    const char* chosen = std::getenv("MUSTER_TEST_CLUSTER_LANE");
    const int n = chosen ? std::atoi(chosen) : 0;
    return n >= 0 && n < 50 ? n : 0;
  }();
  return lane;
}

// One open file for the lane's lock: flock belongs to the open file, so locking and unlocking
// must use the same one.
int cluster_lock_fd() {
  static int fd = open(cluster_lane() == 0 ? "/tmp/muster-test-cluster.lock"
                                           : fmt::format("/tmp/muster-test-cluster-lane{}.lock", cluster_lane()).c_str(),
                       O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  return fd;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string TestCluster::unavailable_reason() {
  if (geteuid() != 0) return "the test cluster needs root (network namespaces); run as root";
  for (const char* tool : {"/usr/sbin/sshd", "/usr/sbin/ip", "/usr/bin/ssh-keygen", "/usr/bin/unshare"})
    if (access(tool, X_OK) != 0)
      return fmt::format("{} is missing (apt-get install openssh-server iproute2)", tool);
  return "";
}

TestCluster::TestCluster(int hosts) {
  // One cluster at a time in a lane: test processes run in parallel under ctest -j.
  flock(cluster_lock_fd(), LOCK_EX);
  remove_leftovers();
  prefix_ = fmt::format("mt{}-", getpid());
  // The lane picks the second octet, so clusters of two lanes never share a subnet; the pid
  // the third (and the second network, if any, the next one up).
  subnet_ = fmt::format("10.{}.{}", 200 + cluster_lane(), getpid() % 250);
  head_ns_ = prefix_ + "head";
  lan_ns_ = prefix_ + "lan";
  char pattern[] = "/tmp/muster-cluster-XXXXXX";
  dir_ = mkdtemp(pattern);
  hosts_.resize(size_t(hosts));
  {
    std::lock_guard lock(g_live_mutex);
    g_live.insert(this);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
  }
  try {
    make_network();
    make_keys();
    for (int i = 0; i < hosts; ++i) {
      write_sshd_config(i);
      start_sshd(i);
    }
  } catch (...) {
    tear_down();
    {
      std::lock_guard lock(g_live_mutex);
      g_live.erase(this);
    }
    flock(cluster_lock_fd(), LOCK_UN);
    throw;
  }
}

TestCluster::~TestCluster() {
  tear_down();
  std::lock_guard lock(g_live_mutex);
  g_live.erase(this);
  flock(cluster_lock_fd(), LOCK_UN);
}

void TestCluster::tear_down() {
  for (int i = 0; i < size(); ++i) stop_sshd(i);
  for (auto& h : hosts_)
    if (!h.ns.empty()) kill_namespace(h.ns);
  for (const auto& ns : {head_ns_, lan_ns_})
    if (!ns.empty()) kill_namespace(ns);
  std::error_code ignored;
  for (int i = 0; i < int(hosts_.size()); ++i)
    if (hosts_[size_t(i)].setup.busybox_root) std::filesystem::remove_all(chroot_dir(i), ignored);
  hosts_.clear();
  head_ns_.clear();
  lan_ns_.clear();
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  dir_.clear();
}

std::string TestCluster::host(int i) const { return fmt::format("node{}", i + 1); }
std::string TestCluster::address(int i) const { return fmt::format("{}.{}", subnet_, i + 1); }

namespace {

// The kernel keeps one ARP table for every network namespace on the machine, and its limit,
// net.ipv4.neigh.default.gc_thresh3 (1024 by default), counts the entries of all of them. A
// host that talks to every other host holds one entry per peer, so 32 hosts need about 1000
// and 64 about 4000: past the limit the kernel logs "neighbor table overflow", and a new
// peer is "No route to host" or a SYN that never leaves. Real nodes each have a table of
// their own, so the test cluster makes room for what its hosts would each hold, only ever
// raising the limits (other clusters may be running).
void make_room_in_the_neighbour_table(int hosts) {
  const long wanted = 1024 + 2L * (hosts + 1) * (hosts + 1);
  for (const char* name : {"gc_thresh2", "gc_thresh3"}) {
    const std::string path = fmt::format("/proc/sys/net/ipv4/neigh/default/{}", name);
    long now = 0;
    std::ifstream(path) >> now;
    if (now >= wanted) continue;
    std::ofstream out(path);
    out << wanted << "\n";
    if (!out.flush()) throw std::runtime_error(fmt::format("cannot raise {} to {}", path, wanted));
  }
}

}  // namespace

void TestCluster::make_network() {
  // A bridge in a namespace of its own is the LAN; the head and each host plug into it
  // with a veth pair. Nothing else touches this machine's own network namespace.
  make_room_in_the_neighbour_table(size());
  must({"ip", "netns", "add", lan_ns_});
  must({"ip", "-n", lan_ns_, "link", "add", "br0", "type", "bridge"});
  must({"ip", "-n", lan_ns_, "link", "set", "br0", "up"});
  auto plug = [&](const std::string& ns, const std::string& ip, int index) {
    must({"ip", "netns", "add", ns});
    std::string outside = fmt::format("p{}", index), inside = "eth0";
    must({"ip", "-n", lan_ns_, "link", "add", outside, "type", "veth", "peer", "name", inside,
          "netns", ns});
    must({"ip", "-n", lan_ns_, "link", "set", outside, "master", "br0", "up"});
    must({"ip", "-n", ns, "addr", "add", ip + "/24", "dev", inside});
    must({"ip", "-n", ns, "link", "set", inside, "up"});
    must({"ip", "-n", ns, "link", "set", "lo", "up"});
  };
  plug(head_ns_, subnet_ + ".254", 0);
  for (int i = 0; i < size(); ++i) {
    hosts_[size_t(i)].ns = prefix_ + host(i);
    plug(hosts_[size_t(i)].ns, address(i), i + 1);
  }
}

void TestCluster::make_keys() {
  must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "muster-test", "-f", dir_ + "/id_ed25519"});
  std::filesystem::copy_file(dir_ + "/id_ed25519.pub", dir_ + "/authorized_keys");
  for (int i = 0; i < size(); ++i)
    must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host(i), "-f",
          fmt::format("{}/host_key{}", dir_, i)});
  trust_host_keys();
  for (int i = 0; i < size(); ++i) {
    std::ofstream(fmt::format("{}/machine-id{}", dir_, i)) << fmt::format("{:032x}\n", 0xabc000 + i);
    std::ofstream(fmt::format("{}/boot-id{}", dir_, i))
        << fmt::format("00000000-0000-4000-8000-{:012x}\n", 0xb007 + i);
  }
  std::filesystem::create_directories("/run/sshd");  // sshd's privilege separation directory
}

void TestCluster::trust_host_keys(int except) const {
  std::ofstream known(known_hosts());
  for (int i = 0; i < size(); ++i) {
    if (i == except) continue;
    std::istringstream pub(read_file(fmt::format("{}/host_key{}.pub", dir_, i)));
    std::string type, blob;
    pub >> type >> blob;
    known << address(i) << " " << type << " " << blob << "\n";
  }
}

void TestCluster::write_sshd_config(int i) const {
  const HostSetup& setup = hosts_[size_t(i)].setup;
  std::ofstream out(fmt::format("{}/sshd_config{}", dir_, i));
  out << "ListenAddress 0.0.0.0\n"
      << "Port 22\n"
      << "HostKey " << dir_ << "/host_key" << i << "\n"
      << "PidFile " << dir_ << "/sshd" << i << ".pid\n"
      << "AuthorizedKeysFile " << dir_ << "/authorized_keys\n"
      << "PermitRootLogin prohibit-password\n"
      << "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
      << "StrictModes no\n"
      << "LogLevel INFO\n";  // one "Accepted publickey" line per connection
  if (setup.sftp) out << "Subsystem sftp internal-sftp\n";
  if (setup.busybox_root) out << "ChrootDirectory " << chroot_dir(i) << "\n";
  if (!setup.force_command.empty()) out << "ForceCommand " << setup.force_command << "\n";
  if (!setup.environment.empty()) {
    out << "SetEnv";
    for (const auto& variable : setup.environment) out << " \"" << variable << "\"";
    out << "\n";
  }
}

// sshd insists that every directory on the way to a chroot is root's and writable by no one
// else, which rules out /tmp.
std::string TestCluster::chroot_dir(int i) const {
  return fmt::format("/run/muster-test/{}{}", prefix_, host(i));
}

void TestCluster::make_busybox_root(int i) const {
  namespace fs = std::filesystem;
  const std::string root = chroot_dir(i);
  fs::remove_all(root);
  for (const char* d : {"bin", "dev", "proc", "sys", "tmp", "root", "etc"}) fs::create_directories(root + "/" + d);
  fs::permissions("/run/muster-test", fs::perms(0755));
  fs::permissions(root + "/tmp", fs::perms(01777));
  fs::copy_file("/bin/busybox", root + "/bin/busybox");
  std::istringstream applets(must({"/bin/busybox", "--list"}).out);
  for (std::string applet; applets >> applet;)
    if (applet != "busybox") fs::create_symlink("busybox", root + "/bin/" + applet);
  for (const char* f : {"dev/null", "dev/urandom", "etc/machine-id"}) std::ofstream(root + "/" + f);
  std::ofstream(root + "/etc/hosts") << "127.0.0.1 localhost\n";
}

// Commands run in host i's own mount namespace before its sshd starts.
std::string TestCluster::setup_script(int i) const {
  const HostSetup& setup = hosts_[size_t(i)].setup;
  std::string script;
  for (const auto& lib : setup.hidden_libraries)
    script += fmt::format(": > {0}/empty && mount --bind {0}/empty /lib/x86_64-linux-gnu/{1} && ", dir_, lib);
  if (setup.own_cache)
    script += fmt::format("mkdir -p {0}/cache{1} /root/.cache && mount --bind {0}/cache{1} /root/.cache && ",
                          dir_, i);
  if (setup.installed_muster)
    script += fmt::format("mkdir -p {0}/bin{1} && cp {2} {0}/bin{1}/muster && mount --bind {0}/bin{1} "
                          "/usr/local/bin && ", dir_, i, muster_binary());
  if (setup.busybox_root) {
    // The chroot's own /proc shows the machine's real boot id: each host keeps its own.
    const std::string r = chroot_dir(i);
    script += fmt::format(
        "mount -t proc proc {0}/proc && mount --bind /sys {0}/sys && mount --bind /dev/null {0}/dev/null && "
        "mount --bind /dev/urandom {0}/dev/urandom && mount --bind {1}/machine-id{2} {0}/etc/machine-id && "
        "mount --bind {1}/boot-id{2} {0}/proc/sys/kernel/random/boot_id && "
        "sed 's#^root:\\(.*\\):[^:]*$#root:\\1:/bin/sh#' /etc/passwd > {1}/passwd{2} && "
        "mount --bind {1}/passwd{2} /etc/passwd && ", r, dir_, i);
  }
  return script;
}

void TestCluster::set_up_host(int i, const HostSetup& setup) {
  stop_sshd(i);
  hosts_[size_t(i)].setup = setup;
  if (setup.busybox_root) make_busybox_root(i);
  write_sshd_config(i);
  start_sshd(i);
}

std::string TestCluster::muster_cache(int i) const {
  const HostSetup& setup = hosts_[size_t(i)].setup;
  if (setup.busybox_root) return chroot_dir(i) + "/root/.cache/muster";
  if (setup.own_cache) return fmt::format("{}/cache{}/muster", dir_, i);
  return "/root/.cache/muster";
}

void TestCluster::start_sshd(int i) {
  // sshd's setup (hidden libraries, caches, a chroot) runs in the host's own mount namespace,
  // and `ip netns exec` gives it the host's own /sys, as a real node's.
  Host& h = hosts_[size_t(i)];
  h.sshd = spawn_on_host(i, setup_script(i) + fmt::format("exec /usr/sbin/sshd -D -e -f {}/sshd_config{}", dir_, i),
                         fmt::format("{}/sshd{}.log", dir_, i), SysView::Host);
  wait_for_sshd(i);
}

pid_t TestCluster::start_on_host(int i, const std::string& command, const std::string& log_path) const {
  return spawn_on_host(i, "exec " + command, log_path, SysView::Machine);
}

pid_t TestCluster::spawn_on_host(int i, const std::string& script_tail, const std::string& log_path,
                                 SysView sys) const {
  const Host& h = hosts_[size_t(i)];
  // UTS and mount namespaces of its own: everything the host starts sees the host's own
  // hostname, /etc/machine-id and boot id, as on separate machines. Its root has Debian's
  // own ~/.bashrc, as a fresh node has, not this machine's: a developer's shell set-up
  // (pyenv's rehash takes a lock in the shared /root, and a killed one leaves it behind for
  // a minute) would otherwise stall every SSH command of every test host.
  const std::string script = fmt::format(
      "mount --bind {0}/machine-id{1} /etc/machine-id && "
      "mount --bind {0}/boot-id{1} /proc/sys/kernel/random/boot_id && "
      "{{ [ ! -e /root/.bashrc ] || mount --bind /etc/skel/.bashrc /root/.bashrc; }} && "
      "hostname {2} && {3}", dir_, i, host(i), script_tail);
  const std::string net = "--net=/run/netns/" + h.ns;
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    if (sys == SysView::Host)
      execlp("ip", "ip", "netns", "exec", h.ns.c_str(), "unshare", "--uts", "--mount", "sh", "-c",
             script.c_str(), nullptr);
    else
      execlp("nsenter", "nsenter", net.c_str(), "unshare", "--uts", "--mount", "sh", "-c", script.c_str(),
             nullptr);
    _exit(127);
  }
  return pid;
}

void TestCluster::wait_for_sshd(int i) const {
  auto probe = [&] {
    return run_command({"ip", "netns", "exec", head_ns_, "bash", "-c",
                        fmt::format("exec 3<>/dev/tcp/{}/22", address(i))},
                       {}, std::chrono::seconds(5)).exit_code == 0;
  };
  if (!wait_until(probe, std::chrono::milliseconds(15000)))
    throw std::runtime_error(fmt::format("test cluster: sshd on {} did not start", host(i)));
}

void TestCluster::stop_sshd(int i) {
  Host& h = hosts_[size_t(i)];
  if (h.sshd <= 0) return;
  kill(h.sshd, SIGTERM);
  int status = 0;
  for (int tries = 0; tries < 100 && waitpid(h.sshd, &status, WNOHANG) == 0; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(h.sshd, SIGKILL);
  waitpid(h.sshd, &status, 0);
  h.sshd = -1;
}

void TestCluster::cap_host(int i, const std::string& rate) {
  const std::vector<std::string> tbf = {"root", "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms"};
  std::vector<std::string> sending = {"ip", "netns", "exec", hosts_[size_t(i)].ns, "tc", "qdisc", "add", "dev", "eth0"};
  std::vector<std::string> receiving = {"ip", "netns", "exec", lan_ns_, "tc", "qdisc", "add", "dev", fmt::format("p{}", i + 1)};
  sending.insert(sending.end(), tbf.begin(), tbf.end());
  receiving.insert(receiving.end(), tbf.begin(), tbf.end());
  must(sending);
  must(receiving);
}

void TestCluster::cap_link(int a, int b, const std::string& rate) {
  for (auto [from, to] : {std::pair(a, b), std::pair(b, a)}) {
    const std::vector<std::string> tc = {"ip", "netns", "exec", hosts_[size_t(from)].ns, "tc"};
    auto with = [&](std::vector<std::string> tail) {
      tail.insert(tail.begin(), tc.begin(), tc.end());
      return tail;
    };
    must(with({"qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"}));
    must(with({"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", "100gbit"}));
    must(with({"class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate}));
    must(with({"filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
               "ip", "dst", address(to) + "/32", "flowid", "1:20"}));
  }
}

void TestCluster::add_second_network() {
  if (!second_subnet_.empty()) return;
  auto parts = subnet_.substr(subnet_.rfind('.') + 1);
  second_subnet_ = subnet_.substr(0, subnet_.rfind('.') + 1) + std::to_string((std::stoi(parts) + 1) % 250);
  must({"ip", "-n", lan_ns_, "link", "add", "br1", "type", "bridge"});
  must({"ip", "-n", lan_ns_, "link", "set", "br1", "up"});
  for (int i = 0; i < size(); ++i) {
    const std::string& ns = hosts_[size_t(i)].ns;
    std::string outside = fmt::format("q{}", i + 1);
    must({"ip", "-n", lan_ns_, "link", "add", outside, "type", "veth", "peer", "name", "eth1",
          "netns", ns});
    must({"ip", "-n", lan_ns_, "link", "set", outside, "master", "br1", "up"});
    must({"ip", "-n", ns, "addr", "add", second_address(i) + "/24", "dev", "eth1"});
    must({"ip", "-n", ns, "link", "set", "eth1", "up"});
  }
}

int TestCluster::accepted_connections(int i) const {
  std::istringstream log(read_file(fmt::format("{}/sshd{}.log", dir_, i)));
  int count = 0;
  for (std::string line; std::getline(log, line);) count += line.find("Accepted publickey") != std::string::npos;
  return count;
}

std::string TestCluster::second_address(int i) const {
  return fmt::format("{}.{}", second_subnet_, i + 1);
}

void TestCluster::freeze_sshd(int i, bool frozen) {
  // `ip netns exec` has exec'd into unshare, which has exec'd into sshd: one pid.
  kill(hosts_[size_t(i)].sshd, frozen ? SIGSTOP : SIGCONT);
}

void TestCluster::change_host_key(int i) {
  stop_sshd(i);
  std::string key = fmt::format("{}/host_key{}", dir_, i);
  std::filesystem::remove(key);
  std::filesystem::remove(key + ".pub");
  must({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host(i), "-f", key});
  start_sshd(i);
}

std::string TestCluster::write_cluster_file(const std::string& extra,
                                            const std::string& host_keys) const {
  std::string path = dir_ + "/cluster.yaml";
  std::ofstream out(path);
  out << "name: test-cluster\n"
      << "ssh:\n  user: root\n  identity: " << dir_ << "/id_ed25519\n"
      << "  known_hosts: " << known_hosts() << "\n  host_keys: " << host_keys << "\n"
      << "  connect_timeout: 5\n"
      << "nodes:\n";
  for (int i = 0; i < size(); ++i)
    out << "  - host: " << host(i) << "\n    address: " << address(i) << "\n";
  out << extra;
  return path;
}

std::vector<std::string> TestCluster::muster_argv(const std::vector<std::string>& args) const {
  // The head keeps its jobs' control sockets in the cluster's own directory (mode 0700, as
  // XDG_RUNTIME_DIR is): 'muster stacks' finds this cluster's job alone, though other tests'
  // jobs run beside it under ctest -j.
  std::vector<std::string> argv = {"ip", "netns", "exec", head_ns_, "env", "XDG_RUNTIME_DIR=" + dir_, muster_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

CommandResult TestCluster::muster(const std::vector<std::string>& args, int limit_s) const {
  return run_command(muster_argv(args), {}, std::chrono::seconds(limit_s));
}

std::vector<std::string> TestCluster::head_argv(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", head_ns_};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

std::vector<pid_t> TestCluster::processes_on(int i) const {
  std::istringstream in(run_command({"ip", "netns", "pids", hosts_[size_t(i)].ns}).out);
  std::vector<pid_t> pids;
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

std::vector<std::string> TestCluster::host_argv(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", hosts_[size_t(i)].ns};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

CommandResult TestCluster::on_host(int i, const std::vector<std::string>& argv) const {
  return run_command(host_argv(i, argv));
}

}  // namespace muster::testing

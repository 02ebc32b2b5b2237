#include "launcher/cluster/cluster_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "launcher/error.h"
#include "launcher/cluster/hostlist.h"

namespace muster {
namespace {

// Walks one YAML document, adding every problem to `diag` instead of stopping at the
// first, so that a user fixes a file in one round.
class ClusterFileReader {
 public:
  ClusterFileReader(std::string source, Diagnostics& diag, ClusterUse use)
      : source_(std::move(source)), diag_(diag), use_(use) {}

  ClusterSpec read(const YAML::Node& root) {
    ClusterSpec spec;
    spec.source = source_;
    if (!root.IsDefined() || root.IsNull()) {
      diag_.add(at(root), "the file is empty; it needs at least a 'nodes:' list");
      return spec;
    }
    if (!root.IsMap()) {
      diag_.add(at(root), "a cluster file is a mapping with keys such as 'name', 'ssh', "
                          "'launch', 'checks', 'expect' and 'nodes'");
      return spec;
    }
    std::optional<YAML::Node> nodes;
    for_each_key(root, "cluster file", {"name", "launcher", "ssh", "launch", "checks", "expect", "nodes"},
                 [&](const std::string& key, const YAML::Node& value) {
                   if (key == "name") read_string(value, "name", spec.name);
                   if (key == "launcher") read_launcher(value, spec);
                   if (key == "ssh") spec.ssh = read_ssh(value, "ssh");
                   if (key == "launch") spec.launch = read_launch(value);
                   if (key == "checks") spec.checks = read_checks(value);
                   if (key == "expect") spec.expect = read_expect(value);
                   if (key == "nodes") nodes = value;
                 });
    // Only the stress tests' bars travel with what a node is expected to be; whether they run
    // is doctor's and health's to decide (checks.stress), never every health request's: the
    // restart path's quick check would hold every node's GPUs for seconds.
    if (spec.checks.stress_peer_ratio) spec.expect.stress.peer_ratio = *spec.checks.stress_peer_ratio;
    if (spec.checks.stress_hardware_ratio) spec.expect.stress.hardware_ratio = *spec.checks.stress_hardware_ratio;
    if (!nodes) {
      diag_.add(at(root), "missing 'nodes:', the list of machines; add e.g. "
                          "'nodes: [{host: \"gpu[01-04]\"}]'");
    } else {
      read_nodes(*nodes, spec);
    }
    return spec;
  }

 private:
  SourceLocation at(const YAML::Node& node) const {
    YAML::Mark mark = node.Mark();
    if (mark.is_null()) return {source_, 1, 1};
    return {source_, mark.line + 1, mark.column + 1};
  }

  // `launcher: ssh` or `launcher: slurm` (srun inside an allocation that holds the nodes).
  void read_launcher(const YAML::Node& value, ClusterSpec& spec) {
    std::string text;
    read_string(value, "launcher", text);
    if (text == "ssh" || text == "slurm")
      spec.launcher = text == "slurm" ? Launcher::Slurm : Launcher::Ssh;
    else if (!text.empty())
      diag_.add(at(value), fmt::format("launcher: '{}' is not a launcher; use 'ssh' or 'slurm'", text));
  }

  template <typename Fn>
  void for_each_key(const YAML::Node& map, const std::string& what,
                    const std::vector<std::string>& allowed, Fn&& handle) {
    std::set<std::string> seen;
    for (const auto& item : map) {
      const YAML::Node& key_node = item.first;
      if (!key_node.IsScalar()) {
        diag_.add(at(key_node), fmt::format("keys of {} must be plain words", what));
        continue;
      }
      const std::string key = key_node.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string msg = fmt::format("unknown key '{}' in {}", key, what);
        if (auto guess = closest_match(key, allowed))
          msg += fmt::format(", did you mean '{}'?", *guess);
        else
          msg += fmt::format("; known keys are {}", fmt::join(allowed, ", "));
        diag_.add(at(key_node), msg);
        continue;
      }
      if (!seen.insert(key).second) {
        diag_.add(at(key_node), fmt::format("key '{}' appears twice in {}", key, what));
        continue;
      }
      handle(key, item.second);
    }
  }

  bool expect_map(const YAML::Node& node, const std::string& what) {
    if (node.IsMap()) return true;
    diag_.add(at(node), fmt::format("'{}' must be a mapping of keys to values", what));
    return false;
  }

  bool read_string(const YAML::Node& node, const std::string& what, std::string& out) {
    if (!node.IsScalar() || node.Scalar().empty()) {
      diag_.add(at(node), fmt::format("'{}' must be a non-empty text value", what));
      return false;
    }
    out = node.Scalar();
    return true;
  }

  template <typename T>
  void read_optional_string(const YAML::Node& node, const std::string& what,
                            std::optional<T>& out) {
    std::string value;
    if (read_string(node, what, value)) out = value;
  }

  std::optional<bool> read_bool(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar() && (node.Scalar() == "true" || node.Scalar() == "false")) return node.Scalar() == "true";
    diag_.add(at(node), fmt::format("{} must be true or false, not {}", what, describe(node)));
    return std::nullopt;
  }

  std::optional<long> read_int(const YAML::Node& node, const std::string& what, long min,
                               long max) {
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      static const std::regex integer("[+-]?[0-9]{1,12}");
      if (std::regex_match(text, integer)) {
        long value = std::stol(text);
        if (value >= min && value <= max) return value;
        diag_.add(at(node), fmt::format("{} must be between {} and {}, not {}", what, min,
                                        max, text));
        return std::nullopt;
      }
    }
    diag_.add(at(node), fmt::format("{} must be a whole number, not {}", what, describe(node)));
    return std::nullopt;
  }

  std::optional<double> read_number(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar()) {
      static const std::regex number("[+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?");
      if (std::regex_match(node.Scalar(), number)) {
        // strtod saturates to infinity where stod would throw: 1e999 is reported, not fatal.
        const double value = std::strtod(node.Scalar().c_str(), nullptr);
        if (std::isfinite(value) && value <= 1e12) return value;
        diag_.add(at(node), fmt::format("{} must be a number below 1e12, not {}", what, describe(node)));
        return std::nullopt;
      }
    }
    diag_.add(at(node), fmt::format("{} must be a number of zero or more, not {}", what,
                                    describe(node)));
    return std::nullopt;
  }

  static std::string describe(const YAML::Node& node) {
    if (node.IsScalar()) return fmt::format("'{}'", node.Scalar());
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "a mapping";
    return "nothing";
  }

  SlotCount read_slots(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar() && node.Scalar() == "auto") return {};
    if (node.IsScalar()) {
      static const std::regex integer("[+-]?[0-9]{1,9}");
      if (std::regex_match(node.Scalar(), integer) && std::stol(node.Scalar()) >= 1) {
        if (std::stol(node.Scalar()) <= kMaxSlotsPerNode) return {int(std::stol(node.Scalar()))};
        diag_.add(at(node), fmt::format("{} must be at most {} (muster's limit per node), not {}",
                                        what, kMaxSlotsPerNode, describe(node)));
        return {};
      }
    }
    diag_.add(at(node), fmt::format("{} must be 'auto' or a whole number of at least 1, "
                                    "not {}", what, describe(node)));
    return {};
  }

  SshOptions read_ssh(const YAML::Node& node, const std::string& what) {
    SshOptions ssh;
    if (!expect_map(node, what)) return ssh;
    for_each_key(node, "'" + what + "'",
                 {"user", "port", "identity", "known_hosts", "host_keys", "connect_timeout"},
                 [&](const std::string& key, const YAML::Node& value) {
                   if (key == "user") read_optional_string(value, what + ".user", ssh.user);
                   if (key == "port")
                     if (auto p = read_int(value, what + ".port", 1, 65535)) ssh.port = int(*p);
                   if (key == "identity")
                     read_optional_string(value, what + ".identity", ssh.identity);
                   if (key == "known_hosts")
                     read_optional_string(value, what + ".known_hosts", ssh.known_hosts);
                   if (key == "host_keys") {
                     if (value.IsScalar() && value.Scalar() == "strict")
                       ssh.host_keys = HostKeyPolicy::Strict;
                     else if (value.IsScalar() && value.Scalar() == "accept-new")
                       ssh.host_keys = HostKeyPolicy::AcceptNew;
                     else
                       diag_.add(at(value), fmt::format("{}.host_keys must be 'strict' or "
                                                        "'accept-new', not {}; host key "
                                                        "checking cannot be turned off",
                                                        what, describe(value)));
                   }
                   if (key == "connect_timeout")
                     ssh.connect_timeout_s = read_number(value, what + ".connect_timeout");
                 });
    return ssh;
  }

  LaunchOptions read_launch(const YAML::Node& node) {
    LaunchOptions launch;
    if (!expect_map(node, "launch")) return launch;
    // chdir is srun's word (--chdir) and the flag's; workdir, its older name, still reads so
    // that cluster files written for it keep working.
    std::optional<YAML::Node> chdir_node, workdir_node;
    for_each_key(node, "'launch'", {"slots", "env", "chdir", "mpi", "workdir", "restarts"},
                 [&](const std::string& key, const YAML::Node& value) {
                   if (key == "slots") launch.slots = read_slots(value, "launch.slots");
                   if (key == "restarts")
                     if (auto n = read_int(value, "launch.restarts", 0, kMaxRestarts)) launch.restarts = int(*n);
                   if (key == "mpi") launch.mpi = read_mpi(value);
                   if (key == "chdir") {
                     chdir_node = value;
                     read_optional_string(value, "launch.chdir", launch.chdir);
                   }
                   if (key == "workdir") {
                     workdir_node = value;
                     read_optional_string(value, "launch.workdir", launch.chdir);
                   }
                   if (key == "env") read_env(value, launch.env);
                 });
    if (chdir_node && workdir_node)
      diag_.add(at(*workdir_node), "launch.workdir is launch.chdir's older name, and both are given; "
                                   "keep launch.chdir");
    return launch;
  }

  std::optional<std::string> read_mpi(const YAML::Node& value) {
    std::optional<std::string> mpi;
    read_optional_string(value, "launch.mpi", mpi);
    if (mpi && *mpi != "auto" && *mpi != "pmix" && *mpi != "pmi1" && *mpi != "none") {
      diag_.add(at(value), fmt::format("launch.mpi is '{}'; write auto, pmix, pmi1 or none (as --mpi)", *mpi));
      return std::nullopt;
    }
    return mpi;
  }

  void read_env(const YAML::Node& node, std::map<std::string, std::string>& env) {
    if (!expect_map(node, "launch.env")) return;
    static const std::regex name("[A-Za-z_][A-Za-z0-9_]*");
    for (const auto& item : node) {
      const std::string key = item.first.IsScalar() ? item.first.Scalar() : "";
      if (!std::regex_match(key, name)) {
        diag_.add(at(item.first), fmt::format("'{}' is not a valid environment variable "
                                              "name (letters, digits and '_', not "
                                              "starting with a digit)", key));
        continue;
      }
      if (!item.second.IsScalar()) {
        diag_.add(at(item.second), fmt::format("launch.env.{} must be a text value, not {}",
                                               key, describe(item.second)));
        continue;
      }
      if (env.count(key)) {
        diag_.add(at(item.first), fmt::format("launch.env.{} appears twice", key));
        continue;
      }
      env[key] = item.second.Scalar();
    }
  }

  CheckThresholds read_checks(const YAML::Node& node) {
    CheckThresholds checks;
    if (!expect_map(node, "checks")) return checks;
    for_each_key(node, "'checks'",
                 {"gpus_per_node", "gpu_model", "max_rtt_ms", "max_clock_skew_ms",
                  "min_bandwidth_gbps", "min_bandwidth_ratio", "min_busbw_gbps", "stress", "stress_peer_ratio",
                  "stress_hardware_ratio"},
                 [&](const std::string& key, const YAML::Node& value) {
                   const std::string what = "checks." + key;
                   if (key == "gpus_per_node") {
                     if (auto n = read_int(value, what, 0, 1024)) checks.gpus_per_node = int(*n);
                   } else if (key == "gpu_model") {
                     read_optional_string(value, what, checks.gpu_model);
                   } else if (key == "stress") {
                     checks.stress = read_bool(value, what);
                   } else if (key == "stress_peer_ratio" || key == "stress_hardware_ratio") {
                     auto v = read_number(value, what);
                     if (v && (*v <= 0 || *v > 1))
                       diag_.add(at(value), fmt::format("{} must be above 0 and at most 1 (a fraction of {}), not {}",
                                                        what,
                                                        key == "stress_peer_ratio" ? "the GPU's peers' median"
                                                                                   : "what its link implies",
                                                        *v));
                     else if (key == "stress_peer_ratio")
                       checks.stress_peer_ratio = v;
                     else
                       checks.stress_hardware_ratio = v;
                   } else {
                     auto v = read_number(value, what);
                     if (key == "max_rtt_ms") checks.max_rtt_ms = v;
                     if (key == "max_clock_skew_ms") checks.max_clock_skew_ms = v;
                     if (key == "min_bandwidth_gbps") checks.min_bandwidth_gbps = v;
                     if (key == "min_busbw_gbps") checks.min_busbw_gbps = v;
                     if (key == "min_bandwidth_ratio" && v && (*v <= 0 || *v > 1))
                       diag_.add(at(value), fmt::format("checks.min_bandwidth_ratio must be above 0 and at most 1 "
                                                        "(a fraction of the cluster median), not {}", *v));
                     else if (key == "min_bandwidth_ratio")
                       checks.min_bandwidth_ratio = v;
                   }
                 });
    return checks;
  }

  // What the health checks expect of every node; unset keys default to each device's
  // maximum and the majority of the cluster.
  HealthExpectations read_expect(const YAML::Node& node) {
    HealthExpectations expect;
    if (!expect_map(node, "expect")) return expect;
    for_each_key(node, "'expect'",
                 {"gpus_per_node", "gpu_model", "pcie_gen", "pcie_width", "ib_rate_gbps", "ib_ports",
                  "driver_version"},
                 [&](const std::string& key, const YAML::Node& value) {
                   const std::string what = "expect." + key;
                   auto whole = [&](long low, long high) -> std::optional<int> {
                     if (auto n = read_int(value, what, low, high)) return int(*n);
                     return std::nullopt;
                   };
                   if (key == "gpus_per_node") expect.gpus_per_node = whole(0, 1024);
                   if (key == "pcie_gen") expect.pcie_gen = whole(1, 6);
                   if (key == "pcie_width") expect.pcie_width = whole(1, 32);
                   if (key == "ib_ports") expect.ib_ports = whole(0, 1024);
                   if (key == "ib_rate_gbps") expect.ib_rate_gbps = read_number(value, what);
                   if (key == "gpu_model") read_optional_string(value, what, expect.gpu_model);
                   if (key == "driver_version") read_optional_string(value, what, expect.driver_version);
                 });
    return expect;
  }

  // Host names count against the file's one budget; addresses name the same machines.
  std::vector<std::string> read_hostlist(const YAML::Node& node, const std::string& what,
                                         HostBudget* budget) {
    std::string text;
    if (!read_string(node, what, text)) return {};
    try {
      return expand_hostlist(text, budget);
    } catch (const Error& e) {
      diag_.add(at(node), e.what());
      return {};
    }
  }

  void read_nodes(const YAML::Node& nodes, ClusterSpec& spec) {
    if (!nodes.IsSequence() || nodes.size() == 0) {
      diag_.add(at(nodes), "'nodes' must be a non-empty list of entries such as "
                           "'- host: gpu[01-04]'");
      return;
    }
    std::map<std::string, SourceLocation> first_seen;
    for (const auto& entry : nodes) {
      std::optional<YAML::Node> host_node, address_node;
      SlotCount slots = spec.launch.slots;
      SshOptions ssh;
      bool spare = false;
      if (entry.IsScalar()) {  // "- gpu01" is shorthand for "- host: gpu01"
        host_node = YAML::Node(entry);
      } else if (entry.IsMap()) {
        for_each_key(entry, "a node entry", {"host", "address", "slots", "ssh", "spare"},
                     [&](const std::string& key, const YAML::Node& value) {
                       if (key == "spare") {
                         if (auto b = read_bool(value, "spare")) spare = *b;
                       }
                       if (key == "host") host_node = value;
                       if (key == "address") address_node = value;
                       if (key == "slots") slots = read_slots(value, "slots");
                       if (key == "ssh") ssh = read_ssh(value, "ssh");
                     });
        if (!host_node) {
          diag_.add(at(entry), "node entry has no 'host'; add e.g. 'host: gpu01'");
          continue;
        }
      } else {
        diag_.add(at(entry), "a node entry must be a host name or a mapping with 'host:'");
        continue;
      }
      std::vector<std::string> hosts = read_hostlist(*host_node, "host", &hosts_named_);
      std::vector<std::string> addresses = hosts;
      if (address_node) {
        HostBudget addresses_budget;
        addresses = read_hostlist(*address_node, "address", &addresses_budget);
        if (!addresses.empty() && addresses.size() != hosts.size()) {
          diag_.add(at(*address_node),
                    fmt::format("'address' names {} addresses for {} hosts; give one address "
                                "per host, e.g. 'address: 10.0.0.[1-{}]'",
                                addresses.size(), hosts.size(), hosts.size()));
          continue;
        }
      }
      for (size_t i = 0; i < hosts.size() && i < addresses.size(); ++i) {
        SourceLocation where = at(*host_node);
        auto [it, inserted] = first_seen.emplace(hosts[i], where);
        if (!inserted) {
          diag_.add(where, fmt::format("host '{}' is listed twice (first at {}); a machine "
                                       "listed twice would {}",
                                       hosts[i], it->second.str(), listed_twice_would(use_)));
          continue;
        }
        spec.nodes.push_back(
            NodeSpec{hosts[i], addresses[i], slots, std::nullopt, ssh.merged_over(spec.ssh),
                     where, spare});
      }
    }
  }

  std::string source_;
  Diagnostics& diag_;
  ClusterUse use_;
  HostBudget hosts_named_;  // across every node entry of the file
};

}  // namespace

SshOptions SshOptions::merged_over(const SshOptions& defaults) const {
  SshOptions out = *this;
  if (!out.user) out.user = defaults.user;
  if (!out.port) out.port = defaults.port;
  if (!out.identity) out.identity = defaults.identity;
  if (!out.known_hosts) out.known_hosts = defaults.known_hosts;
  if (!out.host_keys) out.host_keys = defaults.host_keys;
  if (!out.connect_timeout_s) out.connect_timeout_s = defaults.connect_timeout_s;
  return out;
}

ClusterSpec parse_cluster_yaml(std::string_view text, const std::string& source, ClusterUse use) {
  Diagnostics diag;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    diag.add({source, e.mark.line + 1, e.mark.column + 1},
             fmt::format("not valid YAML: {}", e.msg));
    diag.throw_if_any();
  }
  ClusterSpec spec = ClusterFileReader(source, diag, use).read(root);
  diag.throw_if_any();
  return spec;
}

ClusterSpec load_cluster_file(const std::string& path, ClusterUse use) {
  return parse_cluster_yaml(read_input_file(path, "cluster file"), path, use);
}

}  // namespace muster

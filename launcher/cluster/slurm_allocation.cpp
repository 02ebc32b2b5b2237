#include "launcher/cluster/slurm_allocation.h"

#include <charconv>

#include <fmt/format.h>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"

namespace muster {
namespace {

int parse_count(std::string_view text, int max, const std::string& what, const std::string& whole) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > max)
    throw Error(ErrorKind::Config,
                fmt::format("{}='{}': '{}' is not a count from 1 to {}", what, whole, text, max));
  return value;
}

}  // namespace

std::optional<LauncherChoice> parse_launcher_choice(const std::string& text) {
  if (text == "auto") return LauncherChoice::Auto;
  if (text == "ssh") return LauncherChoice::Ssh;
  if (text == "slurm") return LauncherChoice::Slurm;
  return std::nullopt;
}

bool inside_slurm_allocation(const Environment& env) {
  return !env.get("SLURM_JOB_ID").empty() &&
         !(env.get("SLURM_JOB_NODELIST").empty() && env.get("SLURM_NODELIST").empty());
}

std::vector<int> expand_slurm_counts(const std::string& text, const std::string& what) {
  std::vector<int> out;
  for (const auto& item : split_outside_brackets(text, ',')) {
    std::string_view part = item;
    int repeat = 1;
    if (auto open = part.find("(x"); open != std::string_view::npos) {
      if (part.back() != ')')
        throw Error(ErrorKind::Config, fmt::format("{}='{}': '{}' is not COUNT or COUNT(xREPEAT)", what, text, item));
      repeat = parse_count(part.substr(open + 2, part.size() - open - 3), kMaxRanks, what, text);
      part = part.substr(0, open);
    }
    const int count = parse_count(part, kMaxSlotsPerNode, what, text);
    if (out.size() + size_t(repeat) > size_t(kMaxHostListSize))
      throw Error(ErrorKind::Config, fmt::format("{}='{}' names more than {} nodes", what, text, kMaxHostListSize));
    out.insert(out.end(), size_t(repeat), count);
  }
  if (out.empty()) throw Error(ErrorKind::Config, fmt::format("{} is empty", what));
  return out;
}

ClusterSpec slurm_allocation_cluster(const Environment& env, bool auto_slots) {
  if (!inside_slurm_allocation(env))
    throw Error(ErrorKind::Config,
                "--launcher slurm: this is not inside a Slurm allocation (SLURM_JOB_ID and "
                "SLURM_JOB_NODELIST are not set); run muster inside salloc or sbatch, or name the "
                "nodes with -f, --hostfile or -H");
  const std::string list_var = env.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  std::vector<std::string> hosts;
  try {
    hosts = expand_hostlist(env.get(list_var));
  } catch (const Error& e) {
    throw Error(ErrorKind::Config, fmt::format("{}='{}': {}", list_var, env.get(list_var), e.what()));
  }
  std::vector<int> slots;
  if (!auto_slots) {
    const std::string tasks = env.get("SLURM_TASKS_PER_NODE");
    slots = tasks.empty() ? std::vector<int>(hosts.size(), 1)
                          : expand_slurm_counts(tasks, "SLURM_TASKS_PER_NODE");
    if (slots.size() != hosts.size())
      throw Error(ErrorKind::Config,
                  fmt::format("SLURM_TASKS_PER_NODE='{}' gives counts for {} nodes but {}='{}' names {}",
                              tasks, slots.size(), list_var, env.get(list_var), hosts.size()));
  }
  ClusterSpec spec;
  spec.source = fmt::format("the Slurm allocation (job {}, {} {})", env.get("SLURM_JOB_ID"), list_var,
                            env.get(list_var));
  spec.launcher = Launcher::Slurm;
  for (size_t i = 0; i < hosts.size(); ++i) {
    NodeSpec node;
    node.host = hosts[i];
    node.address = hosts[i];
    if (!auto_slots) node.slots.fixed = slots[i];
    node.where.source = spec.source;
    spec.nodes.push_back(std::move(node));
  }
  return spec;
}

bool is_slurm_task_variable(const std::string& name) {
  static const char* const kTaskVariables[] = {
      "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS", "SLURM_TASK_PID",
      "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
      "SLURM_STEPID", "SLURM_DISTRIBUTION", "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT",
      "SLURM_LAUNCH_NODE_IPADDR", "SLURM_PRIO_PROCESS", "SLURM_UMASK", "SLURM_TOPOLOGY_ADDR",
      "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_CPUS_PER_TASK"};
  for (const char* v : kTaskVariables)
    if (name == v) return true;
  for (const char* prefix : {"SLURM_STEP_", "SLURM_CPU_BIND", "SLURM_MEM_BIND", "SLURM_PMIX", "PMI_", "PMIX_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace muster

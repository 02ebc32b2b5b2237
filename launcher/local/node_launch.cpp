#include "launcher/local/node_launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/json_fields.h"
#include "launcher/local/self.h"
#include "launcher/text_bytes.h"

namespace muster {

nlohmann::json gpu_json(const Gpu& g) {
  return {{"index", g.index}, {"pci_bus_id", g.location.bus_id}, {"vendor_id", g.vendor_id},
          {"model", g.model}, {"uuid", g.uuid ? nlohmann::json(*g.uuid) : nlohmann::json(nullptr)}};
}

std::string rank_gpu_json(const Topology& topology, int local_rank) {
  if (local_rank < 0 || size_t(local_rank) >= topology.gpus.size()) return "null";
  return json_text(gpu_json(topology.gpus[size_t(local_rank)]));  // a model name is any bytes
}

std::optional<Gpu> rank_gpu_from_json(const std::string& text) {
  try {
    const nlohmann::json j = parse_untrusted_json(text);
    if (j.is_null()) return std::nullopt;
    Gpu g;
    g.index = j.at("index").get<int>();
    g.location.bus_id = j.at("pci_bus_id").get<std::string>();
    g.vendor_id = j.at("vendor_id").get<std::uint16_t>();
    g.model = j.at("model").get<std::string>();
    if (!j.at("uuid").is_null()) g.uuid = j.at("uuid").get<std::string>();
    return g;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Usage, fmt::format("{} is not a GPU as muster's agent describes one ({}): "
                                              "smoke-rank runs under muster smoke", kRankGpuVariable,
                                              e.what()));
  }
}

NodeWorkdir node_workdir(const LaunchRequest& request, const Environment& base) {
  if (!request.workdir || request.workdir_rule == WorkdirRule::Required) return {request.workdir, false};
  // What a rank needs of it: a directory it can search (chdir's own test is X_OK).
  struct stat st {};
  if (stat(request.workdir->c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      access(request.workdir->c_str(), X_OK) == 0)
    return {request.workdir, false};
  const std::string home = base.get("HOME");
  return {home.empty() ? std::string("/") : home, true};
}

std::vector<RankProcess> rank_processes_for_node(const NodeView& node,
                                                 const LaunchRequest& request,
                                                 const Environment& base,
                                                 const Topology& topology) {
  if (request.bind != BindPolicy::None && !topology.is_this_machine)
    throw Error(ErrorKind::Usage,
                fmt::format("ranks can only be bound to this machine's CPUs, but the topology "
                            "came from {}; unset it or use --bind none",
                            topology.source));
  check_node_view(node);
  std::vector<std::optional<int>> gpus;
  for (const auto& r : node.ranks) gpus.push_back(r.gpu);
  std::vector<RankBinding> bindings = plan_bindings(topology, gpus, request.bind);
  std::vector<RankProcess> out;
  for (size_t i = 0; i < node.ranks.size(); ++i) {
    const RankAssignment& r = node.ranks[i];
    RankProcess p;
    p.rank = r.rank;
    p.spec.argv = request.argv;
    p.spec.env = rank_environment(base, node, r, request.job);
    if (!p.spec.argv.empty() && p.spec.argv[0] == kMusterSelf) {
      // This muster again, started as it was started here (through its bundle's loader, or
      // /proc/self/exe), shown by ps as "muster smoke-rank".
      SelfCommand self = self_command();
      p.spec.program = self.program;
      self.argv.insert(self.argv.end(), p.spec.argv.begin() + 1, p.spec.argv.end());
      p.spec.argv = std::move(self.argv);
      for (const auto& [name, value] : self.env) p.spec.env.set(name, value);
      p.spec.env.set(kRankGpuVariable, rank_gpu_json(topology, r.local_rank));
    }
    p.spec.workdir = request.workdir;
    // As a login shell and srun set it: a program that reads $PWD sees where it stands.
    if (request.workdir) p.spec.env.set("PWD", *request.workdir);
    p.spec.cpus = bindings[i].cpus;
    p.binding = bindings[i];
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace muster

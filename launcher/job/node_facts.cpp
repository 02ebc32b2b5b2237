#include "launcher/job/node_facts.h"

#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "probes/network_report.h"

namespace muster {

std::string describe_gpus(int count, const std::vector<std::string>& models) {
  if (count == 0) return "no GPUs";
  // "NVIDIA H100 x8" rather than the same name eight times.
  std::vector<std::string> kinds;
  std::map<std::string, int> times;
  for (const auto& m : models)
    if (times[m]++ == 0) kinds.push_back(m);
  std::vector<std::string> parts;
  for (const auto& k : kinds) parts.push_back(times[k] > 1 ? fmt::format("{} x{}", k, times[k]) : k);
  return fmt::format("{} GPU{}{}", count, count == 1 ? "" : "s",
                     parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, ", ")));
}

namespace {

struct Fact {
  const char* what;
  std::function<std::string(const NodeHello&)> value;
};

const std::vector<Fact>& facts() {
  static const std::vector<Fact> list = {
      {"GPUs", [](const NodeHello& h) { return describe_gpus(h.gpus, h.gpu_models); }},
      {"NICs", [](const NodeHello& h) { return std::to_string(h.nics); }},
      {"CPUs", [](const NodeHello& h) { return std::to_string(h.cpus); }},
      {"memory", [](const NodeHello& h) {
         return fmt::format("{:.0f} GiB", double(h.memory_bytes) / (1 << 30));
       }},
      {"kernel", [](const NodeHello& h) { return h.kernel; }},
      {"muster", [](const NodeHello& h) { return h.version; }},
  };
  return list;
}

}  // namespace

std::vector<std::vector<FactDifference>> differences_from_majority(
    const std::vector<NodeHello>& nodes) {
  std::vector<std::vector<FactDifference>> out(nodes.size());
  for (const auto& fact : facts()) {
    std::vector<std::string> values;
    for (const auto& n : nodes) values.push_back(fact.value(n));
    auto odd = differs_from_majority(values);
    std::string usual;
    for (size_t k = 0; k < values.size(); ++k)
      if (!odd[k]) usual = values[k];
    for (size_t k = 0; k < values.size(); ++k)
      if (odd[k]) out[k].push_back({fact.what, values[k], usual});
  }
  return out;
}

std::string describe_node(const NodeHello& h) {
  return fmt::format("{}, {} NIC{}, {} CPUs, {:.0f} GiB, kernel {}", describe_gpus(h.gpus, h.gpu_models),
                     h.nics, h.nics == 1 ? "" : "s", h.cpus, double(h.memory_bytes) / (1 << 30),
                     h.kernel);
}

}  // namespace muster

#include "launcher/remote/health_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/error.h"
#include "launcher/json_fields.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

using nlohmann::json;

// A node's report is small; these bounds keep an odd agent from filling the head.
constexpr size_t kMaxFindings = 4096, kMaxCounters = 4096, kMaxText = 2048;

std::string bounded(const json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_string()) return "";
  std::string s = j.at(key).get<std::string>();
  if (s.size() > kMaxText) s.resize(kMaxText);
  return s;
}

// A count of parts a node reports (GPUs, links, ports); 0 when it says none.
int count_in(const json& j, const char* key) {
  return j.contains(key) ? json_integer(j.at(key), 0, 1 << 16) : 0;
}

HealthStatus status_from(const std::string& name) {
  for (HealthStatus s : {HealthStatus::Pass, HealthStatus::Warn, HealthStatus::Fail, HealthStatus::Unknown,
                         HealthStatus::Absent})
    if (name == health_status_name(s)) return s;
  throw Error(ErrorKind::Runtime, "a health finding with an unknown status '" + name.substr(0, 32) + "'");
}

}  // namespace

std::string health_request_json(const HealthExpectations& e) {
  json expect = json::object();
  if (e.gpus_per_node) expect["gpus_per_node"] = *e.gpus_per_node;
  if (e.gpu_model) expect["gpu_model"] = *e.gpu_model;
  if (e.pcie_gen) expect["pcie_gen"] = *e.pcie_gen;
  if (e.pcie_width) expect["pcie_width"] = *e.pcie_width;
  if (e.ib_rate_gbps) expect["ib_rate_gbps"] = *e.ib_rate_gbps;
  if (e.ib_ports) expect["ib_ports"] = *e.ib_ports;
  if (e.driver_version) expect["driver_version"] = *e.driver_version;
  json request = {{"op", "health"}, {"expect", expect}};
  if (e.stress.run)
    request["stress"] = {{"peer_ratio", e.stress.peer_ratio}, {"hardware_ratio", e.stress.hardware_ratio}};
  return bytes_kept(request).dump();  // as the cluster file wrote it
}

HealthExpectations expectations_from_request(std::string_view text) try {
  json j = exactly_restored(parse_untrusted_json(text));
  HealthExpectations e;
  if (!j.is_object() || !j.contains("expect")) return e;
  const json& x = j.at("expect");
  auto number = [&](const char* key, int low, int high) -> std::optional<int> {
    if (!x.contains(key)) return std::nullopt;
    int v = x.at(key).get<int>();
    if (v < low || v > high) throw Error(ErrorKind::Runtime, std::string("expect.") + key + " out of range");
    return v;
  };
  e.gpus_per_node = number("gpus_per_node", 0, 1024);
  e.pcie_gen = number("pcie_gen", 1, 6);
  e.pcie_width = number("pcie_width", 1, 32);
  e.ib_ports = number("ib_ports", 0, 1024);
  if (x.contains("ib_rate_gbps")) e.ib_rate_gbps = x.at("ib_rate_gbps").get<double>();
  if (x.contains("gpu_model")) e.gpu_model = bounded(x, "gpu_model");
  if (x.contains("driver_version")) e.driver_version = bounded(x, "driver_version");
  if (j.contains("stress")) {
    // From the head, but bounded all the same.
    const json& st = j.at("stress");
    auto ratio = [&](const char* key) {
      const double v = st.at(key).get<double>();
      if (!(v > 0 && v <= 1)) throw Error(ErrorKind::Runtime, std::string("stress.") + key + " out of range");
      return v;
    };
    e.stress.run = true;
    e.stress.peer_ratio = ratio("peer_ratio");
    e.stress.hardware_ratio = ratio("hardware_ratio");
  }
  return e;
} catch (const nlohmann::json::exception& e) {
  throw Error(ErrorKind::Runtime, std::string("not a health request: ") + e.what());
}

std::string to_json(const NodeHealth& h) {
  json findings = json::array();
  for (const auto& f : h.findings)
    findings.push_back({{"check", f.check}, {"status", health_status_name(f.status)}, {"device", f.device},
                        {"observed", f.observed}, {"expected", f.expected}, {"expected_from", f.expected_from},
                        {"remedy", f.remedy}, {"values", f.values}, {"gpu_model", f.gpu_model}});
  const NodeSoftware& s = h.software;
  json software = {{"nvidia_driver", s.nvidia_driver}, {"nvlinks", s.nvlinks}, {"cuda_driver", s.cuda_driver}, {"nccl", s.nccl},
                   {"nccl_net_plugin", s.nccl_net_plugin}, {"kernel", s.kernel},
                   {"rdma_providers", s.rdma_providers}, {"nvidia_gpus", s.nvidia_gpus},
                   {"gpu_model", s.gpu_model}, {"ib_ports", s.ib_ports}, {"ib_rates", s.ib_rates},
                   {"hardware_model", s.hardware_model}};
  return json{{"complete", h.complete}, {"findings", findings}, {"counters", json::parse(counters_to_json(h.counters))},
              {"software", software}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

NodeHealth node_health_from_json(std::string_view text) {
  try {
    // Every integer below is read through json_integer: a figure of any finite size is data.
    json j = parse_untrusted_json(text, Floats::AnyFinite);
    NodeHealth h;
    h.complete = j.value("complete", false);
    const json& findings = j.at("findings");
    if (!findings.is_array()) throw Error(ErrorKind::Runtime, "a health report without a list of findings");
    // A node with more findings than any real one has keeps the first, and says so: a sick
    // node is not turned into an unknown one by the size of its report.
    for (const auto& f : findings) {
      if (h.findings.size() == kMaxFindings) {
        HealthFinding more;
        more.check = "report";
        more.status = HealthStatus::Warn;
        more.observed = fmt::format("{} more findings left out (the head keeps {})", findings.size() - kMaxFindings,
                                    kMaxFindings);
        h.findings.push_back(std::move(more));
        break;
      }
      HealthFinding out;
      out.check = bounded(f, "check");
      out.status = status_from(bounded(f, "status"));
      out.device = bounded(f, "device");
      out.observed = bounded(f, "observed");
      out.expected = bounded(f, "expected");
      out.expected_from = bounded(f, "expected_from");
      out.remedy = bounded(f, "remedy");
      out.gpu_model = bounded(f, "gpu_model");
      if (f.contains("values")) {
        if (f.at("values").size() > 64) throw Error(ErrorKind::Runtime, "a health finding with too many values");
        for (const auto& [key, value] : f.at("values").items())
          if (key.size() <= 128) out.values[key] = value.get<double>();
      }
      h.findings.push_back(std::move(out));
    }
    h.counters = counters_from_json(j.at("counters").dump());
    const json& s = j.at("software");
    h.software = {bounded(s, "nvidia_driver"), bounded(s, "cuda_driver"), bounded(s, "nccl"),
                  bounded(s, "nccl_net_plugin"), bounded(s, "kernel"), bounded(s, "rdma_providers"),
                  count_in(s, "nvidia_gpus"), bounded(s, "gpu_model"), count_in(s, "nvlinks"), count_in(s, "ib_ports"),
                  bounded(s, "ib_rates"), bounded(s, "hardware_model")};
    return h;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Runtime, std::string("not a node's health report: ") + e.what());
  }
}

std::string counters_to_json(const std::vector<HealthCounter>& counters) {
  json out = json::array();
  for (const auto& c : counters) out.push_back({{"device", c.device}, {"name", c.name}, {"value", c.value}});
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<HealthCounter> counters_from_json(std::string_view text) {
  try {
    json j = parse_untrusted_json(text, Floats::AnyFinite);
    if (!j.is_array()) throw Error(ErrorKind::Runtime, "not a list of counters");
    std::vector<HealthCounter> out;
    for (const auto& c : j) {
      if (out.size() == kMaxCounters) break;  // the first ones are compared; no node has more
      out.push_back({bounded(c, "device"), bounded(c, "name"), json_integer<std::uint64_t>(c.at("value"), 0, UINT64_MAX)});
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Runtime, std::string("not a node's counters: ") + e.what());
  }
}

std::string health_root_of_this_node() {
  const char* root = std::getenv("MUSTER_HEALTH_FSROOT");
  return root && *root ? root : "/";
}

}  // namespace muster

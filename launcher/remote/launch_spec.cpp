#include "launcher/json_fields.h"
#include "launcher/remote/launch_spec.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/error.h"
#include "launcher/text_bytes.h"
#include "topology/line_rate.h"

namespace muster {

using nlohmann::json;

namespace {

// Every payload of the agent protocol is read the same way: parsed as untrusted JSON, then
// `read` takes its fields. Whatever goes wrong (malformed JSON, a missing or mistyped
// field, a node index that is no number) comes out as one Error naming the payload, so a
// reader catches Error alone.
template <typename Read>
auto read_payload(const char* what, const std::string& text, Read read) {
  try {
    return read(exactly_restored(parse_untrusted_json(text)));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Runtime, fmt::format("malformed {}: {}", what, e.what()));
  }
}

}  // namespace

std::string to_json(const NodeLaunchSpec& spec) {
  const JobEnvironment& job = spec.request.job;
  json j = {
      {"protocol", kAgentProtocol},
      {"node", node_view_json(spec.node)},
      {"argv", spec.request.argv},
      {"workdir", spec.request.workdir ? json(*spec.request.workdir) : json(nullptr)},
      {"workdir_or_home", spec.request.workdir_rule == WorkdirRule::OrHome},
      {"bind", bind_policy_name(spec.request.bind)},
      {"job", {{"job_id", job.job_id}, {"master_addr", job.master_addr},
               {"master_port", job.master_port}, {"jax_coordinator_port", job.jax_coordinator_port},
               {"restart_count", job.restart_count},
               {"launch_env", job.launch_env}, {"exports", job.exports},
               {"node_env", [&] {
                  json by_node = json::object();
                  if (auto it = job.node_env.find(spec.node.node_rank); it != job.node_env.end())
                    by_node[std::to_string(it->first)] = it->second;  // the others' are not its business
                  return by_node;
                }()},
               {"node_defaults", [&] {
                  json by_node = json::object();
                  if (auto it = job.node_defaults.find(spec.node.node_rank); it != job.node_defaults.end())
                    by_node[std::to_string(it->first)] = it->second;
                  return by_node;
                }()}}},
      {"mpi", spec.request.mpi ? mpi_world_json(*spec.request.mpi) : json(nullptr)},
      {"grace_ms", spec.teardown.grace.count()},
      {"kill_wait_ms", spec.teardown.kill_wait.count()},
      {"settle_ms", spec.teardown.settle.count()},
      {"gave_up_exit_code", spec.teardown.gave_up_exit_code ? json(*spec.teardown.gave_up_exit_code)
                                                            : json(nullptr)},
  };
  return bytes_kept(std::move(j)).dump();  // argv and environment, byte for byte
}

NodeLaunchSpec node_launch_spec_from_json(const std::string& text) {
  return read_payload("launch spec", text, [](const json& j) {
    if (j.at("protocol").get<int>() != kAgentProtocol)
      throw Error(ErrorKind::Runtime, "the head speaks another muster protocol version");
    NodeLaunchSpec spec;
    spec.node = node_view_from_json(j.at("node"));
    spec.request.argv = j.at("argv").get<std::vector<std::string>>();
    if (!j.at("workdir").is_null()) spec.request.workdir = j.at("workdir").get<std::string>();
    spec.request.workdir_rule = j.at("workdir_or_home").get<bool>() ? WorkdirRule::OrHome : WorkdirRule::Required;
    spec.request.bind = bind_policy_from_name(j.at("bind"));
    const json& job = j.at("job");
    spec.request.job.job_id = job.at("job_id");
    spec.request.job.master_addr = job.at("master_addr");
    spec.request.job.master_port = job.at("master_port");
    spec.request.job.jax_coordinator_port = job.at("jax_coordinator_port");
    spec.request.job.restart_count = job.at("restart_count");
    spec.request.job.launch_env = job.at("launch_env").get<std::map<std::string, std::string>>();
    spec.request.job.exports = job.at("exports").get<std::map<std::string, std::string>>();
    for (const auto& [node, vars] : job.at("node_env").items())
      spec.request.job.node_env[std::stoi(node)] = vars.get<std::map<std::string, std::string>>();
    for (const auto& [node, vars] : job.at("node_defaults").items())
      spec.request.job.node_defaults[std::stoi(node)] = vars.get<std::map<std::string, std::string>>();
    if (!j.at("mpi").is_null()) {
      spec.request.mpi = mpi_world_from_json(j.at("mpi"));
      const MpiWorld& mpi = *spec.request.mpi;
      check_node_view(spec.node);  // its ranks index the map below
      if (int(mpi.node_of_rank.size()) != spec.node.world_size)
        throw Error(ErrorKind::Runtime, "the job's MPI map is not the size of its world");
      for (const auto& r : spec.node.ranks)
        if (mpi.node_of_rank[size_t(r.rank)] != mpi.node_of_rank[size_t(spec.node.ranks.front().rank)])
          throw Error(ErrorKind::Runtime, "the job's MPI map puts this node's ranks on several nodes");
    }
    spec.teardown.grace = Milliseconds(j.at("grace_ms").get<long>());
    spec.teardown.kill_wait = Milliseconds(j.at("kill_wait_ms").get<long>());
    spec.teardown.settle = Milliseconds(j.at("settle_ms").get<long>());
    if (!j.at("gave_up_exit_code").is_null())
      spec.teardown.gave_up_exit_code = j.at("gave_up_exit_code").get<int>();
    return spec;
  });
}

std::string to_json(const NodeBound& bound) {
  json out = json::array();
  for (const auto& [rank, r] : bound.ranks)
    out.push_back({{"rank", rank}, {"cpus", r.binding.cpus},
                   {"numa", r.binding.numa ? json(*r.binding.numa) : json(nullptr)},
                   {"gpu", r.binding.gpu ? json(*r.binding.gpu) : json(nullptr)},
                   {"gpu_bus_id", r.gpu_bus_id}});
  return json{{"ranks", out}, {"went_home", bound.went_home}}.dump();
}

NodeBound node_bound_from_json(const std::string& text) {
  return read_payload("bindings from agent", text, [](const json& bound) {
    NodeBound out;
    out.went_home = bound.at("went_home").get<bool>();
    for (const auto& j : bound.at("ranks")) {
      RankBindingReport r;
      r.binding.cpus = j.at("cpus").get<std::vector<int>>();
      if (!j.at("numa").is_null()) r.binding.numa = j.at("numa").get<int>();
      if (!j.at("gpu").is_null()) r.binding.gpu = j.at("gpu").get<int>();
      r.gpu_bus_id = j.at("gpu_bus_id");
      out.ranks.emplace_back(j.at("rank").get<int>(), r);
    }
    return out;
  });
}

std::string to_json(const NodeHello& h) {
  json addresses = json::array();
  for (const auto& a : h.addresses) {
    addresses.push_back({{"interface", a.interface}, {"address", a.address},
                         {"prefix_length", a.prefix_length}});
    if (a.line_rate_gbps) addresses.back()["line_rate_gbps"] = *a.line_rate_gbps;
  }
  json hello{{"protocol", kAgentProtocol}, {"hostname", h.hostname}, {"version", h.version},
              {"machine_id", h.machine_id}, {"boot_id", h.boot_id}, {"gpus", h.gpus},
              {"gpu_models", h.gpu_models}, {"cpus", h.cpus}, {"free_ports", h.free_ports},
              {"probe_port", h.probe_port}, {"probe_secret", h.probe_secret},
              {"addresses", addresses}, {"nics", h.nics},
              {"memory_bytes", h.memory_bytes}, {"kernel", h.kernel},
              {"name_resolves", h.name_resolves ? json(*h.name_resolves) : json(nullptr)},
              {"neighbour_limit", h.neighbour_limit ? json(*h.neighbour_limit) : json(nullptr)},
              {"pmix_unavailable", h.pmix_unavailable}, {"rdma", h.rdma}};
  if (!h.paths.devices.empty())
    hello["paths"] = {{"devices", h.paths.devices}, {"rows", h.paths.rows}, {"nearest", h.paths.nearest}};
  return bytes_kept(std::move(hello)).dump();
}

namespace {
// The hello's numbers, each within what a node can have: what a plan, a port or a
// prefix is made from is checked here, before anything is sized or dialled from it.
int number_within(const json& j, const char* key, int min, int max) {
  const long long value = j.at(key).get<long long>();
  if (value < min || value > max)
    throw Error(ErrorKind::Runtime, fmt::format("malformed hello from agent: {} {} is not in {}..{}",
                                                key, value, min, max));
  return int(value);
}

// A list of the hello, at most `max` long.
const json& list_within(const json& j, const char* key, size_t max) {
  const json& list = j.at(key);
  if (!list.is_array() || list.size() > max)
    throw Error(ErrorKind::Runtime, fmt::format("malformed hello from agent: {} is not a list of at "
                                                "most {}", key, max));
  return list;
}

constexpr int kMostGpus = 1024, kMostCpus = 1 << 20, kMostNics = 4096;
constexpr size_t kMostAddresses = 4096;

// A hello's path matrix: at most kMostPathDevices devices, a row per GPU of one short word
// per device, and each GPU's nearest NICs among them.
PathMatrix path_matrix_within(const json& j) {
  auto words = [](const json& list, size_t max, size_t longest) {
    if (!list.is_array() || list.size() > max)
      throw Error(ErrorKind::Runtime, "malformed hello from agent: a path matrix out of bounds");
    std::vector<std::string> out;
    for (const auto& w : list) {
      out.push_back(w.get<std::string>());
      if (out.back().size() > longest)
        throw Error(ErrorKind::Runtime, "malformed hello from agent: a path matrix word too long");
    }
    return out;
  };
  PathMatrix m;
  m.devices = words(j.at("devices"), kMostPathDevices, 64);
  const json& rows = j.at("rows");
  const json& nearest = j.at("nearest");
  if (!rows.is_array() || !nearest.is_array() || rows.size() > m.devices.size() || nearest.size() != rows.size())
    throw Error(ErrorKind::Runtime, "malformed hello from agent: a path matrix out of bounds");
  for (const auto& row : rows) {
    m.rows.push_back(words(row, m.devices.size(), 8));
    if (m.rows.back().size() != m.devices.size())
      throw Error(ErrorKind::Runtime, "malformed hello from agent: a path matrix row of another width");
  }
  for (const auto& n : nearest) m.nearest.push_back(words(n, m.devices.size(), 64));
  return m;
}
}  // namespace

NodeHello node_hello_from_json(const std::string& text) {
  return read_payload("hello from agent", text, [](const json& j) {
    if (j.at("protocol").get<int>() != kAgentProtocol)
      throw Error(ErrorKind::Runtime, "the node's agent speaks another muster protocol version");
    NodeHello h;
    h.hostname = j.at("hostname");
    h.version = j.at("version");
    h.machine_id = j.at("machine_id");
    h.boot_id = j.at("boot_id");
    h.gpus = number_within(j, "gpus", 0, kMostGpus);
    h.gpu_models = list_within(j, "gpu_models", kMostGpus).get<std::vector<std::string>>();
    h.cpus = number_within(j, "cpus", 0, kMostCpus);
    for (const auto& port : list_within(j, "free_ports", 16)) {
      const int p = port.get<int>();
      if (p < 1 || p > 65535)
        throw Error(ErrorKind::Runtime, fmt::format("malformed hello from agent: free port {} is not a port", p));
      h.free_ports.push_back(p);
    }
    h.probe_port = number_within(j, "probe_port", 0, 65535);  // 0: no probe server
    h.probe_secret = j.at("probe_secret");
    h.pmix_unavailable = j.at("pmix_unavailable");
    h.rdma = j.at("rdma").get<bool>();
    for (const auto& a : list_within(j, "addresses", kMostAddresses)) {
      h.addresses.push_back({a.at("interface"), a.at("address"), number_within(a, "prefix_length", 0, 32)});
      if (a.contains("line_rate_gbps")) {
        // The agent sends none it would not believe (topology/line_rate.h).
        const double gbps = a.at("line_rate_gbps").get<double>();
        if (!(gbps > 0 && gbps < kMostLineRateGbps))
          throw Error(ErrorKind::Runtime, fmt::format("malformed hello from agent: line rate {} Gbit/s", gbps));
        h.addresses.back().line_rate_gbps = gbps;
      }
    }
    h.nics = number_within(j, "nics", 0, kMostNics);
    h.memory_bytes = j.at("memory_bytes");
    h.kernel = j.at("kernel");
    if (j.contains("name_resolves") && !j.at("name_resolves").is_null())
      h.name_resolves = j.at("name_resolves").get<bool>();
    if (j.contains("neighbour_limit") && !j.at("neighbour_limit").is_null())
      h.neighbour_limit = j.at("neighbour_limit").get<std::uint64_t>();
    if (j.contains("paths")) h.paths = path_matrix_within(j.at("paths"));
    return h;
  });
}

std::string exit_to_json(const ExitStatus& status) {
  const bool signaled = status.kind == ExitStatus::Kind::Signaled;
  return json{{"signal", signaled}, {"code", signaled ? status.signal : status.code}}.dump();
}

ExitStatus exit_from_json(const std::string& text) {
  return read_payload("exit from agent", text, [](const json& j) {
    const bool signaled = j.at("signal").get<bool>();
    const int code = j.at("code").get<int>();
    // An exit status is 0-255 and a signal 1-64 (SIGRTMAX); anything else is no status.
    if (code < 0 || code > (signaled ? 64 : 255) || (signaled && code == 0))
      throw Error(ErrorKind::Runtime, fmt::format("malformed exit from agent: {} {} is not possible",
                                                  signaled ? "signal" : "exit status", code));
    return signaled ? ExitStatus::signaled(code) : ExitStatus::exited(code);
  });
}

NodeRunReport node_run_report(const JobResult& result) {
  return {result.start_error, result.escaped_killed, result.notes, result.stuck, result.aborted};
}

std::string to_json(const NodeRunReport& report) {
  json done = {{"start_error", report.start_error},
               {"escaped", report.escaped_killed},
               {"notes", report.notes},
               {"stuck", json::array()}};
  for (const auto& s : report.stuck) done["stuck"].push_back({{"rank", s.rank}, {"process", s.description}});
  if (report.aborted)
    done["aborted"] = {{"rank", report.aborted->rank}, {"code", report.aborted->code}, {"said", report.aborted->said}};
  return bytes_kept(std::move(done)).dump();  // a command line may quote any bytes
}

NodeRunReport node_run_report_from_json(const std::string& text) {
  return read_payload("report from agent", text, [](const json& j) {
    NodeRunReport r;
    r.start_error = j.at("start_error");
    r.escaped_killed = j.at("escaped").get<int>();
    if (r.escaped_killed < 0)
      throw Error(ErrorKind::Runtime, "malformed report from agent: a negative count of processes");
    for (const auto& note : j.value("notes", json::array())) r.notes.push_back(note.get<std::string>());
    for (const auto& s : j.at("stuck")) r.stuck.push_back({s.at("rank").get<int>(), s.at("process")});
    if (j.contains("aborted"))
      r.aborted = JobResult::Abort{j["aborted"].at("rank").get<int>(), j["aborted"].at("code").get<int>(),
                                   j["aborted"].at("said").get<std::string>()};
    return r;
  });
}

}  // namespace muster

// muster smoke-rank: one probe rank of `muster smoke` (started by muster, not by hand). It
// says hello, meets the other ranks at the rendezvous, and runs the collective sweep,
// printing every step as a line for the head.
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/smoke_protocol.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "probes/comm_gloo.h"
#include "probes/comm_nccl.h"
#include "probes/interfaces.h"
#include "topology/cpu_list.h"
#include "topology/topology_source.h"

namespace muster::cli {
namespace {

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int env_int(const char* name) {
  std::string v = env_or(name);
  if (v.empty()) throw Error(ErrorKind::Usage, fmt::format("{} is not set: smoke-rank runs under muster smoke", name));
  return std::stoi(v);
}

void say(const nlohmann::json& j) {
  print_out(std::string(kSmokeLinePrefix) + j.dump() + "\n");
}

int run_smoke_rank_process() {
  const auto config = nlohmann::json::parse(env_or("MUSTER_SMOKE", "{}"));
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), local_rank = env_int("LOCAL_RANK");
  const int node = env_int("GROUP_RANK");
  const std::string master = env_or("MASTER_ADDR");
  const int port = env_int("MASTER_PORT");
  const std::chrono::milliseconds timeout(config.at("timeout_ms").get<long>());

  // 1. Hello: who this rank is, where it runs, what it is bound to and which GPU it has.
  Topology topology = HwlocTopologySource().load();
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string machine_id;
  std::getline(std::ifstream("/etc/machine-id"), machine_id);
  nlohmann::json gpu = nullptr;
  if (size_t(local_rank) < topology.gpus.size()) {
    const Gpu& g = topology.gpus[size_t(local_rank)];
    gpu = {{"index", g.index}, {"pci_bus_id", g.location.bus_id}, {"model", g.model},
           {"uuid", g.uuid ? nlohmann::json(*g.uuid) : nlohmann::json(nullptr)}};
  }
  say({{"type", "hello"}, {"rank", rank}, {"world_size", world}, {"local_rank", local_rank},
       {"node_rank", node}, {"host", host}, {"machine_id", machine_id}, {"gpu", gpu},
       {"cpuset", format_cpu_list(cpus)}, {"pid", getpid()}});

  // 2. Meet at the rendezvous rank 0 serves; learn every rank's node; agree on a backend.
  std::optional<RendezvousServer> server;
  if (rank == 0) server.emplace(port);
  RendezvousClient store(master, port, timeout);
  store.set(fmt::format("node/{}", rank), std::to_string(node));
  const bool has_nvidia = !gpu.is_null() &&
                          topology.gpus[size_t(local_rank)].vendor_id == 0x10de;
  std::optional<std::string> nccl_missing = has_nvidia ? nccl_unavailable_reason()
                                                       : std::optional<std::string>("no NVIDIA GPU for this rank");
  std::string wanted = config.at("backend");
  if (wanted == "nccl" && nccl_missing)
    throw Error(ErrorKind::Runtime, fmt::format("rank {} on {} cannot use NCCL: {}", rank, host, *nccl_missing));
  store.set(fmt::format("nccl-ok/{}", rank), nccl_missing ? "0" : "1");
  std::vector<int> node_of_rank;
  bool all_nccl = true;
  for (int r = 0; r < world; ++r) {
    try {
      node_of_rank.push_back(std::stoi(store.get(fmt::format("node/{}", r), timeout)));
    } catch (const Error&) {
      throw Error(ErrorKind::Runtime, fmt::format("rank {} never reached the rendezvous within {} ms",
                                                  r, timeout.count()));
    }
    all_nccl &= store.get(fmt::format("nccl-ok/{}", r), timeout) == "1";
  }
  const std::string backend = wanted == "auto" ? (all_nccl ? "nccl" : "gloo") : wanted;
  if (rank == 0) say({{"type", "backend"}, {"backend", backend}});

  std::unique_ptr<Collective> collective;
  if (backend == "nccl") {
    collective = make_nccl_collective(store, rank, world, local_rank, timeout);
  } else {
    GlooSettings gloo;
    gloo.interface = env_or("GLOO_SOCKET_IFNAME");
    gloo.address = is_loopback(master) ? master : host;
    gloo.timeout = timeout;
    collective = make_gloo_collective(store, rank, world, gloo);
  }

  // 3. The sweep, every step reported as it happens. MUSTER_SMOKE_STALL=RANK:STEP makes a
  //    rank stop before that step, as a hung rank would: how the tests see a collective
  //    that never completes.
  const std::string stall = env_or("MUSTER_SMOKE_STALL");
  const bool stalls = !stall.empty() && std::stoi(stall) == rank;
  const int stall_step = stalls ? std::stoi(stall.substr(stall.find(':') + 1)) : 0;
  run_smoke_rank(*collective, smoke_settings_from_json(config), node_of_rank, [&](const SmokeEvent& e) {
    if (stalls && e.kind == SmokeEvent::Kind::Enter && e.seq == stall_step) pause();
    say(smoke_event_json(e));
  });
  // Rank 0 serves the rendezvous: everyone leaves together.
  collective->run(CollectiveOp::Barrier, nullptr, nullptr, 0);
  say({{"type", "done"}});
  return 0;
}

}  // namespace

CommandAction setup_smoke_rank(CLI::App& app) {
  app.group("");  // hidden: muster smoke starts it on every slot
  return []() {
    try {
      return run_smoke_rank_process();
    } catch (const std::exception& e) {
      say({{"type", "failure"}, {"message", e.what()}});
      print_error(e.what());
      return 3;
    }
  };
}

}  // namespace muster::cli

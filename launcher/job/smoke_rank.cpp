#include "launcher/job/smoke_rank.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/error.h"
#include "launcher/job/smoke_protocol.h"
#include "launcher/local/node_launch.h"
#include "launcher/text_bytes.h"
#include "probes/comm_gloo.h"
#include "probes/comm_nccl.h"
#include "probes/interfaces.h"
#include "probes/rendezvous_store.h"
#include "topology/cpu_list.h"

namespace muster {
namespace {

int env_int(const Environment& env, const char* name) {
  std::string v = env.get(name);
  try {
    size_t used = 0;
    int value = std::stoi(v, &used);
    if (used == v.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error(ErrorKind::Usage, fmt::format("{} is '{}', not a number: smoke-rank runs under "
                                            "muster smoke", name, v));
}

// Who this rank is, where it runs, what it is bound to and which GPU it has.
nlohmann::json hello_of(const std::optional<Gpu>& g, int rank, int world, int local_rank, int node) {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string machine_id;
  std::getline(std::ifstream("/etc/machine-id"), machine_id);
  const nlohmann::json gpu = g ? gpu_json(*g) : nlohmann::json(nullptr);
  return {{"type", "hello"}, {"rank", rank}, {"world_size", world}, {"local_rank", local_rank},
          {"node_rank", node}, {"host", host}, {"machine_id", machine_id}, {"gpu", gpu},
          {"cpuset", format_cpu_list(cpus)}, {"pid", getpid()}};
}

void say_failure(const std::function<void(const std::string&)>& say_line, const std::exception& e) {
  say_line(std::string(kSmokeLinePrefix) + json_text({{"type", "failure"}, {"message", e.what()}}));
}

// Whether NCCL can run this rank: it has an NVIDIA GPU and NCCL loads here. A rank asked
// for NCCL that cannot use it fails, naming itself and the reason.
bool nccl_usable(const std::string& wanted, bool has_nvidia, int rank) {
  std::optional<std::string> nccl_missing =
      has_nvidia ? nccl_unavailable_reason() : std::optional<std::string>("no NVIDIA GPU for this rank");
  if (wanted == "nccl" && nccl_missing) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    throw Error(ErrorKind::Runtime, fmt::format("rank {} on {} cannot use NCCL: {}", rank, host, *nccl_missing));
  }
  return !nccl_missing;
}

// MUSTER_SMOKE_STALL=RANK:STEP[:MARK] makes that rank's collectives stop returning from that
// step of the sweep on, as a wedged GPU or a dead link makes a real rank's: how the tests make
// a rank hang inside a collective. (MARK only tells one test's ranks from another's.)
class StallingCollective : public Collective {
 public:
  StallingCollective(std::unique_ptr<Collective> inner, std::shared_ptr<std::atomic<bool>> stalled)
      : inner_(std::move(inner)), stalled_(std::move(stalled)) {}
  std::string backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  float* allocate(size_t elements) override { return inner_->allocate(elements); }
  void release(float* buffer) override { inner_->release(buffer); }
  void upload(float* buffer, const std::vector<float>& host) override { inner_->upload(buffer, host); }
  std::vector<float> download(const float* buffer, size_t elements) override {
    return inner_->download(buffer, elements);
  }
  void run(CollectiveOp op, const float* send, float* recv, size_t count) override {
    while (*stalled_) std::this_thread::sleep_for(std::chrono::hours(1));  // until it is stopped
    inner_->run(op, send, recv, count);
  }
  void run_repeatedly(CollectiveOp op, const float* send, float* recv, size_t count, int times) override {
    while (*stalled_) std::this_thread::sleep_for(std::chrono::hours(1));
    inner_->run_repeatedly(op, send, recv, count, times);
  }
  std::unique_ptr<Collective> subgroup(const std::string& name, const std::vector<int>& members) override {
    auto group = inner_->subgroup(name, members);
    return group ? std::make_unique<StallingCollective>(std::move(group), stalled_) : nullptr;
  }

 private:
  std::unique_ptr<Collective> inner_;
  std::shared_ptr<std::atomic<bool>> stalled_;
};

void run(const Environment& env, const std::function<void(const std::string&)>& say_line,
         std::optional<RendezvousServer>& server, bool& failure_said) {
  auto say = [&](const nlohmann::json& j) { say_line(std::string(kSmokeLinePrefix) + json_text(j)); };
  const auto config = nlohmann::json::parse(env.has("MUSTER_SMOKE") ? env.get("MUSTER_SMOKE") : "{}");
  const int rank = env_int(env, "RANK"), world = env_int(env, "WORLD_SIZE");
  const int local_rank = env_int(env, "LOCAL_RANK"), node = env_int(env, "GROUP_RANK");
  const std::string master = env.get("MASTER_ADDR");
  const int port = env_int(env, "MASTER_PORT");
  const std::chrono::milliseconds timeout(config.at("timeout_ms").get<long>());

  // 1. Hello.
  // The node's agent found this rank's GPU; walking the PCI tree again would repeat it.
  const std::optional<Gpu> gpu = rank_gpu_from_json(env.get(kRankGpuVariable));
  const nlohmann::json hello = hello_of(gpu, rank, world, local_rank, node);
  say(hello);

  // 2. Meet at the rendezvous rank 0 serves: every rank says, in one key, its node and
  //    whether NCCL can run it, and reads the others'. The backend is NCCL when asked for,
  //    or (auto) when every rank can use it; otherwise Gloo.
  const std::string secret = config.at("secret");
  if (rank == 0) server.emplace(master, port, secret);
  const std::string wanted = config.at("backend");
  const bool has_nvidia = gpu && gpu->vendor_id == 0x10de;
  const bool nccl_here = nccl_usable(wanted, has_nvidia, rank);
  RendezvousClient store(master, port, secret, timeout);
  store.set(fmt::format("rank/{}", rank), fmt::format("{} {}", node, nccl_here ? 1 : 0));
  std::vector<int> node_of_rank;
  bool nccl_everywhere = true;
  for (int r = 0; r < world; ++r) {
    std::string said;
    try {
      said = store.get(fmt::format("rank/{}", r), timeout);
    } catch (const RendezvousTimedOut&) {
      throw Error(ErrorKind::Runtime, fmt::format("rank {} never reached the rendezvous within {} ms",
                                                  r, timeout.count()));
    } catch (const Error& e) {
      // Rank 0 ended (it serves the store), often for a reason of its own that it reports:
      // waiting on rank r is not the cause, and saying so would blame the wrong rank.
      throw Error(ErrorKind::Runtime, fmt::format("lost the rendezvous on rank 0 ({}:{}) while "
                                                  "waiting for rank {}: {}", master, port, r, e.what()));
    }
    const auto space = said.find(' ');
    node_of_rank.push_back(std::stoi(said.substr(0, space)));
    nccl_everywhere &= said.substr(space + 1) == "1";
  }
  const std::string backend = wanted == "auto" ? (nccl_everywhere ? "nccl" : "gloo") : wanted;
  if (rank == 0) say({{"type", "backend"}, {"backend", backend}});

  std::unique_ptr<Collective> collective;
  if (backend == "nccl") {
    collective = make_nccl_collective(store, rank, world, local_rank, timeout);
  } else {
    GlooSettings gloo;
    gloo.interface = env.get("GLOO_SOCKET_IFNAME");
    gloo.address = is_loopback(master) ? master : hello.at("host").get<std::string>();
    gloo.timeout = timeout;
    collective = make_gloo_collective(store, rank, world, gloo);
  }

  const std::string stall = env.get("MUSTER_SMOKE_STALL");
  const bool stalls = !stall.empty() && std::stoi(stall) == rank;
  const int stall_step = stalls ? std::stoi(stall.substr(stall.find(':') + 1)) : 0;
  auto stalled = std::make_shared<std::atomic<bool>>(false);
  if (stalls) collective = std::make_unique<StallingCollective>(std::move(collective), stalled);

  // 3. The sweep, every step reported as it happens.
  try {
    const auto culprits =
        run_smoke_sweep(*collective, smoke_settings_from_json(config), node_of_rank, [&](const SmokeEvent& e) {
          if (stalls && e.kind == SmokeEvent::Kind::Enter && e.seq == stall_step) *stalled = true;
          say(smoke_event_json(e));
        });
    if (culprits && rank == 0) say(culprit_report_json(*culprits));  // every rank found the same
    // Rank 0 serves the rendezvous: everyone leaves together.
    collective->run(CollectiveOp::Barrier, nullptr, nullptr, 0);
  } catch (const std::exception& e) {
    // Said while the collective still holds its connections: closing them is what tells the
    // peers, who would otherwise report the broken connection (a consequence) and end the job
    // before this rank's own cause (a timeout, a hang) is heard.
    say_failure(say_line, e);
    failure_said = true;
    throw;
  }
  say({{"type", "done"}});
}

}  // namespace

void run_smoke_rank(const Environment& env, const std::function<void(const std::string&)>& say) {
  // Rank 0's store outlives its failure report: were it gone first, its peers would report
  // a lost rendezvous, and a teardown for their failure could stop rank 0 before its own
  // cause was said.
  std::optional<RendezvousServer> server;
  bool failure_said = false;
  try {
    run(env, say, server, failure_said);
  } catch (const std::exception& e) {
    if (!failure_said) say_failure(say, e);
    throw;
  }
}

int smoke_rank_exit_code(const std::exception& failure) {
  // A peer's closed connection is the consequence of that peer's end (a Gloo pair closes as
  // its rank gives up): the launcher waits for the ranks still waiting to say what they saw.
  const bool because_of_a_peer = dynamic_cast<const CollectiveTimedOut*>(&failure) ||
                                 dynamic_cast<const CollectivePeerLost*>(&failure);
  return because_of_a_peer ? kSmokeRankGaveUpExitCode : 3;
}

}  // namespace muster

// PMIx served to a node's ranks, as `srun --mpi=pmix` and PRRTE serve it: OpenPMIx's server
// library (libpmix.so.2, opened at run time, so that muster starts without it) holds the
// job's namespace, and each rank starts with what PMIx_server_setup_fork gives it. Open MPI
// 4.1 ranks (and mpi4py over them) then start as one world instead of N singletons.
#pragma once

#include <chrono>

#include <deque>
#include <tuple>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/local/fence_exchange.h"
#include "launcher/local/rank_service.h"

namespace muster {

struct PmixJob {
  std::string nspace;         // unique per job: Open MPI hashes it into its job id
  int size = 0;               // ranks in the job
  size_t this_node = 0;       // this node's index in `hosts`
  std::vector<std::string> hosts;           // every node of the job, node 0 first
  std::vector<std::vector<int>> node_ranks;  // each node's ranks, in local-rank order
};

// A PMIx server's directory ("muster-pmix-PID-XXXXXX", this user's) holds a lock file that
// its server holds an flock on for as long as it runs: the lock, not the pid in the name,
// says it is alive, since containers that share /tmp need not share a PID namespace.
inline constexpr const char* kPmixLockName = "muster.lock";
// How long a directory without its lock file yet is taken for a server that is starting.
inline constexpr std::chrono::seconds kPmixUnlockedGrace{600};

// Makes `dir`'s lock file and holds its lock; the descriptor (close-on-exec), or -1.
int hold_pmix_directory(const std::string& dir);

// Removes the PMIx servers' directories under `parent` whose lock no one holds: an agent
// killed outright (a lost node, SIGKILL) leaves its own behind. Each server removes those
// when it starts, so that no node collects them.
void remove_pmix_directories_of_dead_servers(const std::string& parent);

class PmixService : public RankService {
 public:
  // The service for `job`'s ranks on this node, or nullptr with the reason in `why_not`
  // (libpmix cannot be opened, its server will not start). Its fences across nodes go
  // through `exchange`, which outlives it.
  static std::unique_ptr<PmixService> start(const PmixJob& job, FenceExchange& exchange, std::string& why_not);
  ~PmixService() override;
  // Why PMIx cannot be served on this node ("" when it can): libpmix.so.2 is not there, or
  // is too old. Cheap: it looks for the library and starts no server.
  static std::string unavailable_here();
  // Starts this process's PMIx server now, once, so that a job does not wait for it: callers
  // start it beside other work. Returns why PMIx cannot be served here ("" when it can):
  // libpmix.so.2 is not there, is too old, or its server did not start. Given this machine's
  // hwloc topology (HwlocTopologySource::hwloc_topology()), the server keeps it and
  // does not discover the machine again (when that is worth it: pmix_may_borrow, agent.h).
  // Only the first call's topology counts: the server starts once.
  static std::string start_server(std::shared_ptr<void> hwloc_topology = nullptr);

  void prepare(int rank, ProcessSpec& spec) override;
  void spawned(int) override {}
  std::vector<int> descriptors() const override;
  std::vector<Event> serve() override;
  std::string waiting_on() const override;

  // From libpmix's thread: a rank called PMIx_Abort (MPI_Abort).
  void aborted(int rank, int status, std::string message);
  // From libpmix's thread: every rank here entered a fence of the whole job, with `data`
  // (their modex) to carry to the other nodes. `done` is libpmix's pmix_modex_cbfunc_t.
  using FenceDone = void (*)(int status, const char* data, size_t size, void* cbdata,
                             void (*release)(void*), void* release_data);
  void fenced_here(std::string data, FenceDone done, void* cbdata);
  // From libpmix's thread: a rank here asked for rank `rank`'s data, which no fence carried
  // (Open MPI's async modex): its node is asked, and `done` gets the answer.
  void wanted_from_elsewhere(int rank, FenceDone done, void* cbdata);
  // From libpmix's thread: this node's library answered another node's request for one of
  // its ranks' data.
  void answered_here(int request, int status, std::string data);

  struct Library;  // the server library's entry points

 private:
  PmixService(const Library& lib, PmixJob job, FenceExchange& exchange);
  void exchange_fences();
  void exchange_fetches();

  struct Fence {
    int number = 0;
    std::string data;  // this node's part, until it is contributed
    FenceDone done = nullptr;
    void* cbdata = nullptr;
    bool contributed = false;
  };

  const Library& lib_;
  PmixJob job_;
  FenceExchange& exchange_;
  void* info_ = nullptr;  // the namespace's info, kept until it is deregistered
  int wake_[2] = {-1, -1};  // a byte from libpmix's thread: an abort to report
  std::mutex mutex_;
  std::optional<Event> abort_;
  bool abort_said_ = false;
  std::deque<Fence> fences_;  // entered here, not yet completed; under mutex_
  int fences_begun_ = 0;      // under mutex_
  struct Fetch {
    int id = 0;
    int rank = 0;
    FenceDone done = nullptr;
    void* cbdata = nullptr;
    bool asked = false;
  };
  std::deque<Fetch> fetches_;  // ranks' requests for other nodes' data; under mutex_
  int fetches_begun_ = 0;      // under mutex_
  std::deque<std::tuple<int, int, std::string>> answers_;  // (request, status, data) for other nodes; under mutex_
};

}  // namespace muster

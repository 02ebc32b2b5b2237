// PMIx served to a node's ranks, as `srun --mpi=pmix` and PRRTE serve it: OpenPMIx's server
// library (libpmix.so.2, opened at run time, so that muster starts without it) holds the
// job's namespace, and each rank starts with what PMIx_server_setup_fork gives it. Open MPI
// 4.1 ranks (and mpi4py over them) then start as one world instead of N singletons.
#pragma once

#include <deque>
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
  std::string this_host;      // this node's name, as in `hosts`
  std::vector<std::string> hosts;           // every node of the job, node 0 first
  std::vector<std::vector<int>> node_ranks;  // each node's ranks, in local-rank order
};

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

  struct Library;  // the server library's entry points

 private:
  PmixService(const Library& lib, PmixJob job, FenceExchange& exchange);
  void exchange_fences();

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
};

}  // namespace muster

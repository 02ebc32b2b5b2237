// PMIx served to a node's ranks, as `srun --mpi=pmix` and PRRTE serve it: OpenPMIx's server
// library (libpmix.so.2, opened at run time, so that muster starts without it) holds the
// job's namespace, and each rank starts with what PMIx_server_setup_fork gives it. Open MPI
// 4.1 ranks (and mpi4py over them) then start as one world instead of N singletons.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

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
  // (libpmix cannot be opened, its server will not start, the job spans nodes).
  static std::unique_ptr<PmixService> start(const PmixJob& job, std::string& why_not);
  ~PmixService() override;

  void prepare(int rank, ProcessSpec& spec) override;
  void spawned(int) override {}
  std::vector<int> descriptors() const override;
  std::vector<Event> serve() override;
  std::string waiting_on() const override { return ""; }

  // From libpmix's thread: a rank called PMIx_Abort (MPI_Abort).
  void aborted(int rank, int status, std::string message);

  struct Library;  // the server library's entry points

 private:
  PmixService(const Library& lib, PmixJob job);

  const Library& lib_;
  PmixJob job_;
  void* info_ = nullptr;  // the namespace's info, kept until it is deregistered
  int wake_[2] = {-1, -1};  // a byte from libpmix's thread: an abort to report
  std::mutex mutex_;
  std::optional<Event> abort_;
  bool abort_said_ = false;
};

}  // namespace muster

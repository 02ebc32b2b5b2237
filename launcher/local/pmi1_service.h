// PMI-1 served to a node's ranks over a socket each (PMI_FD), as Hydra's proxy serves it:
// MPICH and Intel MPI programs then start as one world instead of N singletons.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/local/pmi1.h"
#include "launcher/local/rank_service.h"

namespace muster {

class Pmi1Service : public RankService {
 public:
  // Every node's puts since the last barrier, gathered from this node's: the job's barrier.
  // Where every rank is on this node, what it was given is all there is.
  using Exchange = std::function<std::map<std::string, std::string>(std::map<std::string, std::string> puts)>;

  // `local_ranks`: this node's ranks, each of which prepare() will be called for.
  Pmi1Service(Pmi1Job job, std::vector<int> local_ranks, Exchange exchange = {});
  ~Pmi1Service() override;

  void prepare(int rank, ProcessSpec& spec) override;
  void started() override;
  std::vector<int> descriptors() const override;
  std::vector<Event> serve() override;
  std::string waiting_on() const override;

 private:
  struct Connection {
    int ours = -1, theirs = -1;  // the socket's two ends; theirs is the rank's, until it starts
  };
  void close_connection(int rank);

  Pmi1Node node_;
  Exchange exchange_;
  std::map<int, Connection> connections_;
  bool abort_said_ = false;
};

}  // namespace muster

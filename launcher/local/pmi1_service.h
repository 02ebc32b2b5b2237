// PMI-1 served to a node's ranks over a socket each (PMI_FD), as Hydra's proxy serves it:
// MPICH and Intel MPI programs then start as one world instead of N singletons. A barrier
// goes through the job's fence exchange: the other nodes' puts come back with it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/local/fence_exchange.h"
#include "launcher/local/pmi1.h"
#include "launcher/local/rank_service.h"

namespace muster {

class Pmi1Service : public RankService {
 public:
  // `local_ranks`: this node's ranks, each of which prepare() will be called for.
  // `exchange` outlives the service.
  Pmi1Service(Pmi1Job job, std::vector<int> local_ranks, FenceExchange& exchange);
  ~Pmi1Service() override;
  Pmi1Service(const Pmi1Service&) = delete;
  Pmi1Service& operator=(const Pmi1Service&) = delete;

  void prepare(int rank, ProcessSpec& spec) override;
  void spawned(int rank) override;
  std::vector<int> descriptors() const override;
  std::vector<Event> serve() override;
  std::string waiting_on() const override;

 private:
  struct Connection {
    int ours = -1, theirs = -1;  // the socket's two ends; theirs is the rank's, until it starts
  };
  void close_connection(int rank, std::vector<Event>& events, const char* why);
  void exchange_barrier(std::vector<Event>& events);

  Pmi1Node node_;
  FenceExchange& exchange_;
  int contributed_ = -1;  // the barrier whose puts went to the exchange
  std::map<int, Connection> connections_;
  bool abort_said_ = false;
};

}  // namespace muster

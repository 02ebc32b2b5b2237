// PMI-1 served to a node's ranks over a socket each (PMI_FD), as Hydra's proxy serves it:
// MPICH and Intel MPI programs then start as one world instead of N singletons. Every rank
// of the job is on this node: its barrier has no other node to wait for.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/local/pmi1.h"
#include "launcher/local/rank_service.h"

namespace muster {

class Pmi1Service : public RankService {
 public:
  // `local_ranks`: this node's ranks, each of which prepare() will be called for.
  Pmi1Service(Pmi1Job job, std::vector<int> local_ranks);
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

  Pmi1Node node_;
  std::map<int, Connection> connections_;
  bool abort_said_ = false;
};

}  // namespace muster

// What a node's job serves its ranks beside their output: the process-management protocols
// MPI libraries start from (launcher/local/pmi1_service.h). The job's loop polls the
// service's descriptors with the ranks' pipes and lets it serve what is readable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/local/process_spawner.h"

namespace muster {

class RankService {
 public:
  virtual ~RankService() = default;

  // Before rank `rank` starts: what its process is given (variables, an inherited socket).
  virtual void prepare(int rank, ProcessSpec& spec) = 0;
  // Rank `rank` was started, or failed to: the service closes its copy of the rank's end
  // at once, so that muster holds one descriptor a rank, not two.
  virtual void spawned(int rank) = 0;
  virtual std::vector<int> descriptors() const = 0;

  // What serving found that the job must know: a rank that asked to abort the job, or one
  // that broke the protocol (its connection is closed; the rank fails on its own).
  struct Event {
    int rank = 0;
    std::string note;   // "rank 1 called MPI_Abort with code 7: ..."
    std::optional<int> abort_code;  // set: the rank asked to abort the job with this code
  };
  // Serves what is readable, without blocking.
  virtual std::vector<Event> serve() = 0;
  // On a timeout: what the ranks were waiting on in the service, if anything.
  virtual std::string waiting_on() const = 0;
};

// Several services served as one: PMIx and PMI-1 side by side, each rank given both, so
// that whichever its MPI library speaks is there.
class RankServices : public RankService {
 public:
  void add(std::unique_ptr<RankService> service) { services_.push_back(std::move(service)); }

  void prepare(int rank, ProcessSpec& spec) override {
    for (auto& s : services_) s->prepare(rank, spec);
  }
  void spawned(int rank) override {
    for (auto& s : services_) s->spawned(rank);
  }
  std::vector<int> descriptors() const override {
    std::vector<int> out;
    for (const auto& s : services_)
      for (int fd : s->descriptors()) out.push_back(fd);
    return out;
  }
  std::vector<Event> serve() override {
    std::vector<Event> out;
    for (auto& s : services_)
      for (auto& e : s->serve()) out.push_back(std::move(e));
    return out;
  }
  std::string waiting_on() const override {
    for (const auto& s : services_)
      if (std::string waiting = s->waiting_on(); !waiting.empty()) return waiting;
    return "";
  }

 private:
  std::vector<std::unique_ptr<RankService>> services_;
};

}  // namespace muster

// What a job's ranks are served for their MPI library to start them as one world (--mpi),
// and the whole job's map it takes: PMIx and PMI-1 both tell every rank where every other
// rank runs. The head makes it; each node (the local launcher, each agent) serves its ranks
// from it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/local/fence_exchange.h"
#include "launcher/local/rank_service.h"

namespace muster {

// PMIx from OpenPMIx's server library, as srun --mpi=pmix serves it (Open MPI, mpi4py);
// PMI-1 on a socket per rank, as MPICH's Hydra serves it (MPICH, Intel MPI); both (auto,
// where each can be); or nothing (each rank's MPI starts as a singleton, as with no launcher).
enum class MpiServe { Auto, Pmix, Pmi1, None };

// "pmix and pmi1", "pmi1", "nothing": what `serve` offers each rank, for plan and the hello.
std::string mpi_offer_text(MpiServe serve);

struct MpiWorld {
  MpiServe serve = MpiServe::Auto;
  std::string job_id;              // names the job's PMIx namespace and PMI key-value space
  // Each node of the job that holds ranks, by the name it gives itself (gethostname, which
  // PMIx compares with its own), in node order; and the index in it of each rank's node.
  std::vector<std::string> hosts;
  std::vector<int> node_of_rank;
  // Every node said it can serve PMIx: one that then cannot fails the job instead of leaving
  // the others' ranks to wait for its singletons.
  bool pmix_everywhere = false;
};

nlohmann::json mpi_world_json(const MpiWorld& world);
// Throws Error(Runtime) when the JSON is not a world, or one whose ranks name no node of it.
MpiWorld mpi_world_from_json(const nlohmann::json& j);

// The services for the ranks of node `node` (an index into world.hosts): PMIx and PMI-1,
// each where it can be (auto), or the one asked for; nullptr for MpiServe::None. Fences go
// through `exchange`, which outlives them. Throws Error(Runtime) when PMIx was asked for and
// cannot be served; with auto, PMIx that cannot be is said in `warnings`.
std::unique_ptr<RankService> serve_mpi(const MpiWorld& world, int node, FenceExchange& exchange,
                                       std::vector<std::string>& warnings);

}  // namespace muster

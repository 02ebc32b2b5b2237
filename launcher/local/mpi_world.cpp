#include "launcher/local/mpi_world.h"

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/pmi1_service.h"
#include "launcher/local/pmix_service.h"

namespace muster {

std::string mpi_offer_text(MpiServe serve) {
  switch (serve) {
    case MpiServe::Auto: return "pmix and pmi1";
    case MpiServe::Pmix: return "pmix";
    case MpiServe::Pmi1: return "pmi1";
    case MpiServe::None: break;
  }
  return "nothing";
}

namespace {

constexpr std::pair<MpiServe, const char*> kServeNames[] = {
    {MpiServe::Auto, "auto"}, {MpiServe::Pmix, "pmix"}, {MpiServe::Pmi1, "pmi1"}, {MpiServe::None, "none"}};

}  // namespace

nlohmann::json mpi_world_json(const MpiWorld& world) {
  std::string serve;
  for (const auto& [value, name] : kServeNames)
    if (value == world.serve) serve = name;
  return {{"serve", serve},
          {"job_id", world.job_id},
          {"hosts", world.hosts},
          {"node_of_rank", world.node_of_rank},
          {"pmix_everywhere", world.pmix_everywhere}};
}

MpiWorld mpi_world_from_json(const nlohmann::json& j) {
  MpiWorld world;
  try {
    const std::string serve = j.at("serve").get<std::string>();
    bool known = false;
    for (const auto& [value, name] : kServeNames)
      if (serve == name) world.serve = value, known = true;
    if (!known) throw Error(ErrorKind::Runtime, fmt::format("unknown MPI service '{}'", serve));
    world.job_id = j.at("job_id").get<std::string>();
    world.hosts = j.at("hosts").get<std::vector<std::string>>();
    world.node_of_rank = j.at("node_of_rank").get<std::vector<int>>();
    world.pmix_everywhere = j.at("pmix_everywhere").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Runtime, fmt::format("the job's MPI map is malformed: {}", e.what()));
  }
  for (int node : world.node_of_rank)
    if (node < 0 || size_t(node) >= world.hosts.size())
      throw Error(ErrorKind::Runtime, fmt::format("the job's MPI map puts a rank on node {} of {}", node,
                                                  world.hosts.size()));
  return world;
}

std::unique_ptr<RankService> serve_mpi(const MpiWorld& world, int node, FenceExchange& exchange,
                                       std::vector<std::string>& warnings) {
  if (world.serve == MpiServe::None) return nullptr;
  std::vector<std::vector<int>> node_ranks(world.hosts.size());
  for (size_t rank = 0; rank < world.node_of_rank.size(); ++rank)
    node_ranks[size_t(world.node_of_rank[rank])].push_back(int(rank));
  const std::vector<int>& here = node_ranks.at(size_t(node));
  const std::string name = "muster-" + world.job_id;
  const int size = int(world.node_of_rank.size());

  auto services = std::make_unique<RankServices>();
  if (world.serve != MpiServe::Pmi1) {
    std::string why_not;
    auto pmix = PmixService::start({name, size, size_t(node), world.hosts, node_ranks}, exchange, why_not);
    if (pmix) services->add(std::move(pmix));
    else if (world.serve == MpiServe::Pmix || world.pmix_everywhere)
      throw Error(ErrorKind::Runtime, fmt::format("{}: {}; nothing was started",
                                                  world.serve == MpiServe::Pmix ? "--mpi pmix" : "PMIx", why_not));
    else
      warnings.push_back(fmt::format("PMIx is not served ({}): Open MPI programs would start each rank "
                                     "as a world of one; --mpi pmi1 or none says what is meant", why_not));
  }
  if (world.serve != MpiServe::Pmix)
    services->add(std::make_unique<Pmi1Service>(Pmi1Job{name, size, pmi1_process_mapping(world.node_of_rank)},
                                                here, exchange));
  return services;
}

}  // namespace muster

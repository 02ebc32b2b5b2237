#include "topology/binding.h"

#include <algorithm>
#include <map>

namespace muster {
namespace {

bool contains_all(const std::vector<int>& set, const std::vector<int>& items) {
  return std::all_of(items.begin(), items.end(), [&](int c) {
    return std::binary_search(set.begin(), set.end(), c);
  });
}

}  // namespace

BindPolicy bind_policy_from_name(const std::string& name) {
  if (name == "none") return BindPolicy::None;
  if (name == "numa") return BindPolicy::Numa;
  return BindPolicy::Core;
}

const char* bind_policy_name(BindPolicy policy) {
  return policy == BindPolicy::None ? "none" : policy == BindPolicy::Numa ? "numa" : "core";
}

std::vector<RankBinding> plan_bindings(const Topology& topology,
                                       const std::vector<std::optional<int>>& gpu_of_local_rank,
                                       BindPolicy policy) {
  const size_t ranks = gpu_of_local_rank.size();
  std::vector<RankBinding> out(ranks);
  std::vector<std::vector<int>> domain(ranks);  // the CPUs each rank may use under Numa

  // Ranks without a GPU are spread in blocks over the NUMA nodes: 4 ranks on 2 nodes put
  // ranks 0-1 on node 0 and 2-3 on node 1, keeping neighbours (often peers) together.
  size_t without_gpu = 0;
  for (const auto& g : gpu_of_local_rank) without_gpu += !g;
  size_t spread_index = 0;
  for (size_t r = 0; r < ranks; ++r) {
    out[r].gpu = gpu_of_local_rank[r];
    if (out[r].gpu && size_t(*out[r].gpu) < topology.gpus.size()) {
      const PciLocation& loc = topology.gpus[size_t(*out[r].gpu)].location;
      out[r].numa = loc.numa;
      domain[r] = loc.cpus;
    } else if (!topology.numa_nodes.empty()) {
      size_t node = spread_index++ * topology.numa_nodes.size() / std::max<size_t>(1, without_gpu);
      out[r].numa = topology.numa_nodes[node].index;
      domain[r] = topology.numa_nodes[node].cpus;
    } else {
      domain[r] = topology.all_cpus();
    }
    std::sort(domain[r].begin(), domain[r].end());
  }
  if (policy == BindPolicy::None) return out;
  if (policy == BindPolicy::Numa) {
    for (size_t r = 0; r < ranks; ++r) out[r].cpus = domain[r];
    return out;
  }

  // Core: ranks sharing a domain split its cores into even contiguous blocks; with more
  // ranks than cores, cores are shared round-robin.
  std::map<std::vector<int>, std::vector<size_t>> ranks_of_domain;
  for (size_t r = 0; r < ranks; ++r) ranks_of_domain[domain[r]].push_back(r);
  for (const auto& [cpus, members] : ranks_of_domain) {
    std::vector<const std::vector<int>*> cores;
    for (const auto& core : topology.core_cpus)
      if (!core.empty() && contains_all(cpus, core)) cores.push_back(&core);
    if (cores.empty()) {
      for (size_t r : members) out[r].cpus = cpus;
      continue;
    }
    const size_t n = members.size(), c = cores.size();
    size_t next = 0;
    for (size_t k = 0; k < n; ++k) {
      size_t take = c >= n ? c / n + (k < c % n ? 1 : 0) : 1;
      std::vector<int>& mine = out[members[k]].cpus;
      for (size_t i = 0; i < take; ++i) {
        const auto& core = *cores[(next + i) % c];
        mine.insert(mine.end(), core.begin(), core.end());
      }
      next += take;
      std::sort(mine.begin(), mine.end());
    }
  }
  return out;
}

}  // namespace muster

// A TopologySource that hands out a fixed topology and counts how often it was asked.
#pragma once

#include "topology/topology_source.h"

namespace muster::testing {

class RecordingTopologySource : public TopologySource {
 public:
  explicit RecordingTopologySource(Topology topology) : topology_(std::move(topology)) {}
  Topology load() override {
    ++loads;
    return topology_;
  }
  int loads = 0;

 private:
  Topology topology_;
};

}  // namespace muster::testing

// One test cluster for every test of a suite: brought up before the suite's first test and
// removed after its last (a cluster takes seconds to bring up; its tests leave it as they
// found it). Skipped, or failed in CI, where this machine cannot host one. The suite's name
// ends in Cluster (see MUSTER_REQUIRE_TEST_CLUSTER_OF).
//
//   class SshCluster : public SharedCluster<SshCluster> { ... };  // cluster_ is its TestCluster
#pragma once

#include <gtest/gtest.h>

#include "tests/support/test_cluster.h"

namespace muster::testing {

template <class Suite, class Cluster = TestCluster, int kHosts = 4>
class SharedCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (Cluster::unavailable_reason().empty()) cluster_ = new Cluster(kHosts);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    MUSTER_REQUIRE_TEST_CLUSTER_OF(Cluster);
    ASSERT_NE(cluster_, nullptr);
  }
  static inline Cluster* cluster_ = nullptr;
};

}  // namespace muster::testing

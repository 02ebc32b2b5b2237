// What Gloo and NCCL would fall back to: a host's own name must resolve to an address a peer
// can reach, which a loopback one (Debian's 127.0.1.1 for the host's name) is not.
#include "probes/interfaces.h"

#include <gtest/gtest.h>

namespace muster {
namespace {

using std::chrono::milliseconds;

TEST(NameResolves, OnlyAnAddressOffLoopbackCounts) {
  EXPECT_EQ(name_resolves_within("localhost", milliseconds(2000)), false);
  EXPECT_EQ(name_resolves_within("127.0.1.1", milliseconds(2000)), false);
  EXPECT_EQ(name_resolves_within("10.1.2.3", milliseconds(2000)), true);
}

TEST(IsLoopback, KnowsTheWholeBlockAndIpv6) {
  EXPECT_TRUE(is_loopback("127.0.1.1"));
  EXPECT_TRUE(is_loopback("::1"));
  EXPECT_FALSE(is_loopback("10.88.0.1"));
}

}  // namespace
}  // namespace muster

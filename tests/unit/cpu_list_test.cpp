#include "topology/cpu_list.h"

#include <gtest/gtest.h>

#include "launcher/error.h"

namespace muster {
namespace {

TEST(CpuList, ParsesAndFormatsLinuxCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5,1,1"), (std::vector<int>{1, 5}));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({7}), "7");
}

TEST(CpuList, RejectsGarbage) {
  EXPECT_THROW(parse_cpu_list("3-1"), Error);
  EXPECT_THROW(parse_cpu_list("a"), Error);
  EXPECT_THROW(parse_cpu_list("1,,2"), Error);
}

}  // namespace
}  // namespace muster

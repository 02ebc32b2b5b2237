#include "launcher/local/line_buffer.h"

#include <gtest/gtest.h>

namespace muster {
namespace {

TEST(LineBuffer, JoinsLinesSplitAcrossReadsAndFlushesThePartialLast) {
  LineBuffer buffer;
  std::vector<std::string> lines;
  auto emit = [&](std::string_view l) { lines.emplace_back(l); };
  buffer.feed("hel", emit);
  EXPECT_TRUE(lines.empty());
  buffer.feed("lo\nwor", emit);
  buffer.feed("ld\n\nlast", emit);
  EXPECT_EQ(lines, (std::vector<std::string>{"hello", "world", ""}));
  buffer.finish(emit);
  EXPECT_EQ(lines.back(), "last");
  buffer.finish(emit);  // nothing pending any more
  EXPECT_EQ(lines.size(), 4u);
}

}  // namespace
}  // namespace muster

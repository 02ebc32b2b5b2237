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

TEST(LineBuffer, CarriageReturnsEndLinesSoProgressBarsComeThroughLive) {
  LineBuffer buffer;
  std::vector<std::string> lines;
  auto emit = [&](std::string_view l) { lines.emplace_back(l); };
  buffer.feed("\r 10%\r 20%", emit);
  EXPECT_EQ(lines, (std::vector<std::string>{" 10%"}));  // the first redraw had nothing before it
  buffer.feed("\r", emit);
  buffer.feed("\n", emit);  // "\r\n" split across reads is one line end
  buffer.feed("dos line\r\nnext\n", emit);
  EXPECT_EQ(lines, (std::vector<std::string>{" 10%", " 20%", "dos line", "next"}));
  EXPECT_EQ(buffer.split_lines(), 0u);
}

TEST(LineBuffer, ALineLongerThanTheLimitIsHandedOutInPiecesAndCounted) {
  LineBuffer buffer;
  std::vector<size_t> sizes;
  auto emit = [&](std::string_view l) { sizes.push_back(l.size()); };
  const std::string chunk(300 * 1024, 'x');
  for (int i = 0; i < 10; ++i) buffer.feed(chunk, emit);  // 3000 KiB without an end
  buffer.feed("\nshort\n", emit);
  const size_t mib = LineBuffer::kMaxLine;
  EXPECT_EQ(sizes, (std::vector<size_t>{mib, mib, 3000 * 1024 - 2 * mib, 5}));
  EXPECT_EQ(buffer.split_lines(), 1u);
  buffer.feed(std::string(mib + 10, 'y') + "\n", emit);  // in a single read too
  EXPECT_EQ(sizes.back(), 10u);
  EXPECT_EQ(buffer.split_lines(), 2u);
}

}  // namespace
}  // namespace muster

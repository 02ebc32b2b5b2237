// Pure pieces of remote launch: quoting, checksums, and the agent's wire format.
#include <gtest/gtest.h>

#include "launcher/agent_protocol.h"
#include "launcher/error.h"
#include "launcher/sha256.h"
#include "launcher/shell_quote.h"

namespace muster {
namespace {

TEST(ShellQuote, EveryArgumentIsOneInertWord) {
  EXPECT_EQ(shell_quote("plain"), "'plain'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_command({"echo", "a b", "$(x)", "`y`;z"}), "'echo' 'a b' '$(x)' '`y`;z'");
}

TEST(Sha256, MatchesTheStandardTestVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(AgentProtocol, FramesSurviveArbitraryPayloadsAndSplitReads) {
  const std::string tricky = "a line\nwith 'quotes' $(x) `y`; \xc3\xa9\n\0end";
  std::string wire = encode_frame({FrameKind::Out, 3, tricky}) + encode_frame({FrameKind::Stop, -1, ""});
  FrameReader reader;
  std::vector<Frame> frames;
  for (char c : wire) {  // one byte at a time: the worst split a channel can deliver
    reader.feed(std::string_view(&c, 1));
    while (auto f = reader.next()) frames.push_back(*f);
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].kind, FrameKind::Out);
  EXPECT_EQ(frames[0].rank, 3);
  EXPECT_EQ(frames[0].payload, tricky);
  EXPECT_EQ(frames[1].kind, FrameKind::Stop);
}

TEST(AgentProtocol, SomethingElseOnTheChannelIsAClearError) {
  FrameReader reader;
  reader.feed("bash: muster: command not found\n");
  EXPECT_THROW(reader.next(), Error);
}

}  // namespace
}  // namespace muster

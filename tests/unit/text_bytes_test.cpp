// Bytes that are not UTF-8: carried exactly by muster's protocol, replaced (and counted) in
// reports, where JSON and XML cannot hold them.
#include <gtest/gtest.h>

#include "launcher/remote/launch_spec.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

using nlohmann::json;

TEST(TextBytes, Utf8IsToldFromWhatIsNot) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("plain \xc3\xa9t\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_utf8("caf\xe9"));             // Latin-1
  EXPECT_FALSE(is_utf8("\xc0\xaf"));            // an overlong '/'
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));        // a surrogate
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));    // past U+10FFFF
  EXPECT_FALSE(is_utf8("\xe2\x9c"));            // cut short
}

// Any bytes, in values and in keys, come back as they went, however JSON would take them.
TEST(TextBytes, TheProtocolCarriesAnyBytesExactly) {
  const std::string latin1 = "caf\xe9", nul_first = std::string("\0x", 2), utf8 = "\xc3\xa9t\xc3\xa9";
  json sent = {{"argv", {latin1, utf8, nul_first, ""}}, {"env", {{"K\xe9Y", latin1}, {"OK", utf8}}}, {"n", 3}};
  const std::string wire = bytes_kept(sent).dump();  // throws if any string were not UTF-8
  EXPECT_TRUE(is_utf8(wire));
  EXPECT_EQ(exactly_restored(json::parse(wire)), sent);
  EXPECT_EQ(bytes_kept(json{{"a", utf8}}), (json{{"a", utf8}})) << "UTF-8 goes as itself";
}

TEST(TextBytes, Base64CarriesAnyBytesAndRefusesWhatIsNotBase64) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");  // RFC 4648's examples
  std::string all;
  for (int i = 0; i < 256; ++i) all += char(i);
  for (size_t n = 0; n < 6; ++n) EXPECT_EQ(base64_decode(base64_encode(all.substr(n))), all.substr(n));
  EXPECT_EQ(base64_decode("Zm9"), std::nullopt);
  EXPECT_EQ(base64_decode("Zm=v"), std::nullopt);
  EXPECT_EQ(base64_decode("Zg==Zg=="), std::nullopt);
  EXPECT_EQ(base64_decode("Z!=="), std::nullopt);
}

TEST(TextBytes, ASpecAndADoneReportKeepEveryByteOfArgvEnvironmentAndCommandLines) {
  NodeLaunchSpec sent;
  sent.node = {0, 1, 1, {{0, 0, 0, "n1", std::nullopt}}};
  sent.request.argv = {"ls", "/data/r\xe9sum\xe9.txt"};
  sent.request.workdir = "/scratch/\xe9t\xe9";
  sent.request.job.exports = {{"LATIN", "caf\xe9"}};
  NodeLaunchSpec got = node_launch_spec_from_json(to_json(sent));
  EXPECT_EQ(got.request.argv, sent.request.argv);
  EXPECT_EQ(got.request.workdir, sent.request.workdir);
  EXPECT_EQ(got.request.job.exports, sent.request.job.exports);

  NodeRunReport done;
  done.notes = {"rank 0 left 'cat r\xe9sum\xe9.txt' behind"};
  done.stuck = {{0, "pid 7: cat r\xe9sum\xe9.txt"}};
  NodeRunReport back = node_run_report_from_json(to_json(done));
  EXPECT_EQ(back.notes, done.notes);
  ASSERT_EQ(back.stuck.size(), 1u);
  EXPECT_EQ(back.stuck[0].description, done.stuck[0].description);
}

TEST(TextBytes, ReportsReplaceWhatTheirMarkupCannotHoldAndCountIt) {
  ReportText json_text = report_text("r\xe9glage \x7f ok\t\xc3\xa9", ReportMarkup::Json);
  EXPECT_EQ(json_text.text, "r\xef\xbf\xbdglage \x7f ok\t\xc3\xa9");
  EXPECT_EQ(json_text.replaced, 1u);
  ReportText xml = report_text("r\xe9glage \x7f\x01 ok\t\n\r\xc3\xa9", ReportMarkup::Xml);
  EXPECT_EQ(xml.text, "r\xef\xbf\xbdglage \xef\xbf\xbd\xef\xbf\xbd ok\t\n\r\xc3\xa9");
  EXPECT_EQ(xml.replaced, 3u);

  const std::string text = report_json_text({{"reason", "caf\xe9 \xe9t\xe9"}}, -1);
  json back = json::parse(text);
  EXPECT_EQ(back["reason"], "caf\xef\xbf\xbd \xef\xbf\xbdt\xef\xbf\xbd");
  EXPECT_EQ(back["replaced_bytes"]["count"], 3);
  EXPECT_EQ(json::parse(report_json_text({{"reason", "fine"}}, -1)).count("replaced_bytes"), 0u);
}

// Part of a node's output is kept (its first or last KiB): never half a character, which a
// report would then count as a byte it replaced.
TEST(TextBytes, ACutNeverSplitsACharacter) {
  const std::string text = "a\xc3\xa9\xe2\x9c\x93z";  // a, é (2 bytes), ✓ (3 bytes), z
  EXPECT_EQ(character_boundary(text, 2, true), 3u);   // inside é: after it
  EXPECT_EQ(character_boundary(text, 2, false), 1u);  // inside é: before it
  EXPECT_EQ(character_boundary(text, 4, true), 6u);   // inside ✓
  EXPECT_EQ(character_boundary(text, 5, false), 3u);
  EXPECT_EQ(character_boundary(text, 3, true), 3u);   // already between characters
  EXPECT_EQ(character_boundary(text, text.size(), true), text.size());
  EXPECT_TRUE(is_utf8(text.substr(character_boundary(text, 4, true))));
  EXPECT_TRUE(is_utf8(text.substr(0, character_boundary(text, 4, false))));
}

// A node's first words, read in pieces: kept up to the limit, cut between characters, and
// never spliced with a later piece once cut.
TEST(TextBytes, FirstWordsAreKeptWholeAndNeverSplicedWithLaterOnes) {
  std::string kept;
  keep_first_words(kept, "abc", 8);
  EXPECT_EQ(kept, "abc");
  keep_first_words(kept, "def\xe2\x9c\x93gh", 8);  // ✓ would straddle the limit: cut before it
  EXPECT_EQ(kept, "abcdef");
  keep_first_words(kept, "\x93z", 8);               // a later piece adds nothing
  EXPECT_EQ(kept, "abcdef");
  EXPECT_TRUE(is_utf8(kept));
}

TEST(TextBytes, APayloadNestedDeeperThanAnyOfMustersIsRefused) {
  std::string deep(1000, '[');
  deep += std::string(1000, ']');
  EXPECT_THROW(exactly_restored(json::parse(deep)), json::exception);
}

}  // namespace
// JUnit's and the HTML page's one escaping: entities both read, invalid bytes counted.
TEST(TextBytes, MarkupTextEscapesForXmlAndHtmlAlike) {
  const ReportText t = markup_text("a<b & \"c\" 'd'>\xff");
  EXPECT_EQ(t.text, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;\xEF\xBF\xBD");
  EXPECT_EQ(t.replaced, 1u);
}

}  // namespace muster

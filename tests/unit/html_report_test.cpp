// The HTML page drawn from JSON reports (the shapes --json prints): the verdict first, a
// heatmap cell per ordered pair with failing nodes and slow links outlined, a row per node past
// 64 nodes, the grid of checks, smoke's curves, and every string from outside kept as text.
#include "cli/html/html_report.h"

#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace muster::cli {
namespace {

using json = nlohmann::json;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A ping report of `n` hosts, every pair at 10 Gbit/s and 50 us, but host `slow` at 0.03.
json ping_report(size_t n, std::optional<size_t> slow, const std::string& name = "node") {
  json nodes = json::array(), pairs = json::array(), problems = json::array();
  for (size_t i = 0; i < n; ++i) nodes.push_back({{"host", fmt::format("{}{}", name, i)}});
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const bool capped = slow && (i == *slow || j == *slow);
      pairs.push_back({{"src", fmt::format("{}{}", name, i)}, {"dst", fmt::format("{}{}", name, j)},
                       {"interface", "eth0"}, {"reachable", true},
                       {"rtt_us", {{"min", 40}, {"median", capped ? 900 : 50}, {"p99", 60}, {"samples", 20}}},
                       {"bandwidth_gbps", capped ? 0.03 : 10.0}});
    }
  if (slow)
    problems.push_back({{"severity", "fail"}, {"check", "bandwidth"}, {"node", fmt::format("{}{}", name, *slow)},
                        {"message", "slow"}});
  return {{"nodes", nodes}, {"pairs", pairs}, {"problems", problems}, {"passed", !slow}};
}

TEST(HtmlReport, AHeatmapHasACellPerOrderedPairAndOutlinesTheFailingNode) {
  const std::string page = html_report(ping_report(6, 2), "ping");
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(page, "<rect class=\"cell"), 2u * 6 * 5) << "bandwidth and RTT, 30 ordered pairs each";
  // The failing node's row and column, in both heatmaps, and its labels.
  EXPECT_EQ(count(page, "class=\"outline failing\" data-node=\"node2\""), 4u);
  EXPECT_EQ(count(page, "<text class=\"label failing row\""), 2u);
  EXPECT_EQ(count(page, "<text class=\"label failing column\""), 2u);
  EXPECT_NE(page.find("node2 \u2192 node0: 0.03 Gbit/s (0.00x the median)"), std::string::npos);
  // The verdict first, before any heatmap.
  EXPECT_LT(page.find("id=\"verdict\""), page.find("id=\"bandwidth\""));
  EXPECT_NE(page.find("<span class=\"verdict fail\">FAIL</span>"), std::string::npos);
  // Self-contained: nothing fetched, nothing run.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(HtmlReport, ASlowLinkIsOutlinedBothWaysAndNamed) {
  json report = ping_report(4, std::nullopt);
  report["problems"].push_back({{"severity", "fail"}, {"check", "bandwidth"}, {"node", nullptr},
                                {"message", "the link node1 <-> node3 is slow"}, {"link", {"node1", "node3"}}});
  const std::string page = html_report(report, "ping");
  EXPECT_EQ(count(page, "<rect class=\"link\""), 2u * 2) << "both directions, in both heatmaps";
  EXPECT_NE(page.find("Slow link: node1 \u2194 node3."), std::string::npos);
  EXPECT_EQ(count(page, "outline failing"), 0u) << "no node failed";
}

TEST(HtmlReport, PastSixtyFourNodesEachNodeIsARowAndEveryPairIsInTheTable) {
  const std::string page = html_report(ping_report(80, 7), "ping");
  EXPECT_EQ(count(page, "<rect class=\"cell"), 0u);
  EXPECT_EQ(count(page, "<tr class=\"failing\"><th>node7</th>"), 2u);
  EXPECT_EQ(count(page, "<td class=s>"), 2u * 2 * 79) << "node7's sends and receives, bandwidth and RTT";
}

TEST(HtmlReport, HostileNamesAndOutputStayText) {
  const std::string evil = "<img src=x onerror=alert(1)>";
  json report = ping_report(3, 1, evil);
  report["problems"].push_back({{"severity", "warn"}, {"check", "rtt"}, {"node", nullptr},
                                {"message", "\"quoted' & <b>bold</b>\xff\x01"}});
  const std::string page = html_report(report, "ping");
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos);
  EXPECT_NE(page.find("&lt;img src=x onerror=alert(1)&gt;1"), std::string::npos);
  EXPECT_NE(page.find("&quot;quoted&#39; &amp; &lt;b&gt;bold&lt;/b&gt;\xef\xbf\xbd\xef\xbf\xbd"), std::string::npos)
      << "bytes that are not UTF-8, and controls, become U+FFFD";
  EXPECT_EQ(html_text("a\x01" "b"), "a\xef\xbf\xbd" "b");
}

// A doctor report: failures before warnings, each with its finding's words; a grid row per
// node and a column per check, each status as a word; the network under "network"; the paths.
TEST(HtmlReport, ADoctorReportShowsItsFindingsGridNetworkAndPaths) {
  json checks = json::array();
  for (int n = 0; n < 3; ++n) {
    const std::string node = fmt::format("node{}", n);
    checks.push_back({{"stage", "ssh"}, {"name", "reach"}, {"node", node}, {"status", "pass"}, {"reason", "ok"}});
    checks.push_back({{"stage", "health"}, {"name", "ib_port"}, {"node", node},
                      {"status", n == 1 ? "warn" : "pass"}, {"reason", n == 1 ? "mlx5_1 DOWN" : "ok"}});
  }
  checks[5]["status"] = "fail";
  checks[5]["finding"] = {{"status", "fail"}, {"device", "mlx5_0"}, {"observed", "port 1: DOWN"},
                          {"expected", "ACTIVE"}, {"expected_from", "record"}, {"remedy", "reseat the cable"}};
  checks[3]["finding"] = {{"status", "unknown"}, {"device", "mlx5_1"}, {"observed", "cannot read"},
                          {"expected", ""}, {"expected_from", ""}, {"remedy", ""}};
  json report = {{"schema", "muster-doctor/1"}, {"muster_version", "9.9"}, {"cluster", "c.yaml"},
                 {"status", "fail"}, {"duration_s", 1.5}, {"checks", checks}, {"stages", json::array()},
                 {"network", ping_report(3, std::nullopt)},
                 {"topology", {{{"hosts", {"node0", "node1"}}, {"gpu_models", {"H100"}},
                                {"devices", {"GPU0", "GPU1", "mlx5_0"}},
                                {"rows", {{"X", "NV18", "PIX"}, {"NV18", "X", "SYS"}}},
                                {"nearest_nics", {{"mlx5_0"}, {}}}}}}};
  const std::string page = html_report(report, "doctor");
  const size_t fail = page.find("reseat the cable"), unknown = page.find("cannot read");
  ASSERT_NE(fail, std::string::npos);
  ASSERT_NE(unknown, std::string::npos);
  EXPECT_LT(fail, unknown) << "failures first";
  EXPECT_NE(page.find("<td class=\"unknown\" title=\"mlx5_1 DOWN\">UNKNOWN</td>"), std::string::npos)
      << "an unknown health finding is unknown, not warn";
  EXPECT_EQ(count(page, "<td class=\"pass\">PASS</td>"), 4u);
  EXPECT_NE(page.find("<th>health: ib_port</th>"), std::string::npos);
  EXPECT_EQ(count(page, "<rect class=\"cell"), 2u * 6);
  EXPECT_NE(page.find("<td style=\"background:#1a9850\">NV18</td>"), std::string::npos);
  EXPECT_NE(page.find("2 nodes: node0, node1"), std::string::npos);
}

TEST(HtmlReport, SmokesBusbwIsALinePerCollectiveWithTheExpectedLine) {
  json results = json::array();
  for (const char* op : {"all_reduce", "all_gather"})
    for (int bytes = 1024; bytes <= 1 << 20; bytes *= 4)
      results.push_back({{"group", "world"}, {"op", op}, {"bytes", bytes}, {"busbw_gbps", bytes / 100000.0}});
  const json report = {{"results", results}, {"problems", json::array()}, {"passed", true}, {"min_busbw_gbps", 5}};
  const std::string page = html_report(report, "smoke");
  EXPECT_EQ(count(page, "<path d=\"M"), 2u);
  EXPECT_EQ(count(page, "<circle"), 2u * 6);
  EXPECT_NE(page.find("class=\"expected\""), std::string::npos);
  EXPECT_NE(page.find("<span class=\"verdict pass\">PASS</span>"), std::string::npos);
}

}  // namespace
}  // namespace muster::cli

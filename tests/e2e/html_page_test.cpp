// The HTML page in a real browser (Debian's chromium, headless): what a report that names a
// node after markup leaves in the DOM. The test cluster's page, with one capped host, is in
// ping_cluster_test.cpp (PingCluster.TheHtmlPage...).
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/html/html_report.h"
#include "tests/support/chromium.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

size_t count(const std::string& text, const std::string& what) { return occurrences(text, what); }

// A node named as markup, in a fake report: the browser shows the name and builds no
// element of it, runs nothing, and the page asks for nothing from the network.
TEST(HtmlInChromium, ANodeNamedAsMarkupStaysText) {
  if (const std::string why = chromium_unavailable(); !why.empty()) {
    if (in_ci()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const std::string evil = "<img src=x onerror=alert(1)>";
  nlohmann::json nodes = nlohmann::json::array(), pairs = nlohmann::json::array();
  const std::vector<std::string> hosts = {"node1", evil, "node3"};
  for (const auto& h : hosts) nodes.push_back({{"host", h}});
  for (const auto& a : hosts)
    for (const auto& b : hosts)
      if (a != b) pairs.push_back({{"src", a}, {"dst", b}, {"bandwidth_gbps", a == evil || b == evil ? 0.02 : 9.5},
                                   {"rtt_us", {{"median", 40}}}});
  const nlohmann::json report = {
      {"nodes", nodes}, {"pairs", pairs}, {"passed", false},
      {"problems", {{{"severity", "fail"}, {"check", "bandwidth"}, {"node", evil}, {"message", evil + " is slow"}}}}};
  TempDir dir;
  dir.write("page.html", muster::cli::html_report(report, "ping"));
  const auto dom = chromium_dom(dir.file("page.html"));
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_EQ(count(dom.out, "<img"), 0u) << "an element was made of a node's name";
  EXPECT_GE(count(dom.out, "&lt;img src=x onerror=alert(1)&gt;"), 4u) << "the name is shown as text";
  EXPECT_EQ(count(dom.out, "<rect class=\"cell"), 2u * 6);
  EXPECT_EQ(count(dom.out, "<script"), 0u);
}

}  // namespace
}  // namespace muster::testing

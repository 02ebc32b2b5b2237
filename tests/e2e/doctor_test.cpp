// muster doctor on this machine and on the test cluster, with its JSON validated against the
// documented schema and its JUnit parsed as XML.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "tests/support/build_paths.h"
#include "tests/support/chromium.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Runs the schema and XML check; returns its output ("ok N F S" then testcase names).
std::string check_reports(const TempDir& dir) {
  if (run_command({"/usr/bin/python3", "-c", "import jsonschema"}).exit_code != 0) {
    if (in_ci()) ADD_FAILURE() << "python3-jsonschema is missing; .ci/run installs it";
    return "skipped";
  }
  auto r = run_command({"/usr/bin/python3", source_path("/tests/e2e/check_doctor_reports.py"),
                        source_path("/share/doctor.schema.json"), dir.file("report.json"),
                        dir.file("report.xml")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// Checks a --prometheus file with tests/e2e/check_prometheus.py; returns its samples as
// [name, labels, value] (null when the check could not run).
nlohmann::json check_prometheus(const std::string& path) {
  if (run_command({"/usr/bin/python3", "-c", "import prometheus_client"}).exit_code != 0) {
    if (in_ci()) ADD_FAILURE() << "python3-prometheus-client is missing; .ci/run installs it";
    return nullptr;
  }
  auto r = run_command({"/usr/bin/python3", source_path("/tests/e2e/check_prometheus.py"), path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json(nullptr);
}

// The value of the sample named `name` whose labels include all of `labels`, if one.
std::optional<double> sample_value(const nlohmann::json& samples, const std::string& name,
                                   const std::map<std::string, std::string>& labels) {
  for (const auto& s : samples) {
    if (s[0] != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all &= s[1].contains(k) && s[1][k] == v;
    if (all) return s[2].get<double>();
  }
  return std::nullopt;
}

const nlohmann::json* find_check(const nlohmann::json& report, const std::string& stage,
                                 const std::string& name, const std::string& node = "") {
  for (const auto& c : report["checks"])
    if (c["stage"] == stage && c["name"] == name && (node.empty() || c["node"] == node)) return &c;
  return nullptr;
}

TEST(Doctor, ThisMachinePassesAndItsReportsFollowTheSchema) {
  TempDir dir;
  auto r = run_muster({"doctor", "--json", dir.file("report.json"), "--junit", dir.file("report.xml")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto report = read_json(dir.file("report.json"));
  EXPECT_EQ(report["status"], "pass");
  std::vector<std::string> stages;
  for (const auto& s : report["stages"]) stages.push_back(s["name"]);
  EXPECT_EQ(stages, (std::vector<std::string>{"cluster", "ssh", "topology", "health", "network", "launch", "smoke"}));
  ASSERT_NE(find_check(report, "smoke", "all_reduce"), nullptr);
  EXPECT_EQ((*find_check(report, "smoke", "all_reduce"))["status"], "pass");
  // This machine has no GPU and at least two cores: two CPU ranks, so that a collective
  // crosses a process boundary, and the reason says why.
  const std::string launched = (*find_check(report, "launch", "ranks"))["reason"];
  EXPECT_NE(launched.find("2 ranks on 1 node started and exited 0 (2 ranks on "), std::string::npos) << launched;
  EXPECT_NE(launched.find("it has no GPU"), std::string::npos) << launched;
  const std::string smoked = (*find_check(report, "smoke", "all_reduce"))["reason"];
  EXPECT_NE(smoked.find("over 2 ranks"), std::string::npos) << smoked;
  const std::string machine = (*find_check(report, "topology", "machine"))["reason"];
  EXPECT_NE(machine.find(", no GPUs, "), std::string::npos) << machine;
  std::string checked = check_reports(dir);
  if (checked != "skipped") {
    EXPECT_EQ(checked.rfind("ok ", 0), 0u) << checked;
  }
  EXPECT_NE(r.out.find("PASS in"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\033["), std::string::npos);  // no colour when not a terminal
}

// The textfile node_exporter reads: valid exposition format (checked by an independent
// parser), label values escaped, one status per check, and what was measured in base units.
TEST(Doctor, PrometheusTextfileIsValidWithItsLabelsEscaped) {
  TempDir dir;
  // A cluster name with every character the format escapes.
  dir.write("cluster.yaml", "name: 'lab \"east\" \\ 1'\nnodes:\n  - host: localhost\n");
  auto r = run_muster({"doctor", "-f", dir.file("cluster.yaml"), "--prometheus", dir.file("muster.prom")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json samples = check_prometheus(dir.file("muster.prom"));
  if (samples.is_null()) return;
  const std::string cluster = "lab \"east\" \\ 1";
  EXPECT_EQ(sample_value(samples, "muster_doctor_status", {{"cluster", cluster}}), 0.0) << samples.dump();
  EXPECT_EQ(sample_value(samples, "muster_doctor_check_status",
                         {{"stage", "smoke"}, {"check", "all_reduce"}, {"node", ""}}), 0.0);
  EXPECT_EQ(sample_value(samples, "muster_doctor_check_status", {{"stage", "ssh"}}), 3.0);  // skip
  auto busbw = sample_value(samples, "muster_doctor_busbw_bytes_per_second", {{"check", "all_reduce"}});
  ASSERT_TRUE(busbw.has_value()) << samples.dump();
  EXPECT_GT(*busbw, 0);
  EXPECT_GT(*sample_value(samples, "muster_doctor_last_run_timestamp_seconds", {}), 1.7e9);
  // Written beside its name and renamed: nothing else is left in the directory.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2u);
}

TEST(Doctor, OnATerminalProgressIsRedrawnAndColourFollowsNoColor) {
  // script(1) gives muster a pseudo-terminal, as an engineer's shell would.
  const std::string command = std::string(muster_binary()) + " doctor";
  auto tty = run_command({"script", "-qec", command, "/dev/null"});
  ASSERT_EQ(tty.exit_code, 0) << tty.out << tty.err;
  EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos);         // the progress line redrawn
  EXPECT_NE(tty.out.find("\033[32mPASS\033[0m"), std::string::npos);  // coloured status
  // Each result once: the progress is replaced stage after stage, and the table says them.
  EXPECT_EQ(tty.out.find("doctor: smoke pass"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("smoke     hello"), std::string::npos) << tty.out;
  auto plain = run_command({"script", "-qec", command, "/dev/null"}, {"NO_COLOR=1"});
  EXPECT_EQ(plain.out.find("\033[32m"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("PASS in"), std::string::npos);
}

// The table fits 80 columns: a long REASON wraps under itself; --json keeps it whole.
TEST(Doctor, TheTableFitsEightyColumnsAndJsonKeepsEachReasonWhole) {
  TempDir dir;
  auto r = run_muster({"doctor", "--json", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = read_json(dir.file("report.json"));
  for (const auto& c : report["checks"])
    EXPECT_EQ(c["reason"].get<std::string>().find('\n'), std::string::npos) << c.dump();
  ASSERT_NE(r.out.find("STAGE "), std::string::npos) << r.out;  // the report went to its file
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
}

TEST(Doctor, OnlyAndSkipSelectStagesAndUnknownStagesAreUsageErrors) {
  TempDir dir;
  auto r = run_muster({"doctor", "--only", "cluster,topology", "--json", dir.file("report.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto report = read_json(dir.file("report.json"));
  for (const auto& s : report["stages"])
    EXPECT_EQ(s["status"] == "skip", s["name"] != "cluster" && s["name"] != "topology") << s.dump();
  auto bad = run_muster({"doctor", "--skip", "smok"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown stage 'smok'"), std::string::npos) << bad.err;
}

// --json and --junit print when given no file, as every other command's --json does; an
// option after them is never taken for the file to write.
TEST(Doctor, ReportsPrintWithoutAFileAndAnOptionIsNeverTakenForOne) {
  TempDir dir;
  dir.write("c.yaml", "nodes:\n  - host: localhost\n");
  auto json = run_muster({"doctor", "--json", "-f", dir.file("c.yaml"), "--only", "cluster"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  auto report = nlohmann::json::parse(json.out);  // stdout is the report alone
  EXPECT_EQ(report["checks"][0]["reason"], dir.file("c.yaml") + ": 1 node") << json.out;
  EXPECT_NE(json.err.find("PASS in"), std::string::npos) << json.err;  // the table, on stderr

  auto junit = run_muster({"doctor", "--only", "cluster", "--junit", "-"});
  EXPECT_EQ(junit.exit_code, 0) << junit.err;
  EXPECT_EQ(junit.out.rfind("<?xml", 0), 0u) << junit.out;

  auto prom = run_muster({"doctor", "--prometheus", "-f", dir.file("c.yaml")});
  EXPECT_EQ(prom.exit_code, 2);
  EXPECT_NE(prom.err.find("--prometheus: '-f' is not a file to write to"), std::string::npos) << prom.err;
  EXPECT_FALSE(std::filesystem::exists("-f"));  // relative to the directory muster ran in

  auto both = run_muster({"doctor", "--json", "--junit", "--only", "cluster"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("cannot both print to standard output"), std::string::npos) << both.err;
}

TEST(Doctor, AnInvalidClusterFileIsAConfigurationError) {
  TempDir dir;
  dir.write("c.yaml", "nodes:\n  - hots: a\n");
  auto r = run_muster({"doctor", "-f", dir.file("c.yaml"), "--json", dir.file("report.json")});
  EXPECT_EQ(r.exit_code, 2);
  auto report = read_json(dir.file("report.json"));
  EXPECT_NE((*find_check(report, "cluster", "cluster file"))["reason"].get<std::string>().find(
                "unknown key 'hots' in a node entry, did you mean 'host'?"), std::string::npos);
  // Every later stage names the stage that failed, not the one between that was skipped.
  for (const auto& s : report["stages"]) {
    if (s["name"] != "cluster") {
      EXPECT_EQ(s["status"], "skip");
      EXPECT_EQ(s["reason"], "skipped: the cluster stage failed") << s.dump();
    }
  }
}

class DoctorCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    MUSTER_REQUIRE_TEST_CLUSTER();
    cluster_ = std::make_unique<TestCluster>(4);
  }
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(DoctorCluster, EveryStagePassesOnAHealthyCluster) {
  TempDir dir;
  std::vector<int> before;
  for (int i = 0; i < 4; ++i) before.push_back(cluster_->accepted_connections(i));
  auto r = cluster_->muster({"doctor", "-f", cluster_->write_cluster_file("launch:\n  slots: 2\n"),
                             "--json", dir.file("report.json"), "--junit", dir.file("report.xml"),
                             "--prometheus", dir.file("muster.prom")}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto report = read_json(dir.file("report.json"));
  for (const auto& s : report["stages"]) EXPECT_EQ(s["status"], "pass") << s.dump();
  // Per node: its status, its round-trip time to its peers and its clock, in seconds.
  nlohmann::json samples = check_prometheus(dir.file("muster.prom"));
  for (int i = 0; !samples.is_null() && i < 4; ++i) {
    const std::string node = cluster_->host(i);
    EXPECT_EQ(sample_value(samples, "muster_doctor_check_status", {{"check", "pairs"}, {"node", node}}), 0.0);
    auto rtt = sample_value(samples, "muster_doctor_rtt_median_seconds", {{"node", node}});
    ASSERT_TRUE(rtt.has_value()) << node << samples.dump();
    EXPECT_GT(*rtt, 0);
    EXPECT_LT(*rtt, 1);  // seconds, not microseconds
    EXPECT_TRUE(sample_value(samples, "muster_doctor_clock_offset_seconds", {{"node", node}}).has_value());
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_NE(find_check(report, "ssh", "reach", cluster_->host(i)), nullptr);
    EXPECT_EQ((*find_check(report, "network", "pairs", cluster_->host(i)))["status"], "pass");
  }
  std::string junit = check_reports(dir);
  if (junit != "skipped") {
    EXPECT_NE(junit.find("muster.ssh/reach [node3]"), std::string::npos) << junit;
  }
  // Every stage ran over one session: each host's sshd accepted exactly one connection.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(cluster_->accepted_connections(i) - before[size_t(i)], 1) << cluster_->host(i);
}

TEST_F(DoctorCluster, AHostDownFailsItselfWhileTheRestAreChecked) {
  cluster_->stop_sshd(2);
  TempDir dir;
  auto r = cluster_->muster({"doctor", "-f", cluster_->write_cluster_file(), "--json",
                             dir.file("report.json"), "--junit", dir.file("report.xml")}, 300);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = read_json(dir.file("report.json"));
  EXPECT_EQ((*find_check(report, "ssh", "reach", "node3"))["status"], "fail");
  EXPECT_NE((*find_check(report, "ssh", "reach", "node3"))["reason"].get<std::string>().find(
                "connection refused"), std::string::npos);
  for (const char* other : {"node1", "node2", "node4"}) {
    EXPECT_EQ((*find_check(report, "ssh", "reach", other))["status"], "pass") << other;
    EXPECT_EQ((*find_check(report, "network", "pairs", other))["status"], "pass") << other;
  }
  std::string junit = check_reports(dir);
  if (junit != "skipped") {
    EXPECT_NE(junit.find("muster.ssh/reach [node3]"), std::string::npos) << junit;
  }
}

// A node whose site wrapper refuses every command in words that are not UTF-8 (a Latin-1
// message, with DEL in it): the reports are whole, valid, and say what they replaced.
TEST_F(DoctorCluster, ANodeWhoseWordsAreNotUtf8StillGivesCompleteReports) {
  TempDir dir;
  HostSetup setup;
  setup.force_command = "printf 'r\\351glage \\177manquant\\n' >&2; exit 1";
  cluster_->set_up_host(2, setup);
  auto r = cluster_->muster({"doctor", "-f", cluster_->write_cluster_file(), "--json",
                             dir.file("report.json"), "--junit", dir.file("report.xml")}, 300);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = read_json(dir.file("report.json"));
  const nlohmann::json* reach = find_check(report, "ssh", "reach", "node3");
  ASSERT_NE(reach, nullptr) << report.dump();
  EXPECT_EQ((*reach)["status"], "fail");
  EXPECT_NE((*reach)["reason"].get<std::string>().find("r\xEF\xBF\xBDglage"), std::string::npos) << (*reach)["reason"];
  EXPECT_GE(report["replaced_bytes"]["count"].get<int>(), 1) << report.dump();
  check_reports(dir);  // the schema, and the XML as CI parsers read it
  std::ifstream xml_file(dir.file("report.xml"));
  const std::string junit{std::istreambuf_iterator<char>(xml_file), {}};
  EXPECT_NE(junit.find("r\xEF\xBF\xBDglage \xEF\xBF\xBDmanquant"), std::string::npos) << junit;
  EXPECT_NE(junit.find("replaced with U+FFFD"), std::string::npos) << junit;
}

// The network stage's pair search: a host whose link runs at a fraction of its peers' fails by
// name, and only that host (its peers' pairs with it are its own fault).
TEST_F(DoctorCluster, AHostCappedBothWaysFailsTheNetworkStageByName) {
  cluster_->cap_host(3, "30mbit");
  TempDir dir;
  auto r = cluster_->muster({"doctor", "-f", cluster_->write_cluster_file(), "--json", dir.file("report.json")}, 300);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = read_json(dir.file("report.json"));
  const auto* slow = find_check(report, "network", "bandwidth", "node4");
  ASSERT_NE(slow, nullptr) << report.dump(2);
  EXPECT_EQ((*slow)["status"], "fail");
  EXPECT_NE((*slow)["reason"].get<std::string>().find("bandwidth is slow with every partner"), std::string::npos)
      << (*slow)["reason"];
  for (const auto& c : report["checks"])
    if (c["name"] == "bandwidth" && c["status"] != "pass") {
      EXPECT_EQ(c["node"], "node4") << c.dump();
    }
  for (const char* other : {"node1", "node2", "node3"})
    EXPECT_EQ((*find_check(report, "network", "pairs", other))["status"], "pass") << other;
  // The all-reduce's slowest rank would name any of them: the smoke stage names the cause.
  const auto* all_reduce = find_check(report, "smoke", "all_reduce");
  ASSERT_NE(all_reduce, nullptr) << report.dump(2);
  EXPECT_NE((*all_reduce)["reason"].get<std::string>().find("the network stage named node4"), std::string::npos)
      << (*all_reduce)["reason"];
  EXPECT_EQ((*all_reduce)["reason"].get<std::string>().find("slowest rank"), std::string::npos);
}

// Sixteen hosts, one capped both ways: doctor fails it by name, its JSON (with the pairs and
// paths it measured) holds to the schema, and its HTML page, opened in a real browser, has a
// cell per ordered pair in each heatmap and the host's row and column outlined. The
// screenshot is kept under build/tests/artifacts (the README's picture is one).
TEST_F(DoctorCluster, SixteenHostsOneCappedThePageOutlinesItInChromium) {
  if (const std::string why = chromium_unavailable(); !why.empty()) {
    if (in_ci()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  cluster_.reset();
  cluster_ = std::make_unique<TestCluster>(16);
  cluster_->cap_host(5, "30mbit");
  TempDir dir;
  // The page is under test, not the judge: a bar from the cluster file, 10x the cap, so that
  // node6 fails whatever its peers measured. Under ASan, 16 agents on 2 cores once streamed
  // one pair at 15.7 Gbit/s beside the rest at 4 or less, and the judge rightly said "split"
  // and failed nobody; with the bar, some healthy pairs there fell below it too, and their
  // nodes failed beside node6. Either way the page marks exactly the nodes the report fails.
  const std::string file = cluster_->write_cluster_file("checks:\n  min_bandwidth_gbps: 0.3\n");
  auto r = cluster_->muster({"doctor", "-f", file, "--json", dir.file("report.json"),
                             "--junit", dir.file("report.xml"), "--html", dir.file("doctor.html")}, 300);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  check_reports(dir);
  const auto report = read_json(dir.file("report.json"));
  EXPECT_EQ(report["network"]["pairs"].size(), 16u * 15) << "every ordered pair, on its one address";
  const auto dom = chromium_dom(dir.file("doctor.html"));
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  auto count = [&](const std::string& what) { return occurrences(dom.out, what); };
  EXPECT_EQ(count("<rect class=\"cell"), 2u * 16 * 15);
  // The nodes the network stage fails, each with why.
  std::set<std::string> failing;
  std::string why;
  for (const auto& p : report["network"]["problems"])
    if (p["severity"] == "fail" && p.contains("node") && p["node"].is_string()) {
      failing.insert(p["node"].get<std::string>());
      why += p["message"].get<std::string>() + "\n";
    }
  EXPECT_TRUE(failing.count("node6")) << why;
  EXPECT_EQ(count("class=\"outline failing\" data-node=\"node6\""), 4u);
  // Each failing node's row label, in both heatmaps; on this machine's README run, node6's alone.
  EXPECT_EQ(count("<text class=\"label failing row\""), 2u * failing.size()) << why;
  EXPECT_LT(dom.out.find("node6: bandwidth is slow with every partner"), dom.out.find("id=\"bandwidth\"")) << "the verdict first";
  std::filesystem::create_directories(artifact_path("/"));
  const auto shot = chromium_screenshot(dir.file("doctor.html"), artifact_path("/doctor-16-hosts.png"), 1200, 1500);
  EXPECT_EQ(shot.exit_code, 0) << shot.err;
}

TEST_F(DoctorCluster, AViolatedThresholdFailsItsCheck) {
  TempDir dir;
  auto r = cluster_->muster({"doctor", "-f", cluster_->write_cluster_file("checks:\n  gpus_per_node: 8\n"),
                             "--only", "cluster,ssh,topology", "--json", dir.file("report.json")}, 300);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  auto report = read_json(dir.file("report.json"));
  const auto* check = find_check(report, "topology", "gpus_per_node", "node2");
  ASSERT_NE(check, nullptr);
  EXPECT_EQ((*check)["status"], "fail");
  EXPECT_EQ((*check)["reason"], "0 GPUs, checks.gpus_per_node is 8");
}

}  // namespace
}  // namespace muster::testing

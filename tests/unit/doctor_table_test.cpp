// doctor's table at scale: a healthy 64-node cluster fits one screen because identical rows
// fold into one with a host list, as `dshbak -c` folds; failures and warnings come first, one
// per node; the other reports keep one entry per node and check.
#include "cli/doctor_report.h"

#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace muster::cli {
namespace {

constexpr int kNodes = 64;
const std::string kFailing = "10.88.0.30";  // its ib_port is at a quarter of its rate
const std::string kWarning = "10.88.0.50";  // its GPU3 has persistence mode off

std::string host(int i) { return fmt::format("10.88.0.{}", 11 + i); }

Check check(std::string stage, std::string name, std::optional<std::string> node, std::string reason,
            CheckStatus status = CheckStatus::Pass) {
  return {std::move(stage), std::move(name), std::move(node), status, std::move(reason), {}, {}};
}

// Doctor's report on 64 nodes of eight GPUs, 20 checks each, with reasons as doctor words
// them: the same on every node but for what each node measured (its SSH time, RTT and clock).
DoctorReport sixty_four_nodes() {
  DoctorReport report;
  report.cluster = "lab";
  report.seconds = 41.5;
  for (const auto& stage : doctor_stages()) report.stages.push_back({stage, CheckStatus::Pass, "", 1});
  report.checks.push_back(check("cluster", "cluster file", std::nullopt, "lab: 64 nodes"));
  for (int i = 0; i < kNodes; ++i)
    report.checks.push_back(check("ssh", "reach", host(i),
                                  fmt::format("SSH {}.{} ms (resolve 0.{}, TCP 0.4), command 1.{} ms", 2 + i % 3,
                                              i % 10, i % 4, i % 7)));
  for (int i = 0; i < kNodes; ++i) {
    report.checks.push_back(check("topology", "gpus_per_node", host(i), "8 GPUs, checks.gpus_per_node is 8"));
    report.checks.push_back(check("topology", "gpu_model", host(i),
                                  "NVIDIA H100 80GB HBM3 (x8); checks.gpu_model is 'H100'"));
    report.checks.push_back(check("topology", "same as the others", host(i),
                                  "8x NVIDIA H100 80GB HBM3, 9 NICs, 224 CPUs, 2015 GiB, kernel 6.8.0-45-generic"));
  }
  for (int i = 0; i < kNodes; ++i) {
    for (int g = 0; g < 8; ++g)
      report.checks.push_back(check("health", "pcie_link", host(i),
                                    fmt::format("GPU{} 0000:{:02x}:00.0 NVIDIA H100 80GB HBM3: PCIe link x16 at "
                                                "32.0 GT/s", g, 0x18 + 0x10 * g)));
    if (host(i) == kFailing)
      report.checks.push_back(check("health", "ib_port", host(i),
                                    "mlx5_0 port 1: active at 100 Gb/sec (4X EDR), expected 400 Gb/sec (the "
                                    "port's maximum); reseat or replace the cable",
                                    CheckStatus::Fail));
    else
      report.checks.push_back(check("health", "ib_port", host(i), "8 active ports at 400 Gb/sec (4X NDR)"));
    if (host(i) == kWarning)
      report.checks.push_back(check("health", "gpu_persistence", host(i),
                                    "GPU3 0000:48:00.0 NVIDIA H100 80GB HBM3: persistence mode off, expected on",
                                    CheckStatus::Warn));
    report.checks.push_back(check("health", "gpu", host(i),
                                  "8 GPUs (NVIDIA H100 80GB HBM3): ECC, memory, clocks, NVLinks and temperature "
                                  "healthy"));
    report.checks.push_back(check("health", "xid", host(i), "no NVIDIA Xid in the kernel log since boot"));
    report.checks.push_back(check("health", "pcie_aer", host(i), "0 fatal PCIe errors (AER) since boot"));
    report.checks.push_back(check("health", "link_errors", host(i), "no link's error counters grew"));
    report.checks.push_back(check("health", "software", host(i),
                                  "driver 550.90.07, CUDA 12.4, NCCL 2.21.5, kernel 6.8.0-45-generic, RDMA mlx5"));
  }
  for (int i = 0; i < kNodes; ++i) {
    report.checks.push_back(check("network", "pairs", host(i),
                                  fmt::format("reached 63 of 63 peer addresses, median RTT {} us", 30 + i % 9)));
    report.checks.push_back(check("network", "clock", host(i),
                                  fmt::format("{:+.1f} ms (±0.{}) from the head", (i % 5 - 2) / 10.0, 1 + i % 2)));
  }
  report.checks.push_back(check("network", "rendezvous", std::nullopt, "MASTER_ADDR 10.88.0.11"));
  report.checks.push_back(check("launch", "ranks", std::nullopt, "512 ranks on 64 nodes started and exited 0"));
  report.checks.push_back(check("smoke", "hello", std::nullopt, "512 of 512 ranks answered once each, no duplicates"));
  report.checks.push_back(check("smoke", "all_reduce", std::nullopt,
                                "nccl at 1048576 bytes over 512 ranks: busbw 81.232 GB/s, 0 wrong"));
  return report;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The table's rows: each line that starts with a stage, from the header to the blank line
// before the verdict.
std::vector<std::string> rows_of(const std::string& table) {
  std::vector<std::string> rows;
  bool in_table = false;
  for (const auto& line : lines_of(table)) {
    if (line.rfind("STAGE ", 0) == 0) in_table = true;
    else if (in_table && line.empty()) break;
    else if (in_table && line[0] != ' ') rows.push_back(line);
  }
  return rows;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The text with each run of spaces and line breaks made one space: a reason as it reads,
// however the table wrapped it.
std::string flat(const std::string& text) {
  std::string out;
  for (char c : text)
    if (c != ' ' && c != '\n') out += c;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  return out;
}

TEST(DoctorTable, SixtyFourHealthyNodesFitOneScreen) {
  const DoctorReport report = sixty_four_nodes();
  ASSERT_GE(report.checks.size(), size_t(kNodes) * 20);
  const std::string table = doctor_summary(report, false);
  EXPECT_LE(lines_of(table).size(), 100u) << table;
}

TEST(DoctorTable, FailuresAndWarningsComeFirstEachWithItsNode) {
  const std::string table = doctor_summary(sixty_four_nodes(), false);
  const auto rows = rows_of(table);
  ASSERT_GE(rows.size(), 3u) << table;
  EXPECT_TRUE(has(rows[0], "ib_port") && has(rows[0], kFailing + " ") && has(rows[0], "FAIL")) << table;
  EXPECT_TRUE(has(rows[1], "gpu_persistence") && has(rows[1], kWarning + " ") && has(rows[1], "WARN")) << table;
  for (size_t k = 2; k < rows.size(); ++k)
    EXPECT_FALSE(has(rows[k], "FAIL") || has(rows[k], "WARN")) << rows[k];
  EXPECT_TRUE(has(table, "FAIL in 41.5 s: 1284 passed, 1 warned, 1 failed, 0 skipped")) << table;
}

// A failure is never folded: two nodes failing the same way are two rows.
TEST(DoctorTable, IdenticalFailuresStayOneRowPerNode) {
  DoctorReport report;
  for (const char* node : {"gpu01", "gpu02"})
    report.checks.push_back(check("health", "xid", node, "Xid 79: fallen off the bus", CheckStatus::Fail));
  const auto rows = rows_of(doctor_summary(report, false));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(has(rows[0], "gpu01 ")) << rows[0];
  EXPECT_TRUE(has(rows[1], "gpu02 ")) << rows[1];
}

TEST(DoctorTable, IdenticalPassesFoldIntoOneRowWithTheirHostList) {
  const std::string table = doctor_summary(sixty_four_nodes(), false);
  const auto rows = rows_of(table);
  auto row_of = [&](const std::string& name) {
    for (const auto& row : rows)
      if (has(row, "  " + name + "  ") && has(row, "PASS")) return row;
    return std::string();
  };
  for (const char* name : {"gpus_per_node", "same as the others", "gpu", "xid", "software", "pairs", "clock"})
    EXPECT_TRUE(has(row_of(name), "10.88.0.[11-74] ")) << name << "\n" << table;
  // The failing node's ib_port is its own row; the others' fold around it, the list wrapped
  // in its column.
  const auto lines = lines_of(table);
  for (size_t k = 0; k + 1 < lines.size(); ++k)
    if (has(lines[k], "ib_port") && has(lines[k], "PASS")) {
      EXPECT_TRUE(has(lines[k], "10.88.0.[11-29,")) << table;
      EXPECT_TRUE(has(lines[k + 1], "31-74]")) << table;
    }
  // Each GPU's link is a row: its device is in the reason.
  size_t pcie_rows = 0;
  for (const auto& row : rows) pcie_rows += has(row, "pcie_link");
  EXPECT_EQ(pcie_rows, 8u) << table;
  // Each check of the whole cluster is one row, as before.
  EXPECT_TRUE(has(table, "launch    ranks")) << table;
}

// What each node measured differs in every row: folded, each number shows its range.
TEST(DoctorTable, PassesThatDifferOnlyInWhatTheyMeasuredFoldIntoItsRange) {
  const std::string table = flat(doctor_summary(sixty_four_nodes(), false));
  EXPECT_TRUE(has(table, "SSH 2.0..4.9 ms (resolve 0.0..0.3, TCP 0.4), command 1.0..1.6 ms")) << table;
  EXPECT_TRUE(has(table, "reached 63 of 63 peer addresses, median RTT 30..38 us")) << table;
  EXPECT_TRUE(has(table, "-0.2..+0.2 ms (±0.1..0.2) from the head")) << table;
}

// Words that differ keep rows apart, numbers inside names and versions included: only a
// number standing alone is a measurement.
TEST(DoctorTable, ReasonsThatDifferInWordsStayApart) {
  DoctorReport report;
  report.checks.push_back(check("health", "software", "n1", "kernel 6.8.0-45-generic"));
  report.checks.push_back(check("health", "software", "n2", "kernel 6.8.0-45-generic"));
  report.checks.push_back(check("health", "software", "n3", "kernel 6.8.0-49-generic"));
  report.checks.push_back(check("health", "pcie_link", "n1", "GPU1 0000:2a:00.0: PCIe link x16"));
  report.checks.push_back(check("health", "pcie_link", "n2", "GPU2 0000:2a:00.0: PCIe link x16"));
  report.checks.push_back(check("ssh", "reach", "n1", "SSH 1.0 ms"));
  report.checks.push_back(check("ssh", "reach", "n2", "SSH 1.0 ms", CheckStatus::Skip));
  const std::string table = doctor_summary(report, false);
  const auto rows = rows_of(table);
  ASSERT_EQ(rows.size(), 6u) << table;
  EXPECT_TRUE(has(rows[0], "n[1-2] ") && has(rows[0], "6.8.0-45-generic")) << table;
  EXPECT_TRUE(has(rows[1], "n3 ") && has(rows[1], "6.8.0-49-generic")) << table;
  EXPECT_TRUE(has(rows[2], "n1 ") && has(rows[2], "GPU1")) << table;
  EXPECT_TRUE(has(rows[3], "n2 ") && has(rows[3], "GPU2")) << table;
  EXPECT_TRUE(has(rows[4], "n1 ") && has(rows[4], "PASS")) << table;
  EXPECT_TRUE(has(rows[5], "n2 ") && has(rows[5], "SKIP")) << table;
}

// One node's table is as it always was: nothing to fold.
TEST(DoctorTable, OneNodeIsPrintedRowForRow) {
  DoctorReport report;
  report.checks.push_back(check("cluster", "cluster file", std::nullopt, "no cluster given: checking this machine"));
  report.checks.push_back(check("topology", "machine", "vm", "1 NUMA node, no GPUs, 2 cores, 1 NIC; NVLink unknown"));
  report.checks.push_back(check("health", "xid", "vm", "no NVIDIA Xid in the kernel log since boot"));
  report.checks.push_back(check("smoke", "hello", std::nullopt, "2 of 2 ranks answered once each, no duplicates"));
  EXPECT_EQ(doctor_summary(report, false),
            "\n"
            "STAGE     CHECK         NODE  STATUS  REASON\n"
            "cluster   cluster file  -     PASS    no cluster given: checking this machine\n"
            "topology  machine       vm    PASS    1 NUMA node, no GPUs, 2 cores, 1 NIC;\n"
            "                                      NVLink unknown\n"
            "health    xid           vm    PASS    no NVIDIA Xid in the kernel log since boot\n"
            "smoke     hello         -     PASS    2 of 2 ranks answered once each, no\n"
            "                                      duplicates\n"
            "\n"
            "PASS in 0.0 s: 4 passed, 0 warned, 0 failed, 0 skipped\n");
}

// The table folds; the reports for programs do not.
TEST(DoctorTable, TheOtherReportsKeepOneEntryPerNodeAndCheck) {
  const DoctorReport report = sixty_four_nodes();
  EXPECT_EQ(doctor_json(report)["checks"].size(), report.checks.size());
  const std::string junit = doctor_junit(report);
  size_t testcases = 0;
  for (size_t at = junit.find("<testcase "); at != std::string::npos; at = junit.find("<testcase ", at + 1))
    ++testcases;
  EXPECT_EQ(testcases, report.checks.size());
  EXPECT_TRUE(has(junit, "name=\"reach [10.88.0.74]\"")) << junit.substr(0, 2000);
  const std::string prometheus = doctor_prometheus(report, 0);
  EXPECT_TRUE(has(prometheus, "check=\"xid\",node=\"10.88.0.74\"}")) << prometheus.substr(0, 2000);
}

// One node's gpu_count twice: a GPU hidden by the job's cgroup (skip) and one fallen off the
// bus (fail). The series says fail: a skip's number is the highest, but it is the least.
TEST(DoctorTable, PrometheusKeepsAFailureOverASkipOfTheSameCheck) {
  DoctorReport report;
  report.cluster = "c";
  report.checks.push_back(check("health", "gpu_count", "n1", "GPU fallen off the bus", CheckStatus::Fail));
  report.checks.push_back(check("health", "gpu_count", "n1", "GPU2 is another job's", CheckStatus::Skip));
  report.checks.push_back(check("health", "xid", "n1", "not read here", CheckStatus::Skip));
  const std::string prometheus = doctor_prometheus(report, 0);
  EXPECT_TRUE(has(prometheus, "check=\"gpu_count\",node=\"n1\"} 2\n")) << prometheus;
  EXPECT_TRUE(has(prometheus, "check=\"xid\",node=\"n1\"} 3\n")) << prometheus;
}

}  // namespace
}  // namespace muster::cli

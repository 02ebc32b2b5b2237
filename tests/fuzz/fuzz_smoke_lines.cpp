// libFuzzer: the lines probe ranks print for the head ("MUSTER-SMOKE {json}"), from any of
// four ranks (rank 0's pair-search findings among them), and the checks made on them: a
// rank's output never makes the head fail.
#include <cstdint>
#include <string>

#include "launcher/job/smoke_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  muster::LaunchedJob job;
  muster::ClusterSpec cluster;
  for (const char* host : {"a", "b"})
    cluster.nodes.push_back(muster::NodeSpec{host, host, {2}, {}, {}, {}});
  job.plan = muster::make_rank_plan(cluster, std::nullopt, muster::MapBy::Slot);
  muster::SmokeReport report([](int, std::string_view) {});
  report.expect(job.plan);  // so that rank 0's pair-search line is read against a plan
  std::string text(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const int rank = start < text.size() ? static_cast<unsigned char>(text[start]) % 5 - 1 : 0;
    report.line(rank, muster::OutputStream::Stdout,
                std::string_view(text).substr(std::min(start + 1, end), end - std::min(start + 1, end)));
    start = end + 1;
  }
  job.result.end = muster::JobEnd::RankFailed;
  auto rows = muster::summarize_smoke(report.results);
  muster::smoke_findings(report, job, rows, muster::CheckThresholds{});
  return 0;
}

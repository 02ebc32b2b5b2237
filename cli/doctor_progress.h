// Live progress for muster doctor: on a terminal one line rewritten in place (the stage,
// nodes done out of total, elapsed time); otherwise a plain line as each stage starts and ends.
// smoke shows the step that runs on a terminal with the same line.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/job/doctor.h"

namespace muster::cli {

class DoctorProgress : public DoctorObserver {
 public:
  // `live`: stderr is a terminal, so the line may be redrawn.
  explicit DoctorProgress(bool live);
  ~DoctorProgress() override;

  void begin_stage(const std::string& name, int total, const std::string& unit) override;
  void step_done() override;  // thread-safe
  void end_stage(const std::string& name, CheckStatus status, const std::string& reason) override;
  void other_line(int rank, std::string_view text) override;
  // Writes `text` to stdout with the progress line out of its way; the next tick redraws it.
  void print_above(std::string_view text);

 private:
  void draw();
  bool live_;
  std::mutex mutex_;
  std::string stage_;
  std::atomic<int> done_{0};
  int total_ = 0;
  std::string unit_;
  std::chrono::steady_clock::time_point started_;  // of the current stage
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

}  // namespace muster::cli

#include "cli/doctor_progress.h"

#include <fmt/format.h>

#include "cli/terminal_output.h"
#include "launcher/thread.h"

namespace muster::cli {

DoctorProgress::DoctorProgress(bool live) : live_(live) {
  if (live_)
    ticker_ = signal_free_thread([this] {
      while (!stop_) {
        draw();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
}

DoctorProgress::~DoctorProgress() {
  stop_ = true;
  if (ticker_.joinable()) ticker_.join();
  if (live_) print_note_raw("\r\033[K");
}

void DoctorProgress::draw() {
  std::lock_guard lock(mutex_);
  if (stage_.empty()) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::string steps = total_ > 0 ? fmt::format("{}/{} {}  ", done_.load(), total_, unit_) : "";
  print_note_raw(fmt::format("\r\033[K[{}] {}{:.1f}s", stage_, steps, elapsed));
}

void DoctorProgress::begin_stage(const std::string& name, int total, const std::string& unit) {
  {
    std::lock_guard lock(mutex_);
    stage_ = name;
    started_ = std::chrono::steady_clock::now();
    total_ = total;
    unit_ = unit;
    done_ = 0;
  }
  if (!live_) print_note(fmt::format("doctor: {} ...", name));
}

void DoctorProgress::step_done() { ++done_; }

void DoctorProgress::end_stage(const std::string& name, CheckStatus status,
                               const std::string& reason) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::lock_guard lock(mutex_);
  stage_.clear();
  // On a terminal the progress line is replaced, stage after stage, and the table that
  // follows says each result once; a log keeps a line per stage, for a run that never ends.
  if (live_) print_note_raw("\r\033[K");
  else print_note(fmt::format("doctor: {} {}: {} ({:.1f}s)", name, status_name(status), reason, elapsed));
}

void DoctorProgress::other_line(int rank, std::string_view text) {
  std::lock_guard lock(mutex_);
  print_note_raw(fmt::format("{}[{}] {}\n", live_ ? "\r\033[K" : "", rank, text));
}

void DoctorProgress::print_above(std::string_view text) {
  std::lock_guard lock(mutex_);
  if (live_) print_note_raw("\r\033[K");
  print_out(text);
}

}  // namespace muster::cli

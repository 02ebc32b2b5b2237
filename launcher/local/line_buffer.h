// Turning a byte stream into whole lines, so output is never cut or interleaved, in bounded
// memory whatever a program writes.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace muster {

// Accumulates bytes and hands out complete lines (without their end). A line ends at '\n',
// at "\r\n", or at a lone '\r': a progress bar that redraws itself with '\r' comes through
// as it goes, one line per redraw, instead of piling up (an empty redraw is dropped). A line
// longer than kMaxLine is handed out in kMaxLine pieces, and counted.
class LineBuffer {
 public:
  static constexpr size_t kMaxLine = size_t(1) << 20;

  // Appends `bytes` and calls `emit` for every line it completes.
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& emit);
  // Emits the unterminated last line, if any (called once the stream has ended).
  void finish(const std::function<void(std::string_view)>& emit);
  // How many lines were too long and were split.
  size_t split_lines() const { return split_lines_; }

 private:
  std::string pending_;
  bool after_cr_ = false;   // the last byte was '\r': a '\n' right after it ends nothing more
  bool splitting_ = false;  // the current line already had a piece handed out
  size_t split_lines_ = 0;
};

}  // namespace muster

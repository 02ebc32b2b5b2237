// Turning a byte stream into whole lines, so output is never cut or interleaved.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace muster {

// Accumulates bytes and hands out complete lines (without their '\n').
class LineBuffer {
 public:
  // Appends `bytes` and calls `emit` for every line it completes.
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& emit);
  // Emits the unterminated last line, if any (called once the stream has ended).
  void finish(const std::function<void(std::string_view)>& emit);

 private:
  std::string pending_;
};

}  // namespace muster

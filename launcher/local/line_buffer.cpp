#include "launcher/local/line_buffer.h"

namespace muster {

void LineBuffer::feed(std::string_view bytes,
                      const std::function<void(std::string_view)>& emit) {
  // Lines wholly inside `bytes` go out without being copied into pending_.
  while (!bytes.empty()) {
    auto newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      return;
    }
    if (pending_.empty()) {
      emit(bytes.substr(0, newline));
    } else {
      pending_.append(bytes.substr(0, newline));
      emit(pending_);
      pending_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineBuffer::finish(const std::function<void(std::string_view)>& emit) {
  if (pending_.empty()) return;
  emit(pending_);
  pending_.clear();
}

}  // namespace muster

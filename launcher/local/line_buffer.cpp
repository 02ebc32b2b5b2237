#include "launcher/local/line_buffer.h"

namespace muster {

void LineBuffer::feed(std::string_view bytes,
                      const std::function<void(std::string_view)>& emit) {
  if (after_cr_ && !bytes.empty() && bytes.front() == '\n') bytes.remove_prefix(1);  // "\r\n"
  after_cr_ = false;
  while (!bytes.empty()) {
    const size_t end = bytes.find_first_of("\r\n");
    const size_t room = kMaxLine - pending_.size();
    if (end == std::string_view::npos || end > room) {
      // No end in sight within the limit: keep what fits, hand out a full piece.
      const size_t take = std::min(bytes.size(), room);
      pending_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (pending_.size() == kMaxLine) {
        if (!splitting_) ++split_lines_;
        splitting_ = true;
        emit(pending_);
        pending_.clear();
      }
      continue;
    }
    const bool carriage_return = bytes[end] == '\r';
    const std::string_view piece = bytes.substr(0, end);
    const bool empty_redraw = carriage_return && piece.empty() && pending_.empty();
    if (!empty_redraw) {
      // Lines wholly inside `bytes` go out without being copied into pending_.
      if (pending_.empty()) {
        emit(piece);
      } else {
        pending_.append(piece);
        emit(pending_);
        pending_.clear();
      }
    }
    splitting_ = false;
    bytes.remove_prefix(end + 1);
    if (carriage_return) {
      if (!bytes.empty() && bytes.front() == '\n') bytes.remove_prefix(1);
      else if (bytes.empty()) after_cr_ = true;
    }
  }
}

void LineBuffer::finish(const std::function<void(std::string_view)>& emit) {
  if (pending_.empty()) return;
  emit(pending_);
  pending_.clear();
}

}  // namespace muster

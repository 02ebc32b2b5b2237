#include "cli/terminal_output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "topology/cpu_list.h"

namespace muster::cli {
namespace {

// Writes all of `text`, retrying short writes; a reader that went away (EPIPE) is ignored.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(size_t(n));
  }
}

}  // namespace

const std::map<std::string, TagStyle>& tag_styles() {
  static const std::map<std::string, TagStyle> styles = {
      {"none", TagStyle::None}, {"rank", TagStyle::Rank}, {"host", TagStyle::Host},
      {"host-rank", TagStyle::HostRank}};
  return styles;
}

void print_error(std::string_view message) {
  write_all(STDERR_FILENO, fmt::format("muster: error: {}\n", message));
}
void print_warning(std::string_view message) {
  write_all(STDERR_FILENO, fmt::format("muster: warning: {}\n", message));
}
void print_note(std::string_view message) {
  write_all(STDERR_FILENO, fmt::format("muster: {}\n", message));
}
void print_out(std::string_view text) { write_all(STDOUT_FILENO, text); }
void print_note_raw(std::string_view text) { write_all(STDERR_FILENO, text); }

void TaggedOutput::line(int rank, OutputStream stream, std::string_view text) {
  std::string& out = pending_[stream == OutputStream::Stdout ? 0 : 1];
  const std::string& host = size_t(rank) < host_of_rank_.size() ? host_of_rank_[size_t(rank)]
                                                                 : std::string("?");
  switch (style_) {
    case TagStyle::None: break;
    case TagStyle::Rank: fmt::format_to(std::back_inserter(out), "[{}] ", rank); break;
    case TagStyle::Host: fmt::format_to(std::back_inserter(out), "[{}] ", host); break;
    case TagStyle::HostRank:
      fmt::format_to(std::back_inserter(out), "[{}:{}] ", host, rank);
      break;
  }
  out.append(text);
  out.push_back('\n');
  if (out.size() > (1 << 16)) {
    write_all(stream == OutputStream::Stdout ? STDOUT_FILENO : STDERR_FILENO, out);
    out.clear();
  }
}

void TaggedOutput::rank_bound(int rank, const RankBindingReport& r) {
  if (!report_bindings_) return;
  const std::string& host = size_t(rank) < host_of_rank_.size() ? host_of_rank_[size_t(rank)]
                                                                 : std::string("?");
  std::string gpu = r.binding.gpu ? fmt::format("GPU {} ({})", *r.binding.gpu, r.gpu_bus_id)
                                  : std::string("no GPU");
  std::string numa = r.binding.numa ? fmt::format("NUMA {}", *r.binding.numa) : std::string("NUMA -");
  flush();
  print_note(fmt::format("rank {} ({}) bound to CPUs {} ({}), {}", rank, host,
                         r.binding.cpus.empty() ? std::string("(not bound)")
                                                : format_cpu_list(r.binding.cpus),
                         numa, gpu));
}

void TaggedOutput::launch_warning(const std::string& text) {
  flush();
  print_warning(text);
}

void TaggedOutput::flush() {
  for (int i = 0; i < 2; ++i) {
    write_all(i == 0 ? STDOUT_FILENO : STDERR_FILENO, pending_[i]);
    pending_[i].clear();
  }
}

namespace {
// `word` in pieces of at most `room` columns, cut after a comma where one allows (a list
// such as "mlx4,mlx5,rxe"), else anywhere.
std::vector<std::string> pieces_of(const std::string& word, size_t room) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (word.size() - start > room) {
    size_t cut = word.rfind(',', start + room - 1);
    cut = cut == std::string::npos || cut < start ? start + room : cut + 1;
    pieces.push_back(word.substr(start, cut - start));
    start = cut;
  }
  pieces.push_back(word.substr(start));
  return pieces;
}
}  // namespace

std::string wrap_words(const std::string& text, size_t width, size_t indent, size_t first_column) {
  const size_t room = std::max<size_t>(1, width > indent ? width - indent : 1);
  const std::string new_line = "\n" + std::string(indent, ' ');
  std::string out;
  size_t column = first_column;
  std::istringstream paragraphs(text);
  std::string paragraph;
  bool first_paragraph = true;
  while (std::getline(paragraphs, paragraph)) {
    if (!first_paragraph) {
      out += new_line;
      column = indent;
    }
    first_paragraph = false;
    std::istringstream words(paragraph);
    std::string word;
    bool line_has_words = false;
    while (words >> word) {
      bool glued = false;  // the piece continues the word before it: no space between
      for (const auto& piece : pieces_of(word, room)) {
        const size_t space = line_has_words && !glued ? 1 : 0;
        if (line_has_words && column + space + piece.size() > width) {
          out += new_line;
          column = indent;
        } else if (space) {
          out += ' ';
          ++column;
        }
        out += piece;
        column += piece.size();
        line_has_words = glued = true;
      }
    }
  }
  return out;
}

}  // namespace muster::cli

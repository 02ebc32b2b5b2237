// Everything muster writes to the terminal goes through here.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "launcher/local/local_job.h"

namespace muster::cli {

// Exit status for usage and configuration errors (getopt and argparse convention).
inline constexpr int kUsageExit = 2;

// What muster's tables, help and reports are laid out for: an 80-column terminal.
inline constexpr size_t kColumns = 80;

// `text` in lines of at most `width` columns, each but the first indented by `indent`
// spaces, the first starting at column `first_column`; the text's own line breaks are kept.
// A word longer than a line stands alone.
std::string wrap_words(const std::string& text, size_t width, size_t indent, size_t first_column = 0);

// Prints "muster: error: MESSAGE" on stderr.
void print_error(std::string_view message);
// Prints "muster: warning: MESSAGE" on stderr.
void print_warning(std::string_view message);
// Prints "muster: MESSAGE" on stderr (status lines that are not errors).
void print_note(std::string_view message);
// Writes text to stdout as is.
void print_out(std::string_view text);
// Writes text to stderr as is.
void print_note_raw(std::string_view text);

// How each output line of a rank is prefixed.
enum class TagStyle { None, Rank, Host, HostRank };

// --tag's names for the styles: none, rank, host, host-rank.
const std::map<std::string, TagStyle>& tag_styles();

// Writes ranks' lines to muster's stdout and stderr, each whole and prefixed, batched into
// few writes; nothing interleaves because this is the only writer.
class TaggedOutput : public JobOutput {
 public:
  TaggedOutput(TagStyle style, std::vector<std::string> host_of_rank, bool report_bindings = false)
      : style_(style), host_of_rank_(std::move(host_of_rank)), report_bindings_(report_bindings) {}
  ~TaggedOutput() override { flush(); }

  void line(int rank, OutputStream stream, std::string_view text) override;
  void flush() override;
  // Like mpirun --report-bindings: one line per rank on stderr, when asked for.
  void rank_bound(int rank, const RankBindingReport& binding) override;
  void launch_warning(const std::string& text) override;

 private:
  TagStyle style_;
  std::vector<std::string> host_of_rank_;
  bool report_bindings_ = false;
  std::string pending_[2];
};

}  // namespace muster::cli

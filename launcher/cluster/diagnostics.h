// Collecting every problem of an input in one pass, each tied to where it was written.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muster {

// Where something was written: "cluster.yaml:12:5", or a command-line flag when line is 0.
struct SourceLocation {
  std::string source;  // file name, or "-H" / "--hostfile" style origin
  int line = 0;        // 1-based; 0 when the source has no lines
  int column = 0;      // 1-based
  std::string str() const;
};

// Problems found while reading one input; validation adds all of them, then throws once.
class Diagnostics {
 public:
  void add(const SourceLocation& where, std::string problem);
  bool empty() const { return messages_.empty(); }
  // Throws Error(Config) with every message when any problem was added.
  void throw_if_any() const;

 private:
  std::vector<std::string> messages_;
};

// The contents of an input file; Error(Config) "PATH: cannot read the WHAT: reason" if not.
std::string read_input_file(const std::string& path, const char* what);

// The closest candidate to `typed` when it is plausibly a typo of it (did-you-mean).
std::optional<std::string> closest_match(std::string_view typed,
                                         const std::vector<std::string>& candidates);

}  // namespace muster

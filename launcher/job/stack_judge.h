// The one judgement of where a job's ranks are: from their merged stacks, the place most of
// them wait in, and every rank that is elsewhere, has ended, or could not be read.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/local/stack_tree.h"

namespace muster {

// The main threads' places, largest first, are the report's own (report.stacks.main).
struct StackVerdict {
  // The place more than half of the read ranks are in, when there is one: the longest call
  // path they share (their innermost frames may differ below it), and those ranks.
  std::optional<StackClass> majority;
  // Ranks that were read elsewhere, by rank, with where they are.
  struct Elsewhere {
    int rank = 0;
    std::vector<std::string> path;
  };
  std::vector<Elsewhere> elsewhere;
  std::vector<int> gone;                              // ended before or while being read
  std::vector<std::pair<int, std::string>> unread;    // could not be read, and why
  int read = 0;                                       // ranks whose stacks were read
  bool all_in_one_place = false;                      // every read rank under the majority's place (more than one read)
};

StackVerdict judge_stacks(const StackReport& report);

// The innermost `frames` frames of `path`, innermost first: "clock_nanosleep <- <module> (hang.py:5)".
std::string innermost_frames(const std::vector<std::string>& path, size_t frames = 3);

// Whether `frame` is a Python frame: "name (file.py:12)".
bool is_python_frame(const std::string& frame);

// The frame a place is best named by: its innermost Python frame where there is one (the
// collective's call in the program), else its outermost MPI call, else its innermost frame.
std::string place_name(const std::vector<std::string>& path);

}  // namespace muster

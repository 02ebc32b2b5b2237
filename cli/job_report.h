// How a job ended, in plain words on stderr: the failed rank, signals, lost nodes, stragglers.
#pragma once

#include "launcher/job/launch.h"

namespace muster::cli {

// Prints what went wrong in `job`, if anything.
void report_job_end(const LaunchedJob& job, double timeout_s);

// The timeline of a job that may have been started again, on stderr: one line per attempt
// (when it started, what ended it, what was done, how long until its ranks ran again), then
// the nodes left out and why.
void report_attempts(const LaunchedJob& job);

// The same as one JSON object on stdout, {"events": [...]}, for dashboards.
void print_attempts_json(const LaunchedJob& job);

}  // namespace muster::cli

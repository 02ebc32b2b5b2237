// How a job ended, in plain words on stderr: the failed rank, signals, lost nodes, stragglers.
#pragma once

#include "launcher/job/launch.h"

namespace muster::cli {

// Prints what went wrong in `job`, if anything.
void report_job_end(const LaunchedJob& job, double timeout_s);

}  // namespace muster::cli

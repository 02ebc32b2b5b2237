// Identifiers that mark every process of one job.
#pragma once

#include <string>

namespace muster {

// A new job id: 16 random hex digits, put in every rank's MUSTER_JOB_ID so that cleanup
// can recognise this job's processes and nobody else's.
std::string new_job_id();

}  // namespace muster

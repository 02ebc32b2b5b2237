#include "tests/support/build_paths.h"

namespace muster::testing {

const char* muster_binary() { return MUSTER_BINARY; }
const char* muster_node_program() { return MUSTER_NODE_PROGRAM; }
const char* crash_on_start_binary() { return CRASH_ON_START_BINARY; }
const char* fake_gpu_dir() { return MUSTER_FAKE_GPU_DIR; }
const char* fake_nccl_dir() { return MUSTER_FAKE_NCCL_DIR; }
const char* source_dir() { return MUSTER_SOURCE_DIR; }

std::string source_path(std::string_view relative) {
  return std::string(MUSTER_SOURCE_DIR).append(relative);
}

std::string artifact_path(std::string_view relative) {
  return std::string(MUSTER_ARTIFACT_DIR).append(relative);
}

}  // namespace muster::testing

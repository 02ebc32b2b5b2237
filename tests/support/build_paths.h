// Where this build's programs and this checkout's files lie, for the tests and benchmarks.
//
// The paths are compiled into build_paths.cpp alone, never into each test. A path on a
// compiler's command line (-DNAME="/abs/path") makes every source compiled with it a
// compiler-cache miss in another clone: ccache's base_dir rewrites include and source paths,
// never a macro's value. .ci/run builds a fresh clone three times; with the paths in every
// test, each build compiled every test again.
#pragma once

#include <string>
#include <string_view>

namespace muster::testing {

const char* muster_binary();          // build/muster
const char* muster_node_program();    // build/muster-node, what the bundle ships
const char* crash_on_start_binary();  // a program that dies of SIGSEGV as it starts
const char* fake_gpu_dir();           // the fake NVML, CUDA runtime and cuBLAS (and NCCL)
const char* fake_nccl_dir();          // "" where the fake NCCL was not built
const char* source_dir();             // this checkout

// A file of this checkout, and one under build/tests/artifacts: `relative` starts with '/'.
std::string source_path(std::string_view relative);
std::string artifact_path(std::string_view relative);

}  // namespace muster::testing

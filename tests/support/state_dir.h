// A state directory for health's baseline and record that does not exist yet, under a private
// temporary one removed with this object: tests start from a node that never kept state.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace muster::testing {

class StateDir {
 public:
  StateDir() {
    char pattern[] = "/tmp/muster-state-XXXXXX";
    parent_ = mkdtemp(pattern);
  }
  ~StateDir() { std::filesystem::remove_all(parent_); }
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;
  std::string path() const { return parent_ + "/state"; }
  std::string parent() const { return parent_; }

 private:
  std::string parent_;
};

}  // namespace muster::testing

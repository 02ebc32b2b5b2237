// A node's files as the health checks read them, in the kernel's own formats, under a
// directory of a test's: PCI functions in sys/devices with sys/bus/pci/devices linking to
// them (relative links, as sysfs has), InfiniBand ports in sys/class/infiniband whose
// `device` link points at their PCI function, the kernel log at dev/kmsg, the kernel release
// in proc. What a test leaves out is what a snapshot lacks.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace muster::testing {

class NodeTree {
 public:
  NodeTree() {
    char pattern[] = "/tmp/muster-node-XXXXXX";
    root_ = mkdtemp(pattern);
    write("proc/sys/kernel/osrelease", "6.1.0-test-amd64");
  }
  ~NodeTree() { std::filesystem::remove_all(root_); }
  NodeTree(const NodeTree&) = delete;
  NodeTree& operator=(const NodeTree&) = delete;

  const std::string& root() const { return root_; }

  struct Link {
    std::string speed = "32.0 GT/s PCIe", max_speed = "32.0 GT/s PCIe";
    std::string width = "16", max_width = "16";
  };

  // A PCI function of class `cls` ("0x030200") and vendor ("0x10de") below `parent` (another
  // function's bus id; "" for the root complex), with its link attributes unless `link` is
  // null (conventional PCI).
  void pci(const std::string& bus_id, const std::string& cls, const std::string& vendor,
           const Link* link, const std::string& parent = "") {
    const std::string dir = "sys/devices/pci0000:00/" + (parent.empty() ? "" : path_of_.at(parent) + "/") + bus_id;
    path_of_[bus_id] = (parent.empty() ? "" : path_of_.at(parent) + "/") + bus_id;
    write(dir + "/class", cls);
    write(dir + "/vendor", vendor);
    write(dir + "/device", "0x2330");
    if (link) {
      write(dir + "/current_link_speed", link->speed);
      write(dir + "/max_link_speed", link->max_speed);
      write(dir + "/current_link_width", link->width);
      write(dir + "/max_link_width", link->max_width);
    }
    std::filesystem::create_directories(root_ + "/sys/bus/pci/devices");
    std::filesystem::create_symlink("../../../devices/pci0000:00/" + path_of_[bus_id],
                                    root_ + "/sys/bus/pci/devices/" + bus_id);
  }
  std::string pci_dir(const std::string& bus_id) const {
    return root_ + "/sys/devices/pci0000:00/" + path_of_.at(bus_id);
  }

  // Port `port` of HCA `name` on PCI function `bus_id`: "4: ACTIVE", "5: LinkUp",
  // "400 Gb/sec (4X NDR)"; its error counters all zero.
  void ib_port(const std::string& name, const std::string& bus_id, int port, const std::string& state,
               const std::string& phys_state, const std::string& rate) {
    const std::string dir = "sys/class/infiniband/" + name;
    if (!std::filesystem::exists(root_ + "/" + dir + "/device")) {
      std::filesystem::create_directories(root_ + "/" + dir);
      std::filesystem::create_symlink("../../../devices/pci0000:00/" + path_of_.at(bus_id), root_ + "/" + dir + "/device");
    }
    const std::string p = dir + "/ports/" + std::to_string(port);
    write(p + "/state", state);
    write(p + "/phys_state", phys_state);
    write(p + "/rate", rate);
    write(p + "/link_layer", "InfiniBand");
    for (const char* c : {"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors"})
      write(p + "/counters/" + c, "0");
  }
  void ib_counter(const std::string& name, int port, const std::string& counter, unsigned long value) {
    write("sys/class/infiniband/" + name + "/ports/" + std::to_string(port) + "/counters/" + counter,
          std::to_string(value));
  }

  // The kernel log, as /dev/kmsg records ("6,1234,5678,-;message").
  void kernel_log(const std::string& text) { write("dev/kmsg", text); }

  void write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(root_) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }

  // A healthy node: two NVIDIA GPUs behind PCIe switch ports at Gen5 x16, one HCA with one
  // 400 Gb/s port, an empty kernel log.
  void healthy_gpu_node() {
    Link gen5;
    pci("0000:17:00.0", "0x060400", "0x1000", &gen5);
    pci("0000:18:00.0", "0x030200", "0x10de", &gen5, "0000:17:00.0");
    pci("0000:29:00.0", "0x060400", "0x1000", &gen5);
    pci("0000:2a:00.0", "0x030200", "0x10de", &gen5, "0000:29:00.0");
    pci("0000:3a:00.0", "0x060400", "0x1000", &gen5);
    pci("0000:3b:00.0", "0x020700", "0x15b3", &gen5, "0000:3a:00.0");
    ib_port("mlx5_0", "0000:3b:00.0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
    kernel_log("6,100,1000,-;Linux version 6.1.0-test-amd64");
    write("etc/machine-id", "5f0c2a9d7e3b4c1a8d6e9f2b3a4c5d6e");  // a node record is of one machine
  }

 private:
  std::string root_;
  std::map<std::string, std::string> path_of_;  // bus id -> its path below pci0000:00
};

}  // namespace muster::testing

#include "launcher/remote/remote_exec.h"

#include "launcher/remote/fanout.h"
#include "launcher/local/line_buffer.h"
#include "launcher/remote/session.h"
#include "launcher/remote/shell_quote.h"

namespace muster {

std::vector<NodeExecResult> exec_on_nodes(SshTransport& transport, const ClusterSpec& cluster,
                                          const std::vector<std::string>& argv, int fanout,
                                          const ExecLineSink& sink) {
  std::vector<NodeExecResult> results(cluster.nodes.size());
  // Each word quoted on its own: spaces, quotes, $(...), `...`, ; and newlines stay inert.
  const std::string command_line = shell_command(argv);
  for_each_node(cluster.nodes.size(), fanout, [&](size_t i) {
    NodeExecResult& r = results[i];
    r.host = cluster.nodes[i].host;
    try {
      auto connection = transport.connect(ssh_target_of(cluster.nodes[i]));
      auto command = connection->start(command_line);
      command->close_stdin();
      LineBuffer lines[2];
      auto forward = [&](int stream, std::string_view bytes) {
        if (sink)
          lines[stream].feed(bytes, [&](std::string_view line) {
            sink(r.host, stream == 0 ? OutputStream::Stdout : OutputStream::Stderr, line);
          });
      };
      auto keep = [&](std::string& kept, const std::string& more) {
        if (sink || r.cut) return;
        const size_t room = kMaxKeptOutput - std::min(kMaxKeptOutput, r.out.size() + r.err.size());
        kept.append(more, 0, std::min(room, more.size()));
        r.cut = more.size() > room;
      };
      for (bool open = true; open;) {
        std::string out, err;
        open = command->read(out, err, std::chrono::milliseconds(200));
        forward(0, out);
        forward(1, err);
        keep(r.out, out);
        keep(r.err, err);
      }
      for (int stream = 0; stream < 2; ++stream)
        if (sink)
          lines[stream].finish([&](std::string_view line) {
            sink(r.host, stream == 0 ? OutputStream::Stdout : OutputStream::Stderr, line);
          });
      // Killed by a signal: 128+N, as a shell reports it.
      if (auto ending = command->exit_status()) r.status = ending->shell_code();
      else r.failure = r.host + ": connection: the command ended without a status";
    } catch (const std::exception& e) {
      r.failure = e.what();
    }
  });
  return results;
}

int exec_exit_status(const std::vector<NodeExecResult>& results) {
  int status = 0;
  for (const auto& r : results) status = std::max(status, r.failure ? 255 : r.status);
  return status;
}

}  // namespace muster

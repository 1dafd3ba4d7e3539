// The server's listening socket: a wave of clients connecting at once must fit its accept queue,
// or the kernel drops their SYNs and each waits a second or more for its retry.
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "serve/http_server.h"
#include "serve/metrics.h"

namespace doppler::serve {
namespace {

// The accept queue's length of this process's listening TCP socket on `port` (Linux reports a
// listening socket's backlog in TCP_INFO's tcpi_sacked), or none if there is no such socket.
std::optional<int> ListenBacklog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  std::optional<int> found;
  while (dirent* entry = readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (fd <= 2 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET ||
        ntohs(addr.sin_port) != port) {
      continue;
    }
    tcp_info info{};
    socklen_t info_len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) == 0 && info.tcpi_state == TCP_LISTEN) {
      found = static_cast<int>(info.tcpi_sacked);
    }
  }
  closedir(dir);
  return found;
}

TEST(ServeHttp, ListensWithAnAcceptQueueForAWaveOfClients) {
  int somaxconn = 4096;
  std::ifstream("/proc/sys/net/core/somaxconn") >> somaxconn;
  Metrics metrics;
  HttpOptions options;
  options.port = 0;
  HttpServer server(options, metrics);
  ASSERT_TRUE(server.Start().ok());
  const std::optional<int> backlog = ListenBacklog(server.port());
  server.Stop();
  ASSERT_TRUE(backlog.has_value()) << "no listening socket on port " << server.port();
  // cpp-httplib's own backlog is 5; 128 clients at once is a modest serving load.
  EXPECT_GE(*backlog, std::min(somaxconn, 128));
}

}  // namespace
}  // namespace doppler::serve

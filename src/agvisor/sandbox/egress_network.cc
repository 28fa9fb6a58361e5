#include "agvisor/sandbox/egress_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "agvisor/base/unique_fd.h"

namespace agvisor {
std::string EgressNetworkName(std::string_view container_name) {
  return std::string(container_name) + "-egress";
}

std::vector<std::string> EgressProxyEnv(std::string_view gateway) {
  const std::string url = "http://" + std::string(gateway) + ":" + std::to_string(kEgressProxyPort);
  const std::string no_proxy = "localhost,127.0.0.1,::1";
  return {"HTTP_PROXY=" + url,  "HTTPS_PROXY=" + url,   "http_proxy=" + url,
          "https_proxy=" + url, "NO_PROXY=" + no_proxy, "no_proxy=" + no_proxy};
}

Result<void> CheckEgressHost(std::string_view host) {
  if (host.empty()) return Ok();
  return Error::Unsupported("egress policies on " + std::string(host) +
                            ": not yet (only the local Docker host); run agvisor on that host");
}

Result<void> WaitForEnforcer(std::string_view gateway, std::chrono::milliseconds wait) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kEgressProxyPort);
  if (::inet_pton(AF_INET, std::string(gateway).c_str(), &addr.sin_addr) != 1) {
    return Error::Internal("egress network gateway '" + std::string(gateway) +
                           "' is not an IPv4 address");
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Error::FromErrno("socket", errno);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      return Ok();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error::Unavailable(
          "no egress enforcer answers at " + std::string(gateway) + ":" +
          std::to_string(kEgressProxyPort) +
          ": egress policies are enforced by agvisord on the Docker host; start it (as root: "
          "`agvisord &`, see `agvisord --help`) and create the sandbox again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace agvisor

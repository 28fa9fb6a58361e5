#include "agvisor/docker/api_version.h"

#include <charconv>

namespace agvisor::docker {
namespace {

Result<int> ParseNumber(std::string_view digits, std::string_view whole) {
  int value = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end || digits.front() == '+' ||
      digits.front() == '-') {
    return Error::InvalidArgument("docker API version \"" + std::string(whole) +
                                  "\": expected <major>.<minor>");
  }
  return value;
}

}  // namespace

Result<ApiVersion> ApiVersion::Parse(std::string_view text) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos) {
    return Error::InvalidArgument("docker API version \"" + std::string(text) +
                                  "\": expected <major>.<minor>");
  }
  ApiVersion v;
  v.major = AGVISOR_TRY(ParseNumber(text.substr(0, dot), text));
  v.minor = AGVISOR_TRY(ParseNumber(text.substr(dot + 1), text));
  return v;
}

std::string ApiVersion::ToString() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

Result<ApiVersion> NegotiateApiVersion(std::string_view daemon_api,
                                       std::string_view daemon_min_api) {
  const ApiVersion daemon_max = AGVISOR_TRY(ApiVersion::Parse(daemon_api));
  // An unknown minimum: assume the daemon goes down to ours (every daemon since 2015 does).
  ApiVersion daemon_min = kMinApiVersion;
  if (!daemon_min_api.empty()) daemon_min = AGVISOR_TRY(ApiVersion::Parse(daemon_min_api));
  const std::string ranges =
      "the daemon speaks Engine API " +
      (daemon_min_api.empty() ? std::string("up to ") : daemon_min.ToString() + "..") +
      daemon_max.ToString() + ", agvisor speaks " + kMinApiVersion.ToString() + ".." +
      kMaxApiVersion.ToString();
  if (daemon_max < kMinApiVersion) {
    return Error::Unsupported("docker daemon too old: " + ranges +
                              " (upgrade Docker to 20.10 or newer)");
  }
  if (daemon_min > kMaxApiVersion) {
    return Error::Unsupported("docker daemon too new: " + ranges + " (upgrade agvisor)");
  }
  return daemon_max < kMaxApiVersion ? daemon_max : kMaxApiVersion;
}

}  // namespace agvisor::docker

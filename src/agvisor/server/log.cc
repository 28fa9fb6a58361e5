#include "agvisor/server/log.h"

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "agvisor/api/codec.h"

namespace agvisor::server {
namespace {

std::atomic<bool> g_enabled{true};
std::mutex g_mu;

std::string Now() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return buf;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() < 16 && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

void SetLogEnabled(bool enabled) { g_enabled = enabled; }

void LogEvent(std::string_view level, std::string_view msg,
              const std::vector<std::pair<std::string, std::string>>& fields) {
  if (!g_enabled) return;
  boost::json::object o;
  o["time"] = Now();
  o["level"] = level;
  o["msg"] = api::SanitizeUtf8(msg);
  for (const auto& [k, v] : fields) {
    if (AllDigits(v)) {
      o[k] = std::stoll(v);
    } else {
      o[k] = api::SanitizeUtf8(v);
    }
  }
  std::string line = boost::json::serialize(o);
  line.push_back('\n');
  std::lock_guard lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace agvisor::server

// The E2B suite (e2b_suite.h): agvisord --e2b on 127.0.0.1 (any port), then node runs
// bench/e2b_suite.mjs against it and prints one JSON object, tabled here with the load.
#include "e2b_suite.h"

#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "bench_agvisord.h"

namespace agvisor {
namespace {

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "e2b suite: %s\n", why.c_str());
  std::exit(1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The 1-minute load average now.
std::string Load() {
  const std::string load = ReadFile("/proc/loadavg");
  return load.substr(0, load.find(' '));
}

}  // namespace

void E2bSuite(int runs) {
  const std::string web = std::string(AGVISOR_SOURCE_DIR) + "/web";
  if (!std::filesystem::exists(web + "/node_modules/e2b/package.json")) {
    Fail("the e2b package is missing: run `npm ci` in " + web);
  }
  char tmpl[] = "/tmp/agvisor-bench-e2b-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Fail("mkdtemp failed");
  const std::string dir = tmpl;
  auto daemon = StartBenchAgvisord(dir, {"--e2b", "--no-egress", "--listen", "127.0.0.1:0"});
  if (!daemon.ok()) {
    std::filesystem::remove_all(dir);
    Fail(daemon.error().ToString());
  }
  std::smatch m;
  const std::string log = ReadFile(dir + "/agvisord.log");
  static const std::regex kPort("\"tcp_port\":\"?([0-9]+)");
  if (!std::regex_search(log, m, kPort)) {
    StopBenchAgvisord(*daemon);
    std::filesystem::remove_all(dir);
    Fail("no tcp_port in agvisord's log: " + log);
  }
  const std::string url = "http://127.0.0.1:" + m[1].str();
  std::string token = ReadFile(dir + "/token");
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  std::fprintf(stderr, "e2b: agvisord at %s, %d samples per row (load %s) ...\n", url.c_str(), runs,
               Load().c_str());
  // Every value is ours (a loopback URL, hex, paths without quotes): single quotes suffice.
  const std::string cmd = "E2B_API_URL='" + url + "/e2b' E2B_SANDBOX_URL='" + url +
                          "' E2B_API_KEY='e2b_" + token + "' AGVISORD_URL='" + url +
                          "' AGVISORD_TOKEN='" + token + "' E2B_SDK='" + web +
                          "' E2B_BENCH_RUNS='" + std::to_string(runs) + "' node '" +
                          AGVISOR_BENCH_DIR + "/e2b_suite.mjs'";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (::pclose(p) != 0) out.clear();
  }
  StopBenchAgvisord(*daemon);
  std::filesystem::remove_all(dir);
  std::error_code ec;
  auto v = boost::json::parse(out, ec);
  if (ec || !v.is_object()) Fail("bench/e2b_suite.mjs failed (its stderr is above)");
  auto row = [&](const char* key) {
    const auto& r = v.as_object().at(key).as_object();
    return std::pair(r.at("p50").to_number<double>(), r.at("p95").to_number<double>());
  };
  std::printf("\n## E2B: the official SDK against agvisor's own exec (load %s)\n\n",
              Load().c_str());
  std::printf("| operation | p50 ms | p95 ms |\n| --- | --- | --- |\n");
  const std::pair<const char*, const char*> rows[] = {
      {"create_to_first_command_ms", "SDK: Sandbox.create + first commands.run('true')"},
      {"sdk_run_true_spaced_ms", "SDK: commands.run('true'), 200 ms apart"},
      {"agvisor_exec_true_spaced_ms", "agvisor exec `true`, 200 ms apart"},
      {"agvisor_exec_bash_login_true_spaced_ms",
       "agvisor exec `bash -l -c true` (what the SDK runs), 200 ms apart"},
      {"sdk_run_true_back_to_back_ms", "SDK: commands.run('true'), back to back"},
      {"agvisor_exec_true_back_to_back_ms", "agvisor exec `true`, back to back"},
  };
  for (const auto& [key, label] : rows) {
    auto [p50, p95] = row(key);
    std::printf("| %s | %.1f | %.1f |\n", label, p50, p95);
  }
  auto [sdk, _] = row("sdk_run_true_spaced_ms");
  auto [own, __] = row("agvisor_exec_true_spaced_ms");
  std::printf("\nSDK spaced p50 / agvisor exec spaced p50: %.2f (target: at most 2)\n", sdk / own);
}

}  // namespace agvisor

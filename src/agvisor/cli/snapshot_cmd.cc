// snapshot (and snapshot ls, snapshot rm), fork (docs/lifecycle.md, "Snapshots and forks").
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>

#include "agvisor/api/codec.h"
#include "agvisor/cli/common.h"
#include "agvisor/sandbox/snapshot.h"
#include "agvisor/sandbox/spec.h"

namespace agvisor::cli {
namespace {

// "1.2 GB" / "340.5 MB".
std::string Megabytes(std::uint64_t bytes) {
  char buf[48];
  if (bytes >= 1000000000) {
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return buf;
}

// Progress on stderr: the bytes checked and sent so far, at most once a second (a line each;
// on a terminal the line is rewritten in place).
std::function<void(std::uint64_t)> ProgressLine(const std::string& what) {
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  const bool tty = ::isatty(2) == 1;
  return [what, last, tty](std::uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::seconds(1)) return;
    *last = now;
    std::cerr << (tty ? "\r" : "") << "agvisor: " << EscapeForTerminal(what) << ": "
              << Megabytes(bytes) << " checked and sent" << (tty ? "" : "\n") << std::flush;
  };
}

boost::json::object SnapshotJson(const SnapshotResult& r) {
  boost::json::object o;
  api::ForEachSnapshotField(r, [&](const char* name, const auto& value) { o[name] = value; });
  return o;
}

// `snapshot ls`: the snapshots of the place, by tag. Returns the exit code.
int ListSnapshotsCommand(GlobalOptions& g) {
  auto place = g.GetPlace();
  using List = Result<std::vector<SnapshotInfo>>;
  List list = place.ok() ? (*place)->ListSnapshots() : List(place.error());
  if (!list.ok()) return ReportError(list.error());
  if (g.json) {
    boost::json::array a;
    for (const SnapshotInfo& s : *list) {
      boost::json::object o;
      api::ForEachSnapshotInfoField(s, [&](const char* name, const auto& v) { o[name] = v; });
      a.push_back(std::move(o));
    }
    std::cout << boost::json::serialize(a) << "\n";
    return 0;
  }
  std::printf("%-32s %-10s %-20s %-9s %s\n", "TAG", "SIZE", "CREATED", "WORKSPACE", "OF");
  for (const SnapshotInfo& s : *list) {
    char when[32] = "-";
    const std::time_t t = static_cast<std::time_t>(s.created_unix);
    std::tm tm{};
    if (s.created_unix > 0 && gmtime_r(&t, &tm)) std::strftime(when, sizeof when, "%F %TZ", &tm);
    std::printf(
        "%-32s %-10s %-20s %-9s %s\n", EscapeForTerminal(s.tag).c_str(),
        Megabytes(static_cast<std::uint64_t>(std::max<std::int64_t>(s.size_bytes, 0))).c_str(),
        when, s.workspace ? "yes" : "no", EscapeForTerminal(s.of).c_str());
  }
  return 0;
}

// `snapshot rm TAG...`: each removed in turn. Returns the last failure's exit code, else 0.
int RemoveSnapshotsCommand(GlobalOptions& g, const std::vector<std::string>& tags) {
  auto place = g.GetPlace();
  if (!place.ok()) return ReportError(place.error());
  int code = 0;
  for (const std::string& t : tags) {
    if (auto r = (*place)->RemoveSnapshot(t); !r.ok()) {
      code = ReportError(r.error());
    } else {
      std::cout << EscapeForTerminal(t) << "\n";
    }
  }
  return code;
}

}  // namespace

void AddSnapshot(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "snapshot");
  auto sandbox = std::make_shared<std::string>();
  auto image = std::make_shared<std::string>();
  auto workspace = std::make_shared<bool>(false);
  auto max_bytes = std::make_shared<std::string>("8g");
  auto make = [&g, image, workspace, max_bytes](SandboxHandle& sb) {
    auto cap = ParseMemorySize("--max-size", *max_bytes);
    if (!cap.ok()) return ReportError(cap.error());  // 0 and below refused there
    SnapshotOptions o;
    o.image = *image;
    o.include_workspace = *workspace;
    o.max_bytes = static_cast<std::uint64_t>(*cap);
    o.progress = ProgressLine("snapshot of " + sb.container_name());
    auto r = sb.Snapshot(o);
    if (::isatty(2) == 1) std::cerr << "\n";
    if (!r.ok()) return ReportError(r.error());
    if (g.json) {
      std::cout << boost::json::serialize(SnapshotJson(*r)) << "\n";
    } else {
      std::cerr << "agvisor: " << EscapeForTerminal(r->image) << ": " << Megabytes(r->bytes) << ", "
                << r->entries << " entries in " << r->seconds << " s ("
                << (r->layered ? "a layer of what changed over its image"
                               : "the whole file system: " + EscapeForTerminal(r->whole_because))
                << "); `agvisor create --image " << kSnapshotImagePrefix
                << EscapeForTerminal(r->image.substr(r->image.rfind(':') + 1))
                << "` starts from it\n";
      std::cout << EscapeForTerminal(r->image) << "\n";
    }
    return 0;
  };
  // Not required by CLI11: `snapshot ls` and `snapshot rm` take neither (checked below).
  cmd->add_option("sandbox", *sandbox, "sandbox name (or its agvisor-... container name)");
  cmd->add_option("tag", *image,
                  "the snapshot's tag (letters, digits, _ . -), made as agvisor/snapshot:TAG "
                  "(agvisord: its --snapshot-repository); an existing image of that name is "
                  "replaced only when it is a snapshot");
  cmd->add_flag("--workspace", *workspace,
                "include /workspace (default: left out; a named sandbox keeps it in its volume)");
  cmd->add_option("--max-size", *max_bytes,
                  "the most the snapshot's stream may carry, e.g. 500m, 8g; past it the snapshot "
                  "fails and no image is left")
      ->capture_default_str();
  AddCommand(*cmd, "snapshot ls")->callback([&g, exit_code] {
    *exit_code = ListSnapshotsCommand(g);
  });
  auto tags = std::make_shared<std::vector<std::string>>();
  auto* rm = AddCommand(*cmd, "snapshot rm");
  rm->add_option("tag", *tags, "the snapshots' tags (TAG, snapshot:TAG or agvisor/snapshot:TAG)")
      ->required();
  rm->callback([&g, exit_code, tags] { *exit_code = RemoveSnapshotsCommand(g, *tags); });
  cmd->callback([cmd, &g, exit_code, sandbox, image, make] {
    if (!cmd->get_subcommands().empty()) return;  // ls or rm ran
    if (sandbox->empty() || image->empty()) {
      *exit_code = ReportError(Error::InvalidArgument(
          "snapshot: give the sandbox and the tag (`agvisor snapshot NAME TAG`), or `snapshot "
          "ls`, or `snapshot rm TAG`"));
      return;
    }
    *exit_code = OnSandbox(g, *sandbox, make);
  });
}

void AddFork(CLI::App& app, GlobalOptions& g, int* exit_code) {
  auto* cmd = AddCommand(app, "fork");
  auto source = std::make_shared<std::string>();
  auto count = std::make_shared<int>(1);
  auto prefix = std::make_shared<std::string>();
  auto tag = std::make_shared<std::string>();
  auto max_bytes = std::make_shared<std::string>("8g");
  auto opts = std::make_shared<SpecOptions>();
  cmd->add_option("sandbox", *source, "the sandbox to fork")->required();
  cmd->add_option("-n,--count", *count, "how many forks (1-16)")->capture_default_str();
  cmd->add_option("--prefix", *prefix, "name the forks PREFIX-1..PREFIX-N (default NAME-fork)");
  cmd->add_option("--tag", *tag,
                  "the snapshot's tag, as for `snapshot` (default fork-NAME-<unix seconds>)");
  cmd->add_option("--max-size", *max_bytes, "the snapshot's size cap, as for `snapshot`")
      ->capture_default_str();
  opts->Add(*cmd);
  cmd->callback([&g, exit_code, source, count, prefix, tag, max_bytes, opts] {
    auto fail = [&](const Error& e) { *exit_code = ReportError(e); };
    auto spec = opts->Build(g);
    if (!spec.ok()) return fail(spec.error());
    if (spec->name || !spec->image.empty()) {
      return fail(Error::InvalidArgument(
          "fork: the forks are named by --prefix and made from the snapshot (--tag); --name "
          "and --image do not apply"));
    }
    auto cap = ParseMemorySize("--max-size", *max_bytes);
    if (!cap.ok()) return fail(cap.error());
    auto place = g.GetPlace();
    if (!place.ok()) return fail(place.error());
    const std::string cname = ResolveContainerName(*source);
    ForkOptions o;
    o.count = *count;
    o.prefix = *prefix;
    o.image = *tag;
    o.spec = *spec;
    o.max_bytes = static_cast<std::uint64_t>(*cap);
    o.progress = ProgressLine("snapshot of " + cname);
    auto r = (*place)->Fork(cname, o);
    if (::isatty(2) == 1) std::cerr << "\n";
    if (!r.ok()) return fail(r.error());
    if (g.json) {
      boost::json::object out;
      out["snapshot"] = SnapshotJson(r->snapshot);
      boost::json::array forks;
      for (const auto& c : r->sandboxes) forks.emplace_back(c.handle->container_name());
      out["sandboxes"] = std::move(forks);
      out["seconds"] = r->seconds;
      std::cout << boost::json::serialize(out) << "\n";
      return;
    }
    std::cerr << "agvisor: " << EscapeForTerminal(r->snapshot.image) << ": "
              << Megabytes(r->snapshot.bytes) << " in " << r->snapshot.seconds << " s; "
              << r->sandboxes.size() << " forks in " << r->seconds << " s in all\n";
    for (const auto& c : r->sandboxes) {
      std::cout << EscapeForTerminal(c.handle->container_name()) << "\n";
    }
  });
}

}  // namespace agvisor::cli

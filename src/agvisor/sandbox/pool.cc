#include "agvisor/sandbox/pool.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>

#include "agvisor/sandbox/instance_spec.h"
#include "agvisor/sandbox/runtime.h"
#include "agvisor/sandbox/runtime_local.h"

namespace agvisor {
namespace {

constexpr int kMaxSize = 64;
// Members end themselves this long after max_age even when nobody removes them (a process that
// died): the pool itself replaces them at max_age.
constexpr std::chrono::seconds kSafetyMargin{60};

std::uint64_t RandomBits() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  return rng();
}

std::string GiB(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(bytes) / (1LL << 30));
  return b;
}

Result<void> ValidateOptions(const PoolOptions& o) {
  AGVISOR_RETURN_IF_ERROR(ValidateSpec(o.spec));
  if (o.spec.name) {
    return Error::InvalidArgument("pool: spec.name must be unset (pool members are anonymous)");
  }
  if (o.spec.idle_action != "destroy") {
    return Error::InvalidArgument(
        "pool: spec.idle_action must be destroy: a pool's members are anonymous and end at "
        "their idle_ttl (give single sandboxes idle_action stop)");
  }
  if (o.spec.lifetime || o.spec.idle_ttl) {
    return Error::InvalidArgument(
        "pool: spec.lifetime and spec.idle_ttl must be unset: give them to Acquire, they count "
        "from the moment a sandbox is handed out");
  }
  if (o.size < 1 || o.size > kMaxSize) {
    return Error::InvalidArgument("pool: size " + std::to_string(o.size) + " is out of range: 1.." +
                                  std::to_string(kMaxSize));
  }
  if (o.max_age < std::chrono::seconds(10) || o.max_age > std::chrono::hours(24)) {
    return Error::InvalidArgument("pool: max_age " + std::to_string(o.max_age.count()) +
                                  " s is out of range: 10 s .. 24 h");
  }
  if (o.fill_parallelism < 1 || o.fill_parallelism > o.size) {
    return Error::InvalidArgument("pool: fill_parallelism " + std::to_string(o.fill_parallelism) +
                                  " is out of range: 1..size (" + std::to_string(o.size) + ")");
  }
  return Ok();
}

}  // namespace

Result<std::unique_ptr<Pool>> Pool::Create(std::shared_ptr<Runtime> runtime, PoolOptions options) {
  AGVISOR_RETURN_IF_ERROR(ValidateOptions(options));
  if (!runtime) return Error::InvalidArgument("pool: no runtime given (MakeRuntime makes one)");
  if (!options.spec.host.empty() && options.spec.host != runtime->host()) {
    return Error::InvalidArgument("pool: spec.host '" + options.spec.host +
                                  "' is not the host of the runtime it was given ('" +
                                  runtime->host() + "')");
  }
  const std::int64_t per_member =
      AGVISOR_TRY(ParseMemorySize("limits.memory", options.spec.limits.memory));
  // The platform, decided once for every member (unset: the host's default, reported by the
  // pool's info, e.g. "systrap" where the host has no ptrace runtime); refused now, not by every
  // member's create (runtime.h).
  if (options.spec.platform.empty()) {
    std::string shown_as_the_pools_platform;
    options.spec.platform =
        AGVISOR_TRY(runtime->DefaultPlatform(options.spec.runtime, &shown_as_the_pools_platform));
  }
  AGVISOR_RETURN_IF_ERROR(runtime->RequireGvisor(options.spec.runtime, options.spec.platform,
                                                 options.spec.network == "none"));
  const HostCapacity capacity = AGVISOR_TRY(runtime->Capacity());
  const std::int64_t want = per_member * options.size;
  {
    // The memory limits of the pools on this runtime together stay within the host's MemTotal.
    RuntimeLocal& local = runtime->local();
    std::lock_guard lock(local.mu);
    std::int64_t& reserved = local.pool_reserved_bytes;
    // 0: the runtime does not know; nothing to check against.
    const std::int64_t total = capacity.memory_bytes;
    if (total > 0 && reserved + want > total) {
      const std::int64_t fits = std::max<std::int64_t>(0, total - reserved) / per_member;
      const std::string host = runtime->host().empty() ? std::string("this host") : runtime->host();
      return Error::ResourceExhausted(
          "pool: " + std::to_string(options.size) +
          " members with limits.memory=" + options.spec.limits.memory + " need " + GiB(want) +
          " of memory, but " + host + " has " + GiB(total) + " (" + capacity.source + ")" +
          (reserved > 0 ? ", of which other pools on it hold " + GiB(reserved) : "") +
          ": use size <= " + std::to_string(fits) + " or a smaller limits.memory");
    }
    reserved += want;
  }
  char id[17];
  std::snprintf(id, sizeof id, "%016" PRIx64, RandomBits());
  auto pool = std::unique_ptr<Pool>(new Pool(std::move(runtime), std::move(options), id, want));
  for (int i = 0; i < pool->options_.fill_parallelism; ++i) {
    pool->threads_.emplace_back([p = pool.get()] { p->FillLoop(); });
  }
  pool->threads_.emplace_back([p = pool.get()] { p->MaintainLoop(); });
  return pool;
}

Pool::Pool(std::shared_ptr<Runtime> runtime, PoolOptions options, std::string id,
           std::int64_t reserved_bytes)
    : runtime_(std::move(runtime)),
      options_(std::move(options)),
      id_(std::move(id)),
      reserved_bytes_(reserved_bytes) {}

Pool::~Pool() {
  Close();
  RuntimeLocal& local = runtime_->local();
  std::lock_guard lock(local.mu);
  local.pool_reserved_bytes -= reserved_bytes_;
}

bool Pool::NeedsMember() const {
  return static_cast<int>(ready_.size()) + starting_ < options_.size;
}

void Pool::FillLoop() {
  SandboxSpec spec = options_.spec;
  spec.lifetime = (options_.max_age + kSafetyMargin).count();
  const std::map<std::string, std::string> labels{{std::string(kLabelPool), id_}};
  std::unique_lock lock(mu_);
  for (;;) {
    if (closed_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!NeedsMember()) {
      cv_.wait(lock);
      continue;
    }
    if (now < retry_after_) {
      cv_.wait_until(lock, retry_after_);
      continue;
    }
    ++starting_;
    lock.unlock();
    auto sb = Sandbox::Create(runtime_, spec, labels);
    const auto started = std::chrono::steady_clock::now();
    lock.lock();
    --starting_;
    if (!sb.ok()) {
      ++stats_.start_failures;
      stats_.last_error = sb.error().ToString();
      // Back off (0.25 s doubling to 30 s) so a broken host or image is not hammered.
      ++failures_in_row_;
      auto backoff = std::chrono::milliseconds(250L << std::min(failures_in_row_ - 1, 7));
      retry_after_ =
          started + std::min<std::chrono::milliseconds>(backoff, std::chrono::seconds(30));
      ready_cv_.notify_all();
      continue;
    }
    failures_in_row_ = 0;
    ++stats_.started;
    if (closed_) {
      lock.unlock();
      (void)(*sb)->Stop();
      return;
    }
    // Up to a tenth less than max_age, so members started together are not all replaced at once.
    const auto age = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        options_.max_age - options_.max_age * static_cast<double>(RandomBits() % 1000) / 10000);
    ready_.push_back({std::move(*sb), started, age});
    ready_cv_.notify_all();
  }
}

void Pool::MaintainLoop() {
  std::unique_lock lock(mu_);
  while (!closed_) {
    cv_.wait_for(lock, std::chrono::seconds(1));
    if (closed_) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<Sandbox>> doomed = std::move(doomed_);
    doomed_.clear();
    for (auto it = ready_.begin(); it != ready_.end();) {
      const bool dead = !it->sandbox->ChannelOpen();
      const bool stale = now - it->started > it->max_age;
      if (dead || stale) {
        ++(dead ? stats_.discarded : stats_.recycled);
        doomed.push_back(std::move(it->sandbox));
        it = ready_.erase(it);
      } else {
        ++it;
      }
    }
    if (doomed.empty()) continue;
    cv_.notify_all();  // fill workers: start replacements while the old ones are removed
    lock.unlock();
    RemoveMembers(std::move(doomed));
    lock.lock();
  }
}

void Pool::RemoveMembers(std::vector<std::unique_ptr<Sandbox>> members) {
  // In parallel: each removal is a Docker round trip of ~0.1-0.3 s.
  std::vector<std::thread> removers;
  for (auto& m : members) {
    removers.emplace_back([sb = std::move(m)] { (void)sb->Stop(); });
  }
  for (auto& t : removers) t.join();
}

Result<std::unique_ptr<Sandbox>> Pool::Acquire(const AcquireOptions& o) {
  if (auto v = ValidateDeadlines(o.lifetime, o.idle_ttl); !v.ok()) {
    return v.error().WithContext("pool acquire");
  }
  const auto deadline = std::chrono::steady_clock::now() + o.wait;
  std::unique_lock lock(mu_);
  for (;;) {
    if (closed_) return Error::Unavailable("pool " + id_ + " is closed");
    if (ready_.empty()) {
      if (std::chrono::steady_clock::now() < deadline && (starting_ > 0 || NeedsMember())) {
        ready_cv_.wait_until(lock, deadline);
        continue;
      }
      break;
    }
    Member m = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();  // a fill worker starts the replacement now
    lock.unlock();
    // A member whose sandbox died is never handed out: its channel closed, or the deadlines
    // cannot be set.
    bool ok = m.sandbox->ChannelOpen() && m.sandbox->SetDeadlines(o.lifetime, o.idle_ttl).ok();
    lock.lock();
    if (ok) {
      ++stats_.acquired;
      return std::move(m.sandbox);
    }
    ++stats_.discarded;
    if (closed_) {  // Close() has drained doomed_ already
      lock.unlock();
      (void)m.sandbox->Stop();
      return Error::Unavailable("pool " + id_ + " is closed");
    }
    doomed_.push_back(std::move(m.sandbox));  // removed by the maintenance thread
  }
  if (!o.cold_create) {
    return Error::ResourceExhausted("pool " + id_ + " has no ready member (" +
                                    std::to_string(starting_) +
                                    " starting): retry, wait longer, or allow a cold create");
  }
  ++stats_.cold;
  lock.unlock();
  SandboxSpec spec = options_.spec;
  spec.lifetime = o.lifetime;
  spec.idle_ttl = o.idle_ttl;
  return Sandbox::Create(runtime_, spec);
}

Result<void> Pool::WaitReady(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  bool done = ready_cv_.wait_for(
      lock, timeout, [&] { return closed_ || static_cast<int>(ready_.size()) >= options_.size; });
  if (closed_) return Error::Unavailable("pool " + id_ + " is closed");
  if (!done) {
    return Error::Timeout(
        "pool " + id_ + ": " + std::to_string(ready_.size()) + " of " +
        std::to_string(options_.size) + " members ready after " + std::to_string(timeout.count()) +
        " ms" + (stats_.last_error.empty() ? "" : "; last start error: " + stats_.last_error));
  }
  return Ok();
}

void Pool::Close() {
  std::vector<std::unique_ptr<Sandbox>> members;
  {
    std::lock_guard lock(mu_);
    if (closed_ && threads_.empty()) return;
    closed_ = true;
    cv_.notify_all();
    ready_cv_.notify_all();
  }
  // Fill workers finish the start they are in (and remove what it made).
  for (auto& t : threads_) t.join();
  threads_.clear();
  {
    std::lock_guard lock(mu_);
    for (auto& m : ready_) members.push_back(std::move(m.sandbox));
    ready_.clear();
    for (auto& d : doomed_) members.push_back(std::move(d));
    doomed_.clear();
  }
  RemoveMembers(std::move(members));
}

PoolStats Pool::Stats() const {
  std::lock_guard lock(mu_);
  PoolStats s = stats_;
  s.ready = static_cast<int>(ready_.size());
  s.starting = starting_;
  return s;
}

PoolInfo Pool::Info(std::string name) const {
  return PoolInfo{.name = std::move(name), .id = id_, .options = options_, .stats = Stats()};
}

}  // namespace agvisor

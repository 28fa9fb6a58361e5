#include "agvisor/server/egress_log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <filesystem>

namespace agvisor::server {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSuffix = ".jsonl";

// The whole file, at most `max` bytes (a file is rotated near file_bytes; more is not ours).
std::string ReadAtMost(const std::string& path, std::size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return {};
  std::string out;
  char buf[64 * 1024];
  while (out.size() < max) {
    const ssize_t n = ::read(fd.get(), buf, std::min(sizeof buf, max - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

bool IsLogKey(std::string_view key) {
  return !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

Result<std::unique_ptr<EgressLogFiles>> EgressLogFiles::Open(std::string dir,
                                                             EgressLogLimits limits) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error::Unavailable("egress log directory " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0) {
    return Error::FromErrno("egress log directory " + dir + ": chmod 0700", errno);
  }
  limits.file_bytes = std::max<std::size_t>(limits.file_bytes, 4096);
  limits.files = std::max<std::size_t>(limits.files, 1);
  return std::unique_ptr<EgressLogFiles>(new EgressLogFiles(std::move(dir), limits));
}

std::string EgressLogFiles::PathOf(const std::string& key, std::size_t generation) const {
  std::string p = dir_ + "/" + key + std::string(kSuffix);
  if (generation > 0) p += "." + std::to_string(generation);
  return p;
}

Result<void> EgressLogFiles::Rotate(const std::string& key) {
  open_.erase(key);
  // With one file, the current one is simply started again.
  for (std::size_t g = limits_.files - 1; g >= 1; --g) {
    const std::string from = PathOf(key, g - 1);
    if (::rename(from.c_str(), PathOf(key, g).c_str()) != 0 && errno != ENOENT) {
      return Error::FromErrno("egress log: rename " + from, errno);
    }
  }
  if (limits_.files == 1 && ::unlink(PathOf(key, 0).c_str()) != 0 && errno != ENOENT) {
    return Error::FromErrno("egress log: unlink " + PathOf(key, 0), errno);
  }
  return Ok();
}

Result<void> EgressLogFiles::Append(const std::string& key, std::string_view line) {
  if (!IsLogKey(key)) return Error::InvalidArgument("egress log: not a network id: " + key);
  std::string out;
  out.reserve(line.size() + 1);
  out.append(line);
  out += '\n';
  std::lock_guard lock(mu_);
  auto it = open_.find(key);
  if (it != open_.end() && it->second.size > 0 &&
      it->second.size + out.size() > limits_.file_bytes) {
    AGVISOR_RETURN_IF_ERROR(Rotate(key));
    it = open_.end();
  }
  if (it == open_.end()) {
    if (open_.size() >= kMaxOpenLogFiles) {
      auto oldest = std::min_element(open_.begin(), open_.end(), [](const auto& a, const auto& b) {
        return a.second.last_write < b.second.last_write;
      });
      open_.erase(oldest);
    }
    const std::string path = PathOf(key, 0);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return Error::FromErrno("egress log: open " + path, errno);
    struct stat st {};
    // A file left by an earlier agvisord (or made by someone else) is made ours alone.
    if (::fstat(fd.get(), &st) != 0 || ::fchmod(fd.get(), 0600) != 0) {
      return Error::FromErrno("egress log: fstat/fchmod " + path, errno);
    }
    Writer o{.fd = std::move(fd), .size = static_cast<std::uint64_t>(st.st_size)};
    if (o.size > 0 && o.size + out.size() > limits_.file_bytes) {
      o.fd.reset();
      AGVISOR_RETURN_IF_ERROR(Rotate(key));
      o.fd = UniqueFd(
          ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!o.fd) return Error::FromErrno("egress log: open " + path, errno);
      o.size = 0;
    }
    it = open_.emplace(key, std::move(o)).first;
  }
  Writer& f = it->second;
  f.last_write = ++writes_;
  // One write of the whole line (O_APPEND): a line is never interleaved with another.
  std::string_view rest = out;
  while (!rest.empty()) {
    const ssize_t n = ::write(f.fd.get(), rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      open_.erase(it);
      return Error::FromErrno("egress log: write " + PathOf(key, 0), err);
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
    f.size += static_cast<std::uint64_t>(n);
  }
  return Ok();
}

std::vector<std::string> EgressLogFiles::Last(const std::string& key, std::size_t n) const {
  if (!IsLogKey(key) || n == 0) return {};
  std::deque<std::string> lines;  // oldest first
  // Read without mu_: the enforcers' threads append under it and must not wait for megabytes
  // to be read. A rotation in between (renames are atomic) can repeat or skip the lines of one
  // file at the seam; a reader of the log accepts that.
  for (std::size_t g = 0; g < limits_.files && lines.size() < n; ++g) {
    const std::string text = ReadAtMost(PathOf(key, g), limits_.file_bytes + (64 << 10));
    // Complete lines only, newest last; taken from the end while more are wanted.
    std::size_t end = text.rfind('\n');
    std::vector<std::string> from_file;
    while (end != std::string::npos && lines.size() + from_file.size() < n) {
      const std::size_t start = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
      const std::size_t begin = start == std::string::npos ? 0 : start + 1;
      if (end > begin) from_file.push_back(text.substr(begin, end - begin));
      if (start == std::string::npos) break;
      end = start;
    }
    for (auto& l : from_file) lines.push_front(std::move(l));
  }
  return {std::make_move_iterator(lines.begin()), std::make_move_iterator(lines.end())};
}

void EgressLogFiles::Close(const std::string& key) {
  std::lock_guard lock(mu_);
  open_.erase(key);
}

void EgressLogFiles::Remove(const std::string& key) {
  if (!IsLogKey(key)) return;
  std::lock_guard lock(mu_);
  open_.erase(key);
  // Every generation a larger `files` of an earlier agvisord may have left, too.
  for (std::size_t g = 0; g < std::max<std::size_t>(limits_.files, 16); ++g) {
    ::unlink(PathOf(key, g).c_str());
  }
}

std::vector<std::string> EgressLogFiles::Keys() const {
  std::vector<std::string> keys;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(kSuffix)) continue;
    const std::string key = name.substr(0, name.size() - kSuffix.size());
    if (IsLogKey(key)) keys.push_back(key);
  }
  return keys;
}

}  // namespace agvisor::server

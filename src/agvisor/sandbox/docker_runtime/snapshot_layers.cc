#include "agvisor/sandbox/docker_runtime/snapshot_layers.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "agvisor/base/fs.h"
#include "agvisor/base/tar.h"
#include "agvisor/base/unique_fd.h"
#include "agvisor/docker/client.h"
#include "agvisor/docker/codec.h"

namespace agvisor {
namespace {

Error ReadError(const std::string& what, int err) {
  if (err == EACCES || err == EPERM) {
    return Error(ErrorCode::kPermissionDenied,
                 "list the image's files: " + what +
                     ": permission denied (agvisor runs as a "
                     "user who may not read the Docker host's image directories)")
        .set_errno(err);
  }
  if (err == ENOENT) return Error::NotFound("list the image's files: " + what + ": not found");
  return Error::FromErrno("list the image's files: " + what, err);
}

struct TreeWalk {
  std::set<std::string, std::less<>> excluded;
  std::string out;
  std::uint64_t entries = 0;
  std::uint64_t max_entries = 0;

  // Lists directory `fd` (the image's `path`, "" for the root), depth first when `deep`.
  Result<void> Walk(int fd, const std::string& path, bool deep = true) {
    auto names = AGVISOR_TRY(ReadDirNames(fd, [&](std::string_view call, int err) {
      return ReadError(std::string(call) + " " + (path.empty() ? "/" : path), err);
    }));
    for (const std::string& name : names) {
      const std::string child = path + "/" + name;
      if (++entries > max_entries) {
        return Error::ResourceExhausted("list the image's files: more than " +
                                        std::to_string(max_entries) + " entries");
      }
      out += child;
      out += '\0';
      if (!deep) continue;
      struct stat st;
      if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return ReadError("stat " + child, errno);
      }
      if (!S_ISDIR(st.st_mode)) continue;
      const int sub = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) return ReadError("open " + child, errno);
      UniqueFd owned(sub);
      // An excluded directory: its own names only (the layer whites them out), not below.
      AGVISOR_RETURN_IF_ERROR(Walk(owned.get(), child, !excluded.contains(child)));
    }
    return Ok();
  }
};

std::string Hex(const unsigned char* bytes, unsigned n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += kDigits[bytes[i] >> 4];
    s += kDigits[bytes[i] & 15];
  }
  return s;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  return Hex(digest, n);
}

// An unnamed file in the temporary directory (gone when closed), or a named one unlinked at once
// where O_TMPFILE is not supported.
Result<UniqueFd> TemporaryFile() {
  const std::string dir = std::filesystem::temp_directory_path().string();
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return UniqueFd(fd);
  std::string tmpl = dir + "/agvisor-layer-XXXXXX";
  fd = mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return Error::FromErrno("layered snapshot: a temporary file in " + dir, errno);
  unlink(tmpl.c_str());
  return UniqueFd(fd);
}

std::string NowRfc3339() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Result<std::string> ListImageTree(const std::string& root, const std::vector<std::string>& excludes,
                                  std::uint64_t* entries, std::uint64_t max_entries) {
  TreeWalk walk;
  walk.max_entries = max_entries;
  for (std::string e : excludes) {
    while (e.size() > 1 && e.back() == '/') e.pop_back();
    walk.excluded.insert(e);
  }
  const int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ReadError("open " + root, errno);
  UniqueFd owned(fd);
  AGVISOR_RETURN_IF_ERROR(walk.Walk(owned.get(), ""));
  walk.out += '\0';
  if (entries != nullptr) *entries = walk.entries;
  return std::move(walk.out);
}

std::optional<std::string> SecondsDotNanos(std::string_view rfc3339) {
  std::tm tm{};
  const std::string s(rfc3339);
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  std::string nanos;
  if (*end == '.') {
    for (++end; *end >= '0' && *end <= '9'; ++end) {
      if (nanos.size() < 9) nanos += *end;
    }
  }
  if (std::string_view(end) != "Z") return std::nullopt;
  nanos.resize(9, '0');
  return std::to_string(static_cast<std::int64_t>(::timegm(&tm))) + "." + nanos;
}

Result<std::vector<std::string>> SnapshotLayersOf(const std::vector<std::string>& image_layers,
                                                  bool has_agent_layer) {
  if (!has_agent_layer || image_layers.size() < 2) {
    return Error::Unsupported(
        "layered snapshot: the sandbox's image has no agent layer of agvisor's on top");
  }
  if (image_layers.size() - 1 >= kMaxSnapshotLayers) {
    return Error::Unsupported("layered snapshot: the image has " +
                              std::to_string(image_layers.size() - 1) +
                              " layers already (a snapshot of many snapshots); the whole file "
                              "system goes into one layer instead");
  }
  return std::vector<std::string>(image_layers.begin(), image_layers.end() - 1);
}

Result<std::string> LoadLayeredImage(docker::Client& docker, std::string_view ref,
                                     const ImageConfig& config,
                                     const std::vector<std::string>& base_layers,
                                     const channel::ByteSource& layer) {
  const std::string what = "layered snapshot " + std::string(ref);
  const std::size_t colon = ref.rfind(':');
  if (colon == std::string_view::npos || ref.find('/', colon) != std::string_view::npos) {
    return Error::InvalidArgument(what + ": needs a tag (repo:tag)");
  }
  // 1. The layer into a temporary file, hashed on the way: its diff id goes in the
  // configuration, and the archive's header of it needs its size.
  UniqueFd file = AGVISOR_TRY(TemporaryFile());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!md || EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr) != 1) {
    return Error::Internal(what + ": sha256 unavailable");
  }
  std::uint64_t size = 0;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const std::size_t n = AGVISOR_TRY(layer(std::span<char>(buf.data(), buf.size())));
    if (n == 0) break;
    EVP_DigestUpdate(md.get(), buf.data(), n);
    for (std::size_t done = 0; done < n;) {
      const ssize_t w = ::write(file.get(), buf.data() + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        const int err = errno;
        if (err == ENOSPC || err == EDQUOT) {
          return Error::ResourceExhausted(what +
                                          ": the temporary file of the layer: no room "
                                          "left in " +
                                          std::filesystem::temp_directory_path().string());
        }
        return Error::FromErrno(what + ": write the temporary file of the layer", err);
      }
      done += static_cast<std::size_t>(w);
    }
    size += n;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned digest_len = 0;
  EVP_DigestFinal_ex(md.get(), digest, &digest_len);

  // 2. The configuration and the manifest.
  docker::LayeredImage image;
  image.repo_tag = std::string(ref);
  image.base_layers = base_layers;
  image.layer_diff_id = "sha256:" + Hex(digest, digest_len);
  const docker::VersionInfo v = AGVISOR_TRY(docker.Version());
  image.architecture = v.arch.empty() ? "amd64" : v.arch;
  image.os = v.os.empty() ? "linux" : v.os;
  image.created = NowRfc3339();
  image.env = config.env;
  image.working_dir = config.working_dir;
  image.user = config.user;
  image.labels = config.labels;
  const std::string config_json = docker::EncodeLayeredImageConfig(image);
  const std::string id_hex = Sha256Hex(config_json);
  const std::string config_name = id_hex + ".json";
  const std::string layer_name = "layer/layer.tar";
  const std::string manifest = docker::EncodeLayeredImageManifest(image, config_name, layer_name);

  // 3. The archive, streamed: the layer's header, its bytes from the file, the rest.
  std::string head = AGVISOR_TRY(TarWriter::FileHeader(layer_name, size));
  TarWriter tail_writer;
  AGVISOR_RETURN_IF_ERROR(tail_writer.AddFile(config_name, config_json));
  AGVISOR_RETURN_IF_ERROR(tail_writer.AddFile("manifest.json", manifest));
  std::string tail = std::string(TarWriter::Padding(size), '\0') + tail_writer.Finish();
  if (lseek(file.get(), 0, SEEK_SET) != 0) {
    return Error::FromErrno(what + ": rewind the temporary file of the layer", errno);
  }
  std::uint64_t file_left = size;
  std::size_t head_pos = 0, tail_pos = 0;
  http::BodySource body = [&](std::span<char> out) -> Result<std::size_t> {
    if (head_pos < head.size()) {
      const std::size_t n = std::min(out.size(), head.size() - head_pos);
      std::memcpy(out.data(), head.data() + head_pos, n);
      head_pos += n;
      return n;
    }
    if (file_left > 0) {
      const std::size_t want =
          static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), file_left));
      ssize_t r;
      do {
        r = ::read(file.get(), out.data(), want);
      } while (r < 0 && errno == EINTR);
      if (r <= 0) {
        return Error::FromErrno(what + ": read the temporary file of the layer",
                                r < 0 ? errno : EIO);
      }
      file_left -= static_cast<std::uint64_t>(r);
      return static_cast<std::size_t>(r);
    }
    const std::size_t n = std::min(out.size(), tail.size() - tail_pos);
    std::memcpy(out.data(), tail.data() + tail_pos, n);
    tail_pos += n;
    return n;
  };
  AGVISOR_RETURN_IF_ERROR(docker.LoadImage(body, ref));
  return "sha256:" + id_hex;
}

}  // namespace agvisor

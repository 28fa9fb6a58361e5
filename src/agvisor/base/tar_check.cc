#include "agvisor/base/tar_check.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "agvisor/base/strings.h"
#include "agvisor/base/tar_header.h"

namespace agvisor {
namespace {

using tar::Field;
using tar::kBlock;
using tar::PadOf;
constexpr std::uint64_t kMaxPaxBody = 1024 * 1024;
constexpr std::size_t kMaxName = 4096;
constexpr std::size_t kMaxComponent = 255;

bool AllDigits(std::string_view v, std::size_t max_len) {
  return !v.empty() && v.size() <= max_len &&
         std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A pax time: [-]digits[.digits].
bool PaxTime(std::string_view v) {
  if (!v.empty() && v.front() == '-') v.remove_prefix(1);
  const std::size_t dot = v.find('.');
  if (dot == std::string_view::npos) return AllDigits(v, 19);
  return AllDigits(v.substr(0, dot), 19) && AllDigits(v.substr(dot + 1), 19);
}

// The components of a canonical name ("./a/b", "./a/b/" for a directory when `dir`; "./" is
// the root and has none). nullopt with `why` set when it is not canonical.
std::optional<std::vector<std::string>> Canonical(std::string_view name, bool dir, std::string* why,
                                                  bool whiteout_ok = false) {
  if (name.find('\0') != std::string_view::npos) {
    *why = "contains a NUL byte";
    return std::nullopt;
  }
  if (name.size() > kMaxName) {
    *why = "is longer than " + std::to_string(kMaxName) + " bytes";
    return std::nullopt;
  }
  if (!name.starts_with("./")) {
    *why = name.starts_with("/") ? "is absolute" : "does not start with './'";
    return std::nullopt;
  }
  name.remove_prefix(2);
  if (dir) {
    if (name.empty()) return std::vector<std::string>{};
    if (name.back() != '/') {
      *why = "is a directory whose name does not end in '/'";
      return std::nullopt;
    }
    name.remove_suffix(1);
  } else if (name.empty() || name.back() == '/') {
    *why = "ends in '/' but is not a directory";
    return std::nullopt;
  }
  std::vector<std::string> comps;
  const std::vector<std::string_view> parts = Split(name, '/');
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view c = parts[i];
    if (c.empty()) {
      *why = "has an empty component";
      return std::nullopt;
    }
    if (c == "..") {
      *why = "has a '..' component";
      return std::nullopt;
    }
    if (c == ".") {
      *why = "has a '.' component";
      return std::nullopt;
    }
    if (c.size() > kMaxComponent) {
      *why = "has a component longer than " + std::to_string(kMaxComponent) + " bytes";
      return std::nullopt;
    }
    // A layer's whiteout (TarCheckOptions::whiteouts): ".wh.NAME", the last component only,
    // never ".wh..wh..opq" (an opaque directory) nor a whiteout of a whiteout.
    if (whiteout_ok && i + 1 == parts.size() && c.size() > 4 && !c.substr(4).starts_with(".wh.")) {
      comps.emplace_back(c);
      continue;
    }
    if (c.starts_with(".wh.")) {
      *why = "has a component starting with '.wh.' (Docker reads those as whiteouts)";
      return std::nullopt;
    }
    comps.emplace_back(c);
  }
  return comps;
}

std::string JoinComps(const std::vector<std::string>& comps, std::size_t n) {
  std::string s = ".";
  for (std::size_t i = 0; i < n; ++i) s += "/" + comps[i];
  return s;
}

}  // namespace

Result<void> TarStreamChecker::Fail(Error e) {
  failed_ = true;
  error_ = e;
  return e;
}

Result<void> TarStreamChecker::Remember(const std::string& name, bool symlink) {
  const bool inserted =
      names_.insert_or_assign(name, symlink ? Kind::kSymlink : Kind::kFile).second;
  if (inserted) bookkeeping_ += name.size() + 64;
  if (bookkeeping_ > options_.max_bookkeeping_bytes) {
    return Error::ResourceExhausted("tar entry '" + name +
                                    "': the archive has more files and symlinks than the check "
                                    "keeps track of (" +
                                    std::to_string(names_.size()) + " names, bound " +
                                    std::to_string(options_.max_bookkeeping_bytes) + " bytes)");
  }
  return Ok();
}

Result<void> TarStreamChecker::OnPaxBody() {
  std::string_view b = pax_body_;
  auto bad = [&](const std::string& why) {
    return Error::InvalidArgument("tar: pax header after '" + last_name_ + "': " + why +
                                  " (refused)");
  };
  while (!b.empty()) {
    auto record = tar::NextPaxRecord(b);
    if (!record.ok()) return bad(record.error().message());
    const auto [key, value] = *record;
    if (value.find('\0') != std::string_view::npos) {
      return bad("record '" + std::string(key) + "' contains a NUL byte");
    }
    if (key == "path") {
      pax_path_.emplace(value);
    } else if (key == "linkpath") {
      pax_link_.emplace(value);
    } else if (key == "size") {
      if (!AllDigits(value, 19)) return bad("size '" + std::string(value) + "' is not a number");
      std::uint64_t size = 0;
      for (char c : value) size = size * 10 + static_cast<std::uint64_t>(c - '0');
      pax_size_ = size;
    } else if (key == "mtime" || key == "atime" || key == "ctime") {
      if (!PaxTime(value)) return bad(std::string(key) + " '" + std::string(value) + "'");
    } else if (key == "uid" || key == "gid") {
      if (!AllDigits(value, 19)) return bad(std::string(key) + " '" + std::string(value) + "'");
    } else if (key == "uname" || key == "gname") {
      if (value.size() > 256) return bad(std::string(key) + " longer than 256 bytes");
    } else {
      return bad("record '" + std::string(key.substr(0, 64)) +
                 "' is not one the snapshot format uses (extended attributes, sparse files and "
                 "other extensions are refused)");
    }
  }
  pax_body_.clear();
  return Ok();
}

Result<void> TarStreamChecker::OnHeader() {
  const char* h = block_.data();
  const std::string after =
      last_name_.empty() ? "at the start of the stream" : "after entry '" + last_name_ + "'";
  if (tar::AllZero(block_)) {
    if (has_pax_) {
      return Error::InvalidArgument("tar: a pax header " + after + " is followed by the end");
    }
    if (stats_.entries == 0) {
      return Error::InvalidArgument("tar: the stream ends before its first entry");
    }
    if (++zero_blocks_ == 2) state_ = State::kEnded;
    return Ok();
  }
  if (zero_blocks_ != 0) return Error::InvalidArgument("tar: a lone zero block " + after);
  // Numeric fields as the writer makes them: octal only, no base-256 (other readers accept it;
  // the writer never makes it).
  auto stored = tar::ParseOctal(h + 148, 8);
  if (!stored || *stored != tar::HeaderChecksums(h).sum) {
    return Error::InvalidArgument("tar: bad header checksum " + after +
                                  " (not a tar stream, or corrupt)");
  }
  if (std::memcmp(h + 257,
                  "ustar\0"
                  "00",
                  8) != 0) {
    return Error::InvalidArgument("tar: header " + after +
                                  " is not POSIX ustar (GNU and old formats are refused)");
  }
  if (!tar::AllZero(std::string_view(h + 500, kBlock - 500))) {
    return Error::InvalidArgument("tar: header " + after +
                                  " has bytes in its unused tail (a star trailer?) (refused)");
  }
  std::string name = Field(h, 100);
  if (h[345] != '\0') {
    return Error::InvalidArgument("tar entry '" + name +
                                  "': uses the ustar name prefix (refused: long names come in "
                                  "pax headers)");
  }
  auto mode = tar::ParseOctal(h + 100, 8);
  auto uid = tar::ParseOctal(h + 108, 8);
  auto gid = tar::ParseOctal(h + 116, 8);
  auto size = tar::ParseOctal(h + 124, 12);
  auto mtime = tar::ParseOctal(h + 136, 12);
  if (!mode || !uid || !gid || !size || !mtime || *mode > 07777) {
    return Error::InvalidArgument("tar entry '" + name + "': malformed numeric field");
  }
  const char type = h[156];
  const std::uint64_t left = options_.max_bytes - stats_.bytes;  // bytes not yet accepted
  if (type == 'x') {
    if (has_pax_) {
      return Error::InvalidArgument("tar: two pax headers in a row " + after + " (refused)");
    }
    if (*size > kMaxPaxBody) {
      return Error::InvalidArgument("tar: pax header of " + std::to_string(*size) + " bytes " +
                                    after + " exceeds " + std::to_string(kMaxPaxBody));
    }
    has_pax_ = true;
    data_left_ = *size;
    pad_left_ = PadOf(*size);
    state_ = data_left_ ? State::kPaxBody : (pad_left_ ? State::kPadding : State::kHeader);
    return Ok();
  }
  std::string link = Field(h + 157, 100);
  std::uint64_t data = *size;
  if (has_pax_) {
    name = pax_path_.value_or(name);
    link = pax_link_.value_or(link);
    data = pax_size_.value_or(data);
    has_pax_ = false;
    pax_path_.reset();
    pax_link_.reset();
    pax_size_.reset();
  }
  last_name_ = name.substr(0, 512);
  const std::string entry = "tar entry '" + last_name_ + "': ";
  AGVISOR_RETURN_IF_ERROR(tar::CheckEntryType(type, last_name_, /*legacy_files=*/false));
  std::string why;
  auto comps = Canonical(name, type == '5', &why, options_.whiteouts && type == '0' && data == 0);
  if (!comps) return Error::InvalidArgument(entry + "name " + why + " (refused)");
  if (stats_.entries == 0 && !(type == '5' && comps->empty())) {
    return Error::InvalidArgument(entry + "the first entry must be the root directory './'");
  }
  if (stats_.entries != 0 && comps->empty()) {
    return Error::InvalidArgument(entry + "the root directory comes again (refused)");
  }
  if (type != '0' && data != 0) {
    return Error::InvalidArgument(entry + "a directory, symlink or hard link with a size of " +
                                  std::to_string(data) + " (refused: readers disagree on it)");
  }
  // The whole entry (header already counted by Push) must fit in the cap.
  if (data > left || PadOf(data) > left - data) {
    return Error::ResourceExhausted(entry + "its " + std::to_string(data) +
                                    " bytes would pass the snapshot's size cap of " +
                                    std::to_string(options_.max_bytes) + " bytes (refused)");
  }
  // Never through a symlink of this archive.
  for (std::size_t i = 1; i < comps->size(); ++i) {
    const std::string parent = JoinComps(*comps, i);
    auto it = names_.find(parent);
    if (it != names_.end() && it->second == Kind::kSymlink) {
      return Error::InvalidArgument(entry + "its path goes through the symlink '" + parent +
                                    "' of this archive (refused: links are never followed)");
    }
  }
  const std::string key = JoinComps(*comps, comps->size());
  ++stats_.entries;
  if (!comps->empty() && comps->back().starts_with(".wh.")) {
    ++stats_.whiteouts;  // an empty file of a layer (no name to remember: nothing links to it)
    data_left_ = 0;
    pad_left_ = 0;
    state_ = State::kHeader;
    return Ok();
  }
  if (type == '5') {
    ++stats_.directories;
  } else if (type == '0') {
    ++stats_.files;
    stats_.file_bytes += data;
    AGVISOR_RETURN_IF_ERROR(Remember(key, false));
  } else if (type == '2') {
    if (link.empty() || link.size() > kMaxName || link.find('\0') != std::string::npos) {
      return Error::InvalidArgument(entry + "symlink target is empty, too long or has a NUL");
    }
    ++stats_.symlinks;
    AGVISOR_RETURN_IF_ERROR(Remember(key, true));
  } else {
    std::string twhy;
    auto target = Canonical(link, false, &twhy);
    if (!target) {
      return Error::InvalidArgument(entry + "hard link target '" + link.substr(0, 512) + "' " +
                                    twhy + " (refused)");
    }
    auto it = names_.find(JoinComps(*target, target->size()));
    if (it == names_.end()) {
      return Error::InvalidArgument(entry + "hard link target '" + link.substr(0, 512) +
                                    "' is not an earlier file of this archive (refused)");
    }
    ++stats_.hard_links;
    AGVISOR_RETURN_IF_ERROR(Remember(key, it->second == Kind::kSymlink));
  }
  data_left_ = data;
  pad_left_ = PadOf(data);
  state_ = data_left_ ? State::kData : (pad_left_ ? State::kPadding : State::kHeader);
  return Ok();
}

Result<void> TarStreamChecker::Push(std::string_view bytes) {
  if (failed_) return error_;
  if (bytes.size() > options_.max_bytes - stats_.bytes) {
    return Fail(Error::ResourceExhausted(
        "tar: the stream passed the snapshot's size cap of " + std::to_string(options_.max_bytes) +
        " bytes" + (last_name_.empty() ? "" : " (in or after entry '" + last_name_ + "')")));
  }
  while (!bytes.empty()) {
    switch (state_) {
      case State::kHeader: {
        const std::size_t n = std::min(kBlock - block_.size(), bytes.size());
        block_.append(bytes.substr(0, n));
        bytes.remove_prefix(n);
        stats_.bytes += n;
        if (block_.size() == kBlock) {
          auto r = OnHeader();
          block_.clear();
          if (!r.ok()) return Fail(r.error());
        }
        break;
      }
      case State::kData:
      case State::kPaxBody: {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data_left_, bytes.size()));
        if (state_ == State::kPaxBody) pax_body_.append(bytes.substr(0, n));
        bytes.remove_prefix(n);
        stats_.bytes += n;
        data_left_ -= n;
        if (data_left_ == 0) {
          if (state_ == State::kPaxBody) {
            if (auto r = OnPaxBody(); !r.ok()) return Fail(r.error());
          }
          state_ = pad_left_ ? State::kPadding : State::kHeader;
        }
        break;
      }
      case State::kPadding: {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(pad_left_, bytes.size()));
        if (!tar::AllZero(bytes.substr(0, n))) {
          return Fail(Error::InvalidArgument("tar entry '" + last_name_ +
                                             "': padding after its data is not zero (refused)"));
        }
        bytes.remove_prefix(n);
        stats_.bytes += n;
        pad_left_ -= n;
        if (pad_left_ == 0) state_ = State::kHeader;
        break;
      }
      case State::kEnded:
        if (auto r = tar::ExpectOnlyPaddingAfterEnd(bytes, "stream"); !r.ok())
          return Fail(r.error());
        stats_.bytes += bytes.size();
        bytes = {};
        break;
    }
  }
  return Ok();
}

Result<void> TarStreamChecker::Finish() {
  if (failed_) return error_;
  if (state_ == State::kEnded) return Ok();
  const std::string where =
      last_name_.empty() ? "before its first entry" : "in or after entry '" + last_name_ + "'";
  return Fail(Error::InvalidArgument("tar: the stream is truncated " + where + " (" +
                                     std::to_string(stats_.bytes) + " bytes came)"));
}

}  // namespace agvisor

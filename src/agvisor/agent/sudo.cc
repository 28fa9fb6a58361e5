#include "agvisor/agent/sudo.h"

#include <csignal>

#include "agvisor/base/strings.h"

namespace agvisor::agent {
namespace {

constexpr std::string_view kSecurePath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

constexpr std::string_view kSudoHelp =
    R"(Usage: sudo [-nEHis] [-u root] [--] [VAR=value]... [COMMAND [ARG]...]

Runs COMMAND as root inside this sandbox, without a password. This sudo is agvisor's: the
sandbox's agent runs the command (the sandbox was created with allow_setuid); the command gets
this sudo's stdin, stdout and stderr, and SIGINT, SIGTERM and SIGHUP are passed on to it.
  -n, --non-interactive  accepted (never asks for a password)
  -E, --preserve-env     keep the whole environment (else a safe set, HOME=/root)
  -H, --set-home         accepted (HOME is /root)
  -i, --login            root's login shell (with COMMAND: runs it through that shell), in /root
  -s, --shell            $SHELL, or root's shell (with COMMAND: runs it through that shell)
  -u, --user root        the only user there is to become (also 0 or #0)
Exit code: COMMAND's, 128+N if a signal N ended it, 1 if it could not be run.
)";

bool IsShellSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '$' || c == '/' || c == '.' || c == ',' || c == ':' || c == '+' ||
         c == '@' || c == '%' || c == '=';
}

bool IsAssignment(std::string_view s) {
  auto eq = s.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  for (char c : s.substr(0, eq)) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return !(s[0] >= '0' && s[0] <= '9');
}

bool Kept(std::string_view kv) {
  for (std::string_view name :
       {"TERM=", "LANG=", "TZ=", "DISPLAY=", "COLORTERM=", "COLUMNS=", "LINES=", "LANGUAGE="}) {
    if (kv.starts_with(name)) return true;
  }
  return kv.starts_with("LC_") && kv.find('=') != std::string_view::npos;
}

// Replaces or appends `name`=`value` in `env`.
void SetEnv(std::vector<std::string>& env, std::string_view name, std::string_view value) {
  std::string prefix = std::string(name) + "=";
  for (auto& kv : env) {
    if (kv.starts_with(prefix)) {
      kv = prefix + std::string(value);
      return;
    }
  }
  env.push_back(prefix + std::string(value));
}

}  // namespace

std::string EncodeSudoRequest(const SudoRequest& r) {
  std::string out = r.cwd;
  out.push_back('\0');
  for (const auto& a : r.argv) out += "a" + a + std::string(1, '\0');
  for (const auto& e : r.env) out += "e" + e + std::string(1, '\0');
  return out;
}

Result<SudoRequest> DecodeSudoRequest(std::string_view payload) {
  if (payload.size() > kSudoMaxPayloadBytes) {
    return Error::InvalidArgument("sudo request: " + std::to_string(payload.size()) +
                                  " bytes, more than the " + std::to_string(kSudoMaxPayloadBytes) +
                                  " allowed");
  }
  if (payload.empty() || payload.back() != '\0') {
    return Error::InvalidArgument("sudo request: does not end in a NUL byte");
  }
  payload.remove_suffix(1);
  SudoRequest r;
  bool first = true;
  std::size_t count = 0;
  for (std::string_view entry : Split(payload, '\0')) {
    if (first) {
      if (!entry.starts_with("/")) {
        return Error::InvalidArgument("sudo request: the working directory '" + std::string(entry) +
                                      "' is not absolute");
      }
      r.cwd = entry;
      first = false;
      continue;
    }
    if (++count > kSudoMaxStrings) {
      return Error::InvalidArgument("sudo request: more than " + std::to_string(kSudoMaxStrings) +
                                    " arguments and environment entries");
    }
    if (entry.starts_with("a")) {
      r.argv.emplace_back(entry.substr(1));
    } else if (entry.starts_with("e")) {
      if (entry.find('=') == std::string_view::npos || entry.find('=') == 1) {
        return Error::InvalidArgument("sudo request: environment entry '" +
                                      std::string(entry.substr(1)) + "' is not NAME=value");
      }
      r.env.emplace_back(entry.substr(1));
    } else {
      return Error::InvalidArgument(
          "sudo request: an entry is neither an argument nor an "
          "environment entry");
    }
  }
  if (r.argv.empty() || r.argv[0].empty()) {
    return Error::InvalidArgument("sudo request: no command");
  }
  return r;
}

std::array<char, 4> EncodeSudoLength(std::uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
          static_cast<char>(n)};
}

Result<std::uint32_t> DecodeSudoLength(const std::array<char, 4>& b) {
  std::uint32_t n = 0;
  for (char c : b) n = (n << 8) | static_cast<unsigned char>(c);
  if (n == 0 || n > kSudoMaxPayloadBytes) {
    return Error::InvalidArgument("sudo request: length " + std::to_string(n) + " is outside 1-" +
                                  std::to_string(kSudoMaxPayloadBytes));
  }
  return n;
}

std::array<char, 2> EncodeSudoOutcome(SudoOutcome o) {
  return {o.signaled ? 's' : 'x', static_cast<char>(o.value & 0xff)};
}

std::optional<SudoOutcome> DecodeSudoOutcome(const std::array<char, 2>& b) {
  const int value = static_cast<unsigned char>(b[1]);
  if (b[0] == 'x') return SudoOutcome{.signaled = false, .value = value};
  if (b[0] == 's' && value > 0 && value < 65) return SudoOutcome{.signaled = true, .value = value};
  return std::nullopt;
}

int SudoExitCode(SudoOutcome o) { return o.signaled ? 128 + o.value : o.value; }

Result<SudoOptions> ParseSudoCommandLine(const std::vector<std::string>& args) {
  SudoOptions o;
  std::size_t i = 0;
  auto check_user = [](std::string_view u) -> Result<void> {
    if (u == "root" || u == "0" || u == "#0") return Ok();
    return Error::InvalidArgument("-u '" + std::string(u) +
                                  "': this sudo runs commands as root only (-u root); to run as "
                                  "another user, use `su` or the exec's user option");
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;
    if (a.starts_with("--")) {
      if (a == "--non-interactive" || a == "--set-home") continue;
      if (a == "--preserve-env") {
        o.preserve_env = true;
      } else if (a == "--login") {
        o.login = true;
      } else if (a == "--shell") {
        o.shell = true;
      } else if (a == "--help") {
        o.help = true;
      } else if (a == "--user" || a.starts_with("--user=")) {
        std::string u;
        if (a == "--user") {
          if (++i >= args.size()) return Error::InvalidArgument("--user needs a user (root)");
          u = args[i];
        } else {
          u = a.substr(7);
        }
        AGVISOR_RETURN_IF_ERROR(check_user(u));
      } else {
        return Error::InvalidArgument("unknown option '" + a +
                                      "' (this sudo takes -n -E -H -i -s -u root; see sudo -h)");
      }
      continue;
    }
    for (std::size_t k = 1; k < a.size(); ++k) {
      switch (a[k]) {
        case 'n':
        case 'H':
          break;
        case 'E':
          o.preserve_env = true;
          break;
        case 'i':
          o.login = true;
          break;
        case 's':
          o.shell = true;
          break;
        case 'h':
          o.help = true;
          break;
        case 'u': {
          std::string u = a.substr(k + 1);
          if (u.empty()) {
            if (++i >= args.size()) return Error::InvalidArgument("-u needs a user (root)");
            u = args[i];
          }
          AGVISOR_RETURN_IF_ERROR(check_user(u));
          k = a.size();
          break;
        }
        default:
          return Error::InvalidArgument("unknown option '-" + std::string(1, a[k]) +
                                        "' (this sudo takes -n -E -H -i -s -u root; see sudo -h)");
      }
    }
  }
  for (; i < args.size() && IsAssignment(args[i]); ++i) o.assignments.push_back(args[i]);
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.help) return o;
  if (o.login && o.shell) return Error::InvalidArgument("-i and -s cannot be combined");
  if (o.command.empty() && !o.login && !o.shell) {
    return Error::InvalidArgument("no command (usage: sudo [-nEHis] [-u root] COMMAND [ARG]...)");
  }
  if (!o.command.empty() && o.command[0].empty()) return Error::InvalidArgument("empty command");
  return o;
}

std::vector<std::string> SudoCommandArgv(const SudoOptions& o, const std::string& shell) {
  if (!o.login && !o.shell) return o.command;
  std::vector<std::string> argv = {shell};
  if (o.login) argv.push_back("-l");
  if (o.command.empty()) return argv;
  std::string line;
  for (const auto& word : o.command) {
    if (!line.empty()) line.push_back(' ');
    for (char c : word) {
      if (!IsShellSafe(c)) line.push_back('\\');
      line.push_back(c);
    }
  }
  argv.insert(argv.end(), {"-c", line});
  return argv;
}

std::vector<std::string> SudoEnvironment(const SudoOptions& o,
                                         const std::vector<std::string>& caller_env,
                                         const std::string& shell, const std::string& caller_name,
                                         unsigned caller_uid, unsigned caller_gid) {
  std::vector<std::string> env;
  if (o.preserve_env) {
    env = caller_env;
    if (o.login) SetEnv(env, "HOME", "/root");
  } else {
    for (const auto& kv : caller_env) {
      if (Kept(kv)) env.push_back(kv);
    }
    SetEnv(env, "PATH", kSecurePath);
    SetEnv(env, "HOME", "/root");
    SetEnv(env, "USER", "root");
    SetEnv(env, "LOGNAME", "root");
    SetEnv(env, "SHELL", shell);
  }
  std::string command;
  for (const auto& w : o.command) command += (command.empty() ? "" : " ") + w;
  SetEnv(env, "SUDO_USER", caller_name);
  SetEnv(env, "SUDO_UID", std::to_string(caller_uid));
  SetEnv(env, "SUDO_GID", std::to_string(caller_gid));
  SetEnv(env, "SUDO_COMMAND", command.empty() ? shell : command);
  for (const auto& a : o.assignments)
    SetEnv(env, a.substr(0, a.find('=')), a.substr(a.find('=') + 1));
  return env;
}

std::string RootShell(std::string_view passwd) {
  for (std::string_view line : Split(passwd, '\n')) {
    auto fields = Split(line, ':');
    if (fields.size() >= 7 && fields[2] == "0" && !fields[6].empty()) {
      return std::string(fields[6]);
    }
  }
  return "/bin/sh";
}

std::string_view SudoHelp() { return kSudoHelp; }

}  // namespace agvisor::agent

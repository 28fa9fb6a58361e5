#include "agvisor/agent/cli.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace agvisor::agent {
namespace {

using std::chrono::milliseconds;

Result<Command> Parse(std::vector<std::string> args) { return ParseCommandLine(args); }

// The error message of a parse that must fail.
std::string ErrorOf(std::vector<std::string> args) {
  auto r = Parse(std::move(args));
  if (r.ok()) return "<parsed>";
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  return r.error().message();
}

TEST(ParseSecondsTest, AcceptsWholeAndFractionalSeconds) {
  EXPECT_EQ(*ParseSeconds("f", "30", false), milliseconds(30000));
  EXPECT_EQ(*ParseSeconds("f", "0.5", false), milliseconds(500));
  EXPECT_EQ(*ParseSeconds("f", "1.25", false), milliseconds(1250));
  EXPECT_EQ(*ParseSeconds("f", "2.0001", false), milliseconds(2000));  // rounded down to ms
  EXPECT_EQ(*ParseSeconds("f", "0", true), milliseconds(0));
}

TEST(ParseSecondsTest, RefusesZeroNegativeAndMalformed) {
  for (const char* bad : {"0", "0.0", "0.0004", "-1", "-0.5", "", "abc", "1s", "1.", ".5", " 1",
                          "1 ", "1e3", "inf", "nan", "+1", "1,5", "0x10", "99999999999999"}) {
    auto r = ParseSeconds("init: --lifetime", bad, false);
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find("init: --lifetime: expected a number of seconds > 0"),
              std::string::npos)
        << r.error().message();
  }
  EXPECT_FALSE(ParseSeconds("f", "-1", true).ok());
  EXPECT_NE(ParseSeconds("f", "4000000000", false).error().message().find("100 years"),
            std::string::npos);
}

TEST(FormatSecondsTest, Formats) {
  EXPECT_EQ(FormatSeconds(milliseconds(30000)), "30s");
  EXPECT_EQ(FormatSeconds(milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatSeconds(milliseconds(250)), "0.25s");
  EXPECT_EQ(FormatSeconds(milliseconds(1005)), "1.005s");
}

TEST(ParseCommandLineTest, InitDefaults) {
  auto r = Parse({"init"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  auto& o = std::get<InitOptions>(*r);
  EXPECT_FALSE(o.lifetime);
  EXPECT_FALSE(o.idle_ttl);
  EXPECT_EQ(o.socket_path, "/run/agvisor/agent.sock");
  EXPECT_FALSE(o.channel_stdio);
  EXPECT_FALSE(o.track_idle);
}

TEST(ParseCommandLineTest, InitTrackIdle) {
  auto r = Parse({"init", "--track-idle"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(std::get<InitOptions>(*r).track_idle);
  EXPECT_FALSE(std::get<InitOptions>(*r).idle_ttl);
}

TEST(ParseCommandLineTest, InitAllFlagsBothSpellings) {
  auto r = Parse(
      {"init", "--lifetime", "30", "--idle-ttl=1.5", "--socket=/tmp/x.sock", "--channel-stdio"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  auto& o = std::get<InitOptions>(*r);
  EXPECT_EQ(o.lifetime, milliseconds(30000));
  EXPECT_EQ(o.idle_ttl, milliseconds(1500));
  EXPECT_EQ(o.socket_path, "/tmp/x.sock");
  EXPECT_TRUE(o.channel_stdio);
  EXPECT_EQ(o.warm_shells, 0u);
}

TEST(ParseCommandLineTest, InitWarmShells) {
  auto r = Parse({"init", "--warm-shells", "2"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(std::get<InitOptions>(*r).warm_shells, 2u);
  EXPECT_EQ(ErrorOf({"init", "--warm-shells", "17"}),
            "init: --warm-shells: expected a count from 0 to 16, got '17'");
  EXPECT_EQ(ErrorOf({"init", "--warm-shells=-1"}),
            "init: --warm-shells: expected a count from 0 to 16, got '-1'");
}

TEST(ParseCommandLineTest, ReadFile) {
  auto d = Parse({"read-file", "/tmp/a b"});
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  EXPECT_EQ(std::get<ReadFileOptions>(*d).path, "/tmp/a b");
  EXPECT_EQ(std::get<ReadFileOptions>(*d).socket_path, "/run/agvisor/agent.sock");
  auto s = Parse({"read-file", "--socket=/tmp/s", "/x"});
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_EQ(std::get<ReadFileOptions>(*s).socket_path, "/tmp/s");
  EXPECT_EQ(std::get<ReadFileOptions>(*s).path, "/x");
  EXPECT_FALSE(std::get<ReadFileOptions>(*s).tar);
  auto t = Parse({"read-file", "--tar", "/dir"});
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_TRUE(std::get<ReadFileOptions>(*t).tar);
  EXPECT_EQ(std::get<ReadFileOptions>(*t).path, "/dir");
  EXPECT_EQ(ErrorOf({"read-file"}), "read-file: missing PATH (the file to write)");
  EXPECT_EQ(ErrorOf({"read-file", "/a", "/b"}),
            "read-file: unexpected argument '/b' (one PATH only)");
  EXPECT_EQ(ErrorOf({"read-file", "--bogus", "/a"}),
            "read-file: unknown option '--bogus' (see `agvisor-agent read-file --help`)");
  EXPECT_TRUE(std::holds_alternative<HelpCommand>(*Parse({"read-file", "--help"})));
}

TEST(ParseCommandLineTest, ReadFileExclude) {
  auto e = Parse({"read-file", "--tar", "--exclude", "/proc", "--exclude=/sys", "/"});
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  const auto& o = std::get<ReadFileOptions>(*e);
  EXPECT_TRUE(o.tar);
  EXPECT_EQ(o.exclude, (std::vector<std::string>{"/proc", "/sys"}));
  EXPECT_EQ(o.path, "/");
  EXPECT_EQ(ErrorOf({"read-file", "--exclude", "/proc", "/"}), "read-file: --exclude needs --tar");
  EXPECT_EQ(ErrorOf({"read-file", "--tar", "--exclude", "proc", "/"}),
            "read-file: --exclude: 'proc' is not absolute");
}

TEST(ParseCommandLineTest, ReadFileLayer) {
  auto e = Parse({"read-file", "--tar", "--layer-since", "1796548504.4171", "--layer-whole",
                  "/workspace", "--exclude", "/proc", "/"});
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  const auto& o = std::get<ReadFileOptions>(*e);
  EXPECT_EQ(o.layer_since, "1796548504.4171");
  EXPECT_EQ(o.layer_whole, (std::vector<std::string>{"/workspace"}));
  auto t = ParseLayerSince("1796548504.4171");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->tv_sec, 1796548504);
  EXPECT_EQ(t->tv_nsec, 417100000);
  EXPECT_EQ(ParseLayerSince("12")->tv_nsec, 0);
  for (const char* bad : {"", "x", "1.", ".5", "1.1234567890", "-1", "1e9", "1.2.3"}) {
    EXPECT_FALSE(ParseLayerSince(bad).has_value()) << bad;
  }
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"--tar", "--layer-since", "1.x", "/"},
       "--layer-since: '1.x' is not unix seconds (digits, optionally '.' and up to 9 digits)"},
      {{"--tar", "--layer-since", "1", "/etc"}, "--layer-since needs --tar of /"},
      {{"--layer-since", "1", "/"}, "--layer-since needs --tar of /"},
      {{"--tar", "--layer-whole", "/w", "/"}, "--layer-whole needs --layer-since"}};
  for (const auto& [args, message] : refused) {
    std::vector<std::string> argv = {"read-file"};
    argv.insert(argv.end(), args.begin(), args.end());
    EXPECT_EQ(ErrorOf(argv), "read-file: " + message);
  }
}

TEST(ParseCommandLineTest, Connect) {
  auto d = Parse({"connect"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::get<ConnectOptions>(*d).socket_path, "/run/agvisor/agent.sock");
  auto s = Parse({"connect", "--socket", "/tmp/a.sock"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(std::get<ConnectOptions>(*s).socket_path, "/tmp/a.sock");
  EXPECT_FALSE(std::get<ConnectOptions>(*s).wait.has_value());
  auto w = Parse({"connect", "--wait", "10"});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(std::get<ConnectOptions>(*w).wait, std::chrono::milliseconds(10000));
  EXPECT_FALSE(Parse({"connect", "--wait", "0"}).ok());
  EXPECT_EQ(ErrorOf({"connect", "--bogus"}),
            "connect: unknown option '--bogus' (see `agvisor-agent connect --help`)");
  EXPECT_EQ(ErrorOf({"connect", "x"}), "connect: unexpected argument 'x'");
  EXPECT_EQ(ErrorOf({"connect", "--socket="}), "connect: --socket: empty path");
  EXPECT_TRUE(std::holds_alternative<HelpCommand>(*Parse({"connect", "--help"})));
}

TEST(ParseCommandLineTest, InitBadInput) {
  EXPECT_EQ(ErrorOf({"init", "--lifetime", "0"}),
            "init: --lifetime: expected a number of seconds > 0, got '0'");
  EXPECT_EQ(ErrorOf({"init", "--idle-ttl", "-3"}),
            "init: --idle-ttl: expected a number of seconds > 0, got '-3'");
  EXPECT_EQ(ErrorOf({"init", "--lifetime"}), "init: --lifetime needs a value");
  EXPECT_EQ(ErrorOf({"init", "--lifetime=abc"}),
            "init: --lifetime: expected a number of seconds > 0, got 'abc'");
  EXPECT_EQ(ErrorOf({"init", "--bogus"}),
            "init: unknown option '--bogus' (see `agvisor-agent init --help`)");
  EXPECT_EQ(ErrorOf({"init", "--socket="}), "init: --socket: empty path");
  EXPECT_EQ(ErrorOf({"init", "sleep"}),
            "init: unexpected argument 'sleep' (init takes no command)");
  // A prefix of a flag is not the flag.
  EXPECT_EQ(ErrorOf({"init", "--lifetimex=3"}),
            "init: unknown option '--lifetimex=3' (see `agvisor-agent init --help`)");
}

TEST(ParseCommandLineTest, ExecFull) {
  auto r = Parse({"exec", "--timeout", "5", "--grace=0", "--cwd", "/w", "--env", "A=1",
                  "--env=B=x=y", "--socket", "/s", "--", "sh", "-c", "echo --timeout"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  auto& o = std::get<ExecOptions>(*r);
  EXPECT_EQ(o.timeout, milliseconds(5000));
  EXPECT_EQ(o.grace, milliseconds(0));
  EXPECT_EQ(o.cwd, "/w");
  EXPECT_EQ(o.env, (std::vector<std::string>{"A=1", "B=x=y"}));
  EXPECT_EQ(o.socket_path, "/s");
  EXPECT_EQ(o.argv, (std::vector<std::string>{"sh", "-c", "echo --timeout"}));
}

TEST(ParseCommandLineTest, ExecDefaults) {
  auto r = Parse({"exec", "--", "true"});
  ASSERT_TRUE(r.ok());
  auto& o = std::get<ExecOptions>(*r);
  EXPECT_FALSE(o.timeout);
  EXPECT_EQ(o.grace, milliseconds(2000));
  EXPECT_FALSE(o.cwd);
  EXPECT_TRUE(o.env.empty());
  EXPECT_EQ(o.socket_path, "/run/agvisor/agent.sock");
  // Everything after `--` is the command, even what looks like our flags.
  auto r2 = Parse({"exec", "--", "--help", "--", "x"});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(std::get<ExecOptions>(*r2).argv, (std::vector<std::string>{"--help", "--", "x"}));
}

TEST(ParseCommandLineTest, ExecBadInput) {
  EXPECT_EQ(ErrorOf({"exec", "true"}),
            "exec: missing `--` before the command 'true' (usage: agvisor-agent exec [OPTIONS] "
            "-- PROGRAM [ARG]...)");
  EXPECT_EQ(ErrorOf({"exec", "--timeout", "3"}),
            "exec: missing `-- PROGRAM [ARG]...` (the command to run)");
  EXPECT_EQ(ErrorOf({"exec"}), "exec: missing `-- PROGRAM [ARG]...` (the command to run)");
  EXPECT_EQ(ErrorOf({"exec", "--"}), "exec: no command after `--`");
  EXPECT_EQ(ErrorOf({"exec", "--", ""}), "exec: no command after `--`");
  EXPECT_EQ(ErrorOf({"exec", "--timeout", "0", "--", "true"}),
            "exec: --timeout: expected a number of seconds > 0, got '0'");
  EXPECT_EQ(ErrorOf({"exec", "--timeout=-1", "--", "true"}),
            "exec: --timeout: expected a number of seconds > 0, got '-1'");
  EXPECT_EQ(ErrorOf({"exec", "--grace", "-1", "--", "true"}),
            "exec: --grace: expected a number of seconds >= 0, got '-1'");
  EXPECT_EQ(ErrorOf({"exec", "--timeout", "1x", "--", "true"}),
            "exec: --timeout: expected a number of seconds > 0, got '1x'");
  EXPECT_EQ(ErrorOf({"exec", "--env", "NOEQUALS", "--", "true"}),
            "exec: --env: expected K=V with a non-empty K, got 'NOEQUALS'");
  EXPECT_EQ(ErrorOf({"exec", "--env", "=v", "--", "true"}),
            "exec: --env: expected K=V with a non-empty K, got '=v'");
  EXPECT_EQ(ErrorOf({"exec", "-t", "1", "--", "true"}),
            "exec: unknown option '-t' (see `agvisor-agent exec --help`)");
  EXPECT_EQ(ErrorOf({"exec", "--timeout"}), "exec: --timeout needs a value");
}

TEST(ParseCommandLineTest, VersionHelpAndUnknown) {
  EXPECT_TRUE(std::holds_alternative<VersionCommand>(*Parse({"version"})));
  EXPECT_EQ(ErrorOf({"version", "x"}), "version: unexpected argument 'x'");
  EXPECT_EQ(std::get<HelpCommand>(*Parse({"--help"})).text, MainHelp());
  EXPECT_EQ(std::get<HelpCommand>(*Parse({"help"})).text, MainHelp());
  EXPECT_EQ(std::get<HelpCommand>(*Parse({"init", "--lifetime", "3", "--help"})).text, InitHelp());
  EXPECT_EQ(std::get<HelpCommand>(*Parse({"exec", "--help"})).text, ExecHelp());
  EXPECT_EQ(std::get<HelpCommand>(*Parse({"version", "--help"})).text, VersionHelp());
  EXPECT_EQ(ErrorOf({}),
            "missing subcommand (init, exec, connect, read-file or version; see --help)");
  EXPECT_EQ(
      ErrorOf({"run"}),
      "unknown subcommand 'run' (expected init, exec, connect, read-file or version; see --help)");
}

TEST(ParseCommandLineTest, HelpTextsNameEveryFlagAndExitCode) {
  for (const char* flag : {"--lifetime", "--idle-ttl", "--socket", "--channel-stdio"}) {
    EXPECT_NE(InitHelp().find(flag), std::string_view::npos) << flag;
  }
  for (const char* flag : {"--timeout", "--grace", "--cwd", "--env", "--socket", "124", "125",
                           "126", "127", "128+N"}) {
    EXPECT_NE(ExecHelp().find(flag), std::string_view::npos) << flag;
  }
  for (const char* code : {"0 SIGTERM", "3 lifetime", "4 idle-ttl"}) {
    EXPECT_NE(InitHelp().find(code), std::string_view::npos) << code;
  }
}

}  // namespace
}  // namespace agvisor::agent

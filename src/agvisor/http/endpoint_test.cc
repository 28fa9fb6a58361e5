// Pure unit tests: endpoint parsing/printing, URL encoding, header lookup, the ssh command line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "agvisor/http/client.h"
#include "agvisor/http/ssh_tunnel.h"

namespace agvisor::http {
namespace {

TEST(ParseEndpointTest, Unix) {
  auto ep = ParseEndpoint("unix:///run/user/1000/docker.sock");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(ep->path, "/run/user/1000/docker.sock");
  EXPECT_EQ(ep->ToString(), "unix:///run/user/1000/docker.sock");
}

TEST(ParseEndpointTest, EmptyMeansDockerHostOrTheDefaultSocket) {
  ::unsetenv("DOCKER_HOST");
  auto ep = ParseEndpoint("");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->ToString(), "unix:///var/run/docker.sock");
  ::setenv("DOCKER_HOST", "tcp://10.0.0.1:2375", 1);
  ep = ParseEndpoint("");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->kind, Endpoint::Kind::kTcp);
  ::setenv("DOCKER_HOST", "bogus", 1);
  ep = ParseEndpoint("");
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.error().message().find("$DOCKER_HOST"), std::string::npos);
  ::unsetenv("DOCKER_HOST");
}

TEST(ParseEndpointTest, Https) {
  auto ep = ParseEndpoint("https://127.0.0.1:6443");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->kind, Endpoint::Kind::kHttps);
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 6443);
  EXPECT_EQ(ep->ToString(), "https://127.0.0.1:6443");
  ep = ParseEndpoint("https://api.example.test");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->port, 443);
  EXPECT_FALSE(ParseEndpoint("https://h:1/path").ok());
  EXPECT_FALSE(ParseEndpoint("https://user@h:1").ok());
  EXPECT_FALSE(ParseEndpoint("https://-h:1").ok());
}

TEST(ParseEndpointTest, Tcp) {
  auto ep = ParseEndpoint("tcp://127.0.0.1:2375");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 2375);
  EXPECT_EQ(ep->ToString(), "tcp://127.0.0.1:2375");
  ep = ParseEndpoint("tcp://[::1]:2376/");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->ToString(), "tcp://[::1]:2376");
  ep = ParseEndpoint("tcp://docker.example:1");
  ASSERT_TRUE(ep.ok());
}

TEST(ParseEndpointTest, Ssh) {
  auto ep = ParseEndpoint("ssh://build@host-1.example:2222");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->kind, Endpoint::Kind::kSsh);
  EXPECT_EQ(ep->user, "build");
  EXPECT_EQ(ep->host, "host-1.example");
  EXPECT_EQ(ep->port, 2222);
  EXPECT_EQ(ep->path, "/var/run/docker.sock");
  EXPECT_EQ(ep->ToString(), "ssh://build@host-1.example:2222");

  ep = ParseEndpoint("ssh://host");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->user, "");
  EXPECT_EQ(ep->port, 0);

  ep = ParseEndpoint("ssh://root@10.1.2.3/run/docker.sock");
  ASSERT_TRUE(ep.ok()) << ep.error().ToString();
  EXPECT_EQ(ep->path, "/run/docker.sock");
  EXPECT_EQ(ep->ToString(), "ssh://root@10.1.2.3/run/docker.sock");
}

TEST(ParseEndpointTest, RejectsMalformedAndInjectionWithTheAcceptedForms) {
  const char* bad[] = {
      "/var/run/docker.sock",   // no scheme
      "http://localhost:2375",  // unknown scheme
      "npipe:////./pipe/docker_engine",
      "unix://",               // no path
      "unix://relative.sock",  // not absolute
      "unix:///tmp/a b.sock",  // whitespace
      "tcp://127.0.0.1",       // tcp needs a port
      "tcp://:2375",           // no host
      "tcp://127.0.0.1:0",     // port range
      "tcp://127.0.0.1:65536",
      "tcp://127.0.0.1:23x",
      "tcp://127.0.0.1:2375/path",
      "ssh://-oProxyCommand=sh",       // option injection through the host
      "ssh://-oProxyCommand=sh@host",  // ... through the user
      "ssh://us er@host",
      "ssh://host name",
      "ssh://host\n-oX=1",
      "ssh://@host",
      "ssh://",
      "ssh://host:99999",
      "ssh://host/relative:path",
      "ssh://host/a b",
      "ssh://host;rm",
      "ssh://[::1",
  };
  for (const char* spec : bad) {
    auto ep = ParseEndpoint(spec);
    ASSERT_FALSE(ep.ok()) << spec;
    EXPECT_EQ(ep.error().code(), ErrorCode::kInvalidArgument) << spec;
    EXPECT_NE(ep.error().message().find(spec), std::string::npos) << ep.error().message();
    EXPECT_NE(ep.error().message().find("ssh://[USER@]HOST[:PORT]"), std::string::npos);
  }
}

TEST(UrlEncodeTest, KeepsUnreservedEncodesTheRest) {
  EXPECT_EQ(UrlEncode("abcXYZ019-_.~"), "abcXYZ019-_.~");
  EXPECT_EQ(UrlEncode("a b&c=d/e?f"), "a%20b%26c%3Dd%2Fe%3Ff");
  EXPECT_EQ(UrlEncode(R"({"label":["agvisor=1"]})"), "%7B%22label%22%3A%5B%22agvisor%3D1%22%5D%7D");
  EXPECT_EQ(UrlEncode("\xff\x01"), "%FF%01");
  EXPECT_EQ(UrlEncode(""), "");
}

TEST(ResponseTest, HeaderIsCaseInsensitiveFirstMatch) {
  Response r;
  r.headers = {{"Content-Type", "a"}, {"content-type", "b"}, {"Api-Version", "1.41"}};
  EXPECT_EQ(r.header("CONTENT-TYPE"), "a");
  EXPECT_EQ(r.header("api-version"), "1.41");
  EXPECT_EQ(r.header("x"), "");
}

TEST(SshCommandLineTest, ForcedOptionsFirstDestinationLast) {
  auto ep = *ParseEndpoint("ssh://root@127.0.0.1:2200/run/docker.sock");
  ClientOptions o;
  o.ssh_args = {"-i", "/k/id", "-o", "StrictHostKeyChecking=no"};
  o.connect_timeout = std::chrono::milliseconds(2500);
  auto argv = internal::SshCommandLine(ep, o, "/tmp/d/docker.sock");
  std::vector<std::string> want = {"ssh",
                                   "-o",
                                   "BatchMode=yes",
                                   "-o",
                                   "ExitOnForwardFailure=yes",
                                   "-o",
                                   "StreamLocalBindUnlink=yes",
                                   "-T",
                                   "-p",
                                   "2200",
                                   "-i",
                                   "/k/id",
                                   "-o",
                                   "StrictHostKeyChecking=no",
                                   "-o",
                                   "ConnectTimeout=3",
                                   "-L",
                                   "/tmp/d/docker.sock:/run/docker.sock",
                                   "--",
                                   "root@127.0.0.1",
                                   "cat >/dev/null; kill $PPID"};
  EXPECT_EQ(argv, want);
}

TEST(SshCommandLineTest, RemoteCommandSharesTheTunnelsOptionsWithoutTheForward) {
  auto ep = *ParseEndpoint("ssh://root@127.0.0.1:2200/run/docker.sock");
  ClientOptions o;
  o.ssh_args = {"-i", "/k/id"};
  auto argv = SshRemoteCommandLine(ep, o, "'/usr/bin/runsc' --version");
  std::vector<std::string> want = {"ssh",
                                   "-o",
                                   "BatchMode=yes",
                                   "-T",
                                   "-p",
                                   "2200",
                                   "-i",
                                   "/k/id",
                                   "-o",
                                   "ConnectTimeout=5",
                                   "--",
                                   "root@127.0.0.1",
                                   "'/usr/bin/runsc' --version"};
  EXPECT_EQ(argv, want);
}

TEST(SshCommandLineTest, StdioForwardDialsFromTheRemoteHost) {
  auto ep = *ParseEndpoint("ssh://root@127.0.0.1:2200");
  ClientOptions o;
  o.ssh_args = {"-i", "/k/id"};
  // LogLevel=INFO comes before the caller's options: ssh says why a channel failed at INFO.
  std::vector<std::string> want = {"ssh",
                                   "-o",
                                   "BatchMode=yes",
                                   "-o",
                                   "LogLevel=INFO",
                                   "-T",
                                   "-p",
                                   "2200",
                                   "-i",
                                   "/k/id",
                                   "-o",
                                   "ConnectTimeout=5",
                                   "-W",
                                   "172.19.0.1:3128",
                                   "--",
                                   "root@127.0.0.1"};
  EXPECT_EQ(SshStdioForwardCommandLine(ep, o, "172.19.0.1", 3128), want);
  // An IPv6 literal is bracketed (ssh splits at the last ':').
  EXPECT_EQ(SshStdioForwardCommandLine(ep, o, "fd00::1", 3128)[13], "[fd00::1]:3128");
}

}  // namespace
}  // namespace agvisor::http

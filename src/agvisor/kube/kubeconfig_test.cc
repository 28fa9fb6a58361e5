#include "agvisor/kube/kubeconfig.h"

#include <gtest/gtest.h>

namespace agvisor::kube {
namespace {

// "hello" / "world" in base64.
constexpr std::string_view kConfig = R"(apiVersion: v1
kind: Config
current-context: double
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: aGVsbG8=
- name: prefixed
  cluster:
    server: https://k8s.example.test/k8s/clusters/c-1/
    certificate-authority: ca.pem
- name: insecure
  cluster:
    server: https://10.0.0.1
    insecure-skip-tls-verify: true
users:
- name: token-user
  user:
    token: abc.def
- name: cert-user
  user:
    client-certificate-data: d29ybGQ=
    client-key: /keys/key.pem
- name: plugin-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: get-token
      args: ["--cluster", "c1"]
      env:
      - name: MODE
        value: fast
- name: provider-user
  user:
    auth-provider:
      name: gcp
contexts:
- name: double
  context: {cluster: local, user: token-user, namespace: sandboxes}
- name: prefixed
  context: {cluster: prefixed, user: cert-user}
- name: insecure
  context: {cluster: insecure, user: token-user}
- name: plugin
  context: {cluster: local, user: plugin-user}
- name: provider
  context: {cluster: local, user: provider-user}
- name: arn:aws:eks:eu-west-1:1:cluster/web
  context: {cluster: local, user: token-user}
)";

Kubeconfig Parsed() {
  auto c = ParseKubeconfig(kConfig, "/home/u/.kube", "test");
  EXPECT_TRUE(c.ok()) << c.error().ToString();
  return *c;
}

TEST(KubeAddressTest, Forms) {
  auto a = ParseKubeAddress("kube:");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "");
  EXPECT_EQ(a->namespace_, "");
  a = ParseKubeAddress("kube://");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "");
  a = ParseKubeAddress("kube://agvisor-double/default");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "agvisor-double");
  EXPECT_EQ(a->namespace_, "default");
  a = ParseKubeAddress("kube://agvisor-double");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "agvisor-double");
  EXPECT_EQ(a->namespace_, "");
  a = ParseKubeAddress("kube:///team-a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "");
  EXPECT_EQ(a->namespace_, "team-a");
  // The namespace follows the last '/'.
  a = ParseKubeAddress("kube://arn:aws:eks:eu-west-1:1:cluster/web/default");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->context, "arn:aws:eks:eu-west-1:1:cluster/web");
  EXPECT_EQ(a->namespace_, "default");
}

TEST(KubeAddressTest, Refusals) {
  EXPECT_FALSE(ParseKubeAddress("ssh://x").ok());
  EXPECT_FALSE(ParseKubeAddress("kube:ctx").ok());
  EXPECT_FALSE(ParseKubeAddress("kube://ctx/Not_A_Label").ok());
  EXPECT_FALSE(ParseKubeAddress("kube://ctx/-x").ok());
  EXPECT_FALSE(ParseKubeAddress("kube://ctx\n/x").ok());
  auto e = ParseKubeAddress("kube://c/UPPER");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("not a DNS label"), std::string::npos);
  EXPECT_TRUE(IsKubeAddress("kube:"));
  EXPECT_FALSE(IsKubeAddress("unix:///x"));
}

TEST(KubeconfigTest, CurrentContextWithToken) {
  auto c = ResolveContext(Parsed(), {});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->context, "double");
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 6443);
  EXPECT_EQ(c->path_prefix, "");
  EXPECT_EQ(c->ca_pem, "hello");
  EXPECT_EQ(c->token, "abc.def");
  EXPECT_EQ(c->namespace_, "sandboxes");
  // The address's namespace wins over the context's.
  c = ResolveContext(Parsed(), {.context = "", .namespace_ = "other"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->namespace_, "other");
}

TEST(KubeconfigTest, PrefixAndFilesMadeAbsolute) {
  Kubeconfig k = Parsed();
  EXPECT_EQ(k.clusters.at("prefixed").ca_file, "/home/u/.kube/ca.pem");
  EXPECT_EQ(k.users.at("cert-user").key_file, "/keys/key.pem");
  EXPECT_EQ(k.users.at("cert-user").cert_pem, "world");
  auto c = ResolveContext(k, {.context = "prefixed", .namespace_ = ""});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->host, "k8s.example.test");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->path_prefix, "/k8s/clusters/c-1");
  EXPECT_EQ(c->namespace_, "default");
  EXPECT_EQ(c->ToString(),
            "context prefixed (https://k8s.example.test:443/k8s/clusters/c-1), namespace default");
}

TEST(KubeconfigTest, ExecPlugin) {
  auto c = ResolveContext(Parsed(), {.context = "plugin", .namespace_ = ""});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->exec_argv, (std::vector<std::string>{"get-token", "--cluster", "c1"}));
  EXPECT_EQ(c->exec_env, (std::vector<std::string>{"MODE=fast"}));
}

TEST(KubeconfigTest, Refusals) {
  Kubeconfig k = Parsed();
  auto e = ResolveContext(k, {.context = "insecure", .namespace_ = ""});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(e.error().message().find("insecure-skip-tls-verify"), std::string::npos);
  e = ResolveContext(k, {.context = "provider", .namespace_ = ""});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kUnsupported);
  e = ResolveContext(k, {.context = "nope", .namespace_ = ""});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(e.error().message().find("contexts: "), std::string::npos);
  Kubeconfig none;
  e = ResolveContext(none, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kNotFound);
  // http:// servers are refused: the API server is spoken to over TLS only.
  k.clusters["local"].server = "http://127.0.0.1:8080";
  e = ResolveContext(k, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  k.clusters["local"].server = "https://127.0.0.1:99999";
  EXPECT_FALSE(ResolveContext(k, {}).ok());
}

TEST(KubeconfigTest, MalformedDocuments) {
  EXPECT_FALSE(ParseKubeconfig("clusters: [", "", "bad").ok());
  EXPECT_FALSE(ParseKubeconfig("- a\n- b\n", "", "list").ok());
  auto e = ParseKubeconfig(
      "clusters:\n- name: x\n  cluster:\n    certificate-authority-data: '!!!'\n", "", "f");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("certificate-authority-data"), std::string::npos);
  EXPECT_TRUE(ParseKubeconfig("", "", "empty").ok());
}

TEST(KubeconfigTest, MergeFirstWins) {
  Kubeconfig a = Parsed();
  Kubeconfig b;
  b.current_context = "other";
  b.contexts["double"] = {.cluster = "x", .user = "y", .namespace_ = "z"};
  b.contexts["extra"] = {.cluster = "local", .user = "token-user", .namespace_ = ""};
  MergeKubeconfig(a, b);
  EXPECT_EQ(a.current_context, "double");
  EXPECT_EQ(a.contexts.at("double").cluster, "local");
  EXPECT_EQ(a.contexts.count("extra"), 1u);
}

TEST(Base64Test, Decode) {
  EXPECT_EQ(DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(DecodeBase64("aGVs\nbG8"), "hello");
  EXPECT_EQ(DecodeBase64(""), "");
  EXPECT_FALSE(DecodeBase64("a").has_value());
  EXPECT_FALSE(DecodeBase64("aGVs*").has_value());
  EXPECT_FALSE(DecodeBase64("aG=Vs").has_value());
}

}  // namespace
}  // namespace agvisor::kube

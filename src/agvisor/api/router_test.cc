#include "agvisor/api/router.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace agvisor::api {
namespace {

TEST(RouterTest, MatchesTemplatesAndDecodesParams) {
  Router r;
  auto m = r.Match("GET", "/v1/sandboxes/my-box/processes/42/ws");
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  EXPECT_EQ(m->route->id, RouteId::kAttachProcessWs);
  EXPECT_TRUE(m->route->websocket);
  EXPECT_EQ(m->params.at("id"), "my-box");
  EXPECT_EQ(m->params.at("pid"), "42");

  m = r.Match("DELETE", "/v1/sandboxes/a%2Eb?erase_data=0");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->id, RouteId::kDeleteSandbox);
  EXPECT_EQ(m->params.at("id"), "a.b");
  EXPECT_EQ(m->query.at("erase_data"), "0");
}

TEST(RouterTest, SameTemplateDifferentMethods) {
  Router r;
  EXPECT_EQ(r.Match("GET", "/v1/sandboxes/x/files?path=/a")->route->id, RouteId::kReadFile);
  EXPECT_EQ(r.Match("PUT", "/v1/sandboxes/x/files?path=/a")->route->id, RouteId::kWriteFile);
  EXPECT_EQ(r.Match("DELETE", "/v1/sandboxes/x/files?path=/a")->route->id, RouteId::kDeleteFile);
  EXPECT_EQ(r.Match("GET", "/v1/sandboxes/x/files/stat?path=/a")->route->id, RouteId::kStatFile);
  EXPECT_EQ(r.Match("POST", "/v1/sandboxes")->route->id, RouteId::kCreateSandbox);
  EXPECT_EQ(r.Match("GET", "/v1/sandboxes")->route->id, RouteId::kListSandboxes);
  // The archive routes and GET files stream their bodies; no other built-in route does.
  auto get = r.Match("GET", "/v1/sandboxes/x/archive?path=/a");
  auto put = r.Match("PUT", "/v1/sandboxes/x/archive?path=/a");
  ASSERT_TRUE(get.ok() && put.ok());
  EXPECT_EQ(get->route->id, RouteId::kGetArchive);
  EXPECT_EQ(put->route->id, RouteId::kPutArchive);
  for (const auto& def : BuiltinRoutes()) {
    EXPECT_EQ(def.streaming, def.id == RouteId::kGetArchive || def.id == RouteId::kPutArchive ||
                                 def.id == RouteId::kReadFile)
        << def.path;
  }
}

TEST(RouterTest, NotFoundAndMethodNotAllowed) {
  Router r;
  auto m = r.Match("GET", "/v1/nothing");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kNotFound);
  m = r.Match("PATCH", "/v1/sandboxes/x");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(m.error().message().find("GET, DELETE"), std::string::npos) << m.error().message();
  // Empty segments, trailing slashes and encoded slashes in a parameter match nothing.
  EXPECT_FALSE(r.Match("GET", "/v1/sandboxes//exec").ok());
  EXPECT_FALSE(r.Match("GET", "/v1/sandboxes/").ok());
  EXPECT_FALSE(r.Match("GET", "/v1/sandboxes/a%2Fb").ok());
  EXPECT_FALSE(r.Match("GET", "/v1/sandboxes/x/extra/long/path/here").ok());
}

TEST(RouterTest, MalformedTargets) {
  Router r;
  EXPECT_EQ(r.Match("GET", "http://x/v1/health").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.Match("GET", "/v1/health?x=%zz").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.Match("GET", "/v1/health?x=%0").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.Match("GET", "/v1/health?x=a%00b").error().code(), ErrorCode::kInvalidArgument);
}

TEST(RouterTest, QueryDecoding) {
  auto t = SplitTarget("/p?path=%2Ftmp%2Fa%20b&flag&&k=v=w&plus=a+b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->first, "/p");
  EXPECT_EQ(t->second.at("path"), "/tmp/a b");
  EXPECT_EQ(t->second.at("flag"), "");
  EXPECT_EQ(t->second.at("k"), "v=w");
  EXPECT_EQ(t->second.at("plus"), "a+b");
}

TEST(RouterTest, Extensions) {
  Router r;
  ASSERT_TRUE(r.AddExtension({"GET", "/v1/desktop/ws", RouteId::kExtension, true, false}).ok());
  auto m = r.Match("GET", "/v1/desktop/ws?token=abc");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->route->id, RouteId::kExtension);
  EXPECT_FALSE(m->route->auth);
  EXPECT_EQ(r.AddExtension({"GET", "/v1/desktop/ws", RouteId::kExtension}).error().code(),
            ErrorCode::kConflict);
  EXPECT_EQ(r.AddExtension({"GET", "/v1//x", RouteId::kExtension}).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.AddExtension({"GET", "/v1/{x", RouteId::kExtension}).error().code(),
            ErrorCode::kInvalidArgument);
}

TEST(RouterTest, OnlyHealthIsOpen) {
  for (const auto& r : BuiltinRoutes()) {
    EXPECT_EQ(r.auth, r.id != RouteId::kHealth) << r.path;
  }
}

// The (method, path) pairs of docs/openapi.yaml: path keys are indented two spaces under
// `paths:`, operations four ("    get:").
std::set<std::string> OpenApiOperations(const std::string& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in) << "cannot read " << file;
  std::set<std::string> ops;
  std::string line, path;
  bool in_paths = false;
  while (std::getline(in, line)) {
    if (line == "paths:") {
      in_paths = true;
      continue;
    }
    if (!in_paths) continue;
    if (!line.empty() && line[0] != ' ' && line[0] != '#') break;  // the next top-level key
    if (line.rfind("  /", 0) == 0 && line.back() == ':') {
      path = line.substr(2, line.size() - 3);
      continue;
    }
    for (const char* m : {"get", "put", "post", "delete", "patch"}) {
      if (line == std::string("    ") + m + ":") {
        std::string upper(m);
        for (char& c : upper) c = static_cast<char>(std::toupper(c));
        ops.insert(upper + " " + path);
      }
    }
  }
  return ops;
}

// Routes the daemon mounts from other layers (the desktop gateway, MCP); documented in
// openapi.yaml like the built-ins.
const std::set<std::string> kDocumentedExtensions = {"GET /v1/desktop/ws", "POST /mcp",
                                                     "GET /mcp",           "DELETE /mcp",
                                                     "GET /console",       "GET /console/{asset}"};

TEST(OpenApiTest, DocumentMatchesTheRouteTable) {
  auto documented = OpenApiOperations(AGVISOR_OPENAPI);
  std::set<std::string> routed = kDocumentedExtensions;
  for (const auto& r : BuiltinRoutes()) {
    routed.insert(std::string(r.method) + " " + std::string(r.path));
  }
  for (const auto& op : routed) {
    EXPECT_TRUE(documented.count(op)) << op << " is routed but not in docs/openapi.yaml";
  }
  for (const auto& op : documented) {
    EXPECT_TRUE(routed.count(op)) << op << " is in docs/openapi.yaml but not routed";
  }
}

}  // namespace
}  // namespace agvisor::api

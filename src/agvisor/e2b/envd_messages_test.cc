#include "agvisor/e2b/envd_messages.h"

#include <gtest/gtest.h>

namespace agvisor::e2b::envd {
namespace {

// What the SDK's commands.run sends (connect-es toJson of a StartRequest).
TEST(EnvdMessagesTest, DecodesTheSdksStartRequest) {
  auto r = DecodeStartRequest(
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},)"
      R"("cwd":"/tmp"},"stdin":false,"tag":"t1"})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->process.cmd, "/bin/bash");
  EXPECT_EQ(r->process.args, (std::vector<std::string>{"-l", "-c", "echo hi"}));
  EXPECT_EQ(r->process.envs.at("A"), "1");
  EXPECT_EQ(r->process.cwd, "/tmp");
  EXPECT_EQ(r->stdin, false);
  EXPECT_EQ(r->tag, "t1");
  EXPECT_FALSE(r->pty.has_value());
  auto pty = DecodeStartRequest(
      R"({"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":"24"}}})");
  ASSERT_TRUE(pty.ok());
  EXPECT_EQ(pty->pty->cols, 80u);
  EXPECT_EQ(pty->pty->rows, 24u);
  EXPECT_FALSE(pty->stdin.has_value());
}

TEST(EnvdMessagesTest, RefusesMalformedStartRequests) {
  for (const char* bad :
       {"", "[]", "{", R"({})", R"({"process":{}})", R"({"process":{"cmd":1}})",
        R"({"process":{"cmd":"x","args":"y"}})", R"({"process":{"cmd":"x","envs":{"A":1}}})",
        R"({"process":{"cmd":"x"},"stdin":"yes"})",
        R"({"process":{"cmd":"x"},"pty":{"size":{"cols":-1}}})",
        R"({"process":{"cmd":"x"},"pty":{"size":{"cols":70000}}})"}) {
    auto r = DecodeStartRequest(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
  // Deep nesting is refused by the parser's bound, not by the stack.
  std::string deep(100000, '[');
  EXPECT_FALSE(DecodeStartRequest(deep).ok());
}

TEST(EnvdMessagesTest, AnEmptyRequestIsAnObject) {
  EXPECT_TRUE(DecodeEmptyRequest("{}").ok());
  EXPECT_TRUE(DecodeEmptyRequest(R"({"unknown":1})").ok());
  EXPECT_FALSE(DecodeEmptyRequest("{").ok());
  EXPECT_FALSE(DecodeEmptyRequest("[]").ok());
}

TEST(EnvdMessagesTest, SelectorsNeedExactlyOneOfPidAndTag) {
  EXPECT_EQ(DecodeSelectorRequest(R"({"process":{"pid":42}})")->pid, 42u);
  EXPECT_EQ(DecodeSelectorRequest(R"({"process":{"tag":"web"}})")->tag, "web");
  EXPECT_FALSE(DecodeSelectorRequest(R"({"process":{}})").ok());
  EXPECT_FALSE(DecodeSelectorRequest(R"({"process":{"pid":1,"tag":"x"}})").ok());
  EXPECT_FALSE(DecodeSelectorRequest(R"({"process":{"pid":4294967296}})").ok());
  EXPECT_FALSE(DecodeSelectorRequest(R"({})").ok());
}

TEST(EnvdMessagesTest, SendInputAndSignal) {
  auto in = DecodeSendInputRequest(R"({"process":{"pid":7},"input":{"stdin":"aGk="}})");
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->pty);
  EXPECT_EQ(in->data, "hi");
  auto pty = DecodeSendInputRequest(R"({"process":{"pid":7},"input":{"pty":"aGk"}})");
  ASSERT_TRUE(pty.ok());
  EXPECT_TRUE(pty->pty);
  EXPECT_FALSE(DecodeSendInputRequest(R"({"process":{"pid":7},"input":{"stdin":"!!"}})").ok());
  EXPECT_FALSE(DecodeSendInputRequest(R"({"process":{"pid":7},"input":{}})").ok());
  EXPECT_EQ(DecodeSendSignalRequest(R"({"process":{"pid":7},"signal":"SIGNAL_SIGKILL"})")->signal,
            9);
  EXPECT_EQ(DecodeSendSignalRequest(R"({"process":{"pid":7},"signal":15})")->signal, 15);
  EXPECT_FALSE(DecodeSendSignalRequest(R"({"process":{"pid":7},"signal":"SIGSTOP"})").ok());
  EXPECT_FALSE(DecodeSendSignalRequest(R"({"process":{"pid":7},"signal":19})").ok());
  auto up = DecodeUpdateRequest(R"({"process":{"pid":7},"pty":{"size":{"cols":100,"rows":30}}})");
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->pty->cols, 100u);
}

TEST(EnvdMessagesTest, ProcessEventsInProto3Json) {
  EXPECT_EQ(StartEventJson(12), R"({"event":{"start":{"pid":12}}})");
  EXPECT_EQ(DataEventJson(Output::kStdout, "hi"), R"({"event":{"data":{"stdout":"aGk="}}})");
  EXPECT_EQ(DataEventJson(Output::kPty, std::string("\0\xff", 2)),
            R"({"event":{"data":{"pty":"AP8="}}})");
  EXPECT_EQ(EndEventJson(EndEventFor(0, 0)),
            R"({"event":{"end":{"exitCode":0,"exited":true,"status":"exit status 0"}}})");
  EXPECT_EQ(EndEventJson(EndEventFor(137, 9)),
            R"({"event":{"end":{"exitCode":-1,"exited":false,"status":"signal: killed",)"
            R"("error":"signal: killed"}}})");
  EXPECT_EQ(ProcessKeepaliveJson(), R"({"event":{"keepalive":{}}})");
  ListedProcess p{{"/bin/bash", {"-c", "sleep 9"}, {{"A", "1"}}, "/w"}, 5, "t"};
  EXPECT_EQ(ListResponseJson({p}),
            R"({"processes":[{"config":{"cmd":"/bin/bash","args":["-c","sleep 9"],)"
            R"("envs":{"A":"1"},"cwd":"/w"},"pid":5,"tag":"t"}]})");
}

TEST(EnvdMessagesTest, FilesystemRequests) {
  EXPECT_EQ(*DecodePathRequest(R"({"path":"/a"})"), "/a");
  EXPECT_FALSE(DecodePathRequest(R"({"path":""})").ok());
  EXPECT_EQ(DecodeMoveRequest(R"({"source":"/a","destination":"/b"})")->second, "/b");
  EXPECT_EQ(DecodeListDirRequest(R"({"path":"/a","depth":3})")->second, 3u);
  EXPECT_EQ(DecodeListDirRequest(R"({"path":"/a"})")->second, 1u);
  auto w = DecodeWatchRequest(R"({"path":"/a","recursive":true,"include_entry":true})");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->recursive);
  EXPECT_TRUE(w->include_entry);
  EXPECT_EQ(*DecodeWatcherIdRequest(R"({"watcherId":"w1"})"), "w1");
}

TEST(EnvdMessagesTest, EntriesAndEvents) {
  EntryInfo e{"f.txt",
              FileType::kFile,
              "/home/user/f.txt",
              5000000000,
              0644,
              PermissionString(FileType::kFile, 0644),
              "user",
              "user",
              1700000000123000000LL,
              std::nullopt};
  EXPECT_EQ(e.permissions, "-rw-r--r--");
  EXPECT_EQ(PermissionString(FileType::kDirectory, 0755), "drwxr-xr-x");
  EXPECT_EQ(EntryResponseJson(e),
            R"({"entry":{"name":"f.txt","type":"FILE_TYPE_FILE","path":"/home/user/f.txt",)"
            R"("size":"5000000000","mode":420,"permissions":"-rw-r--r--","owner":"user",)"
            R"("group":"user","modifiedTime":"2023-11-14T22:13:20.123000000Z"}})");
  EXPECT_EQ(WriteInfoJson({e}), R"([{"name":"f.txt","type":"file","path":"/home/user/f.txt"}])");
  EXPECT_EQ(WatchStartJson(), R"({"start":{}})");
  EXPECT_EQ(WatchEventJson({"a", EventType::kRemove, std::nullopt}),
            R"({"filesystem":{"name":"a","type":"EVENT_TYPE_REMOVE"}})");
  EXPECT_EQ(WatcherEventsResponseJson({{"b", EventType::kCreate, std::nullopt}}),
            R"({"events":[{"name":"b","type":"EVENT_TYPE_CREATE"}]})");
  // A file name that is not UTF-8 still makes valid JSON.
  EXPECT_NE(
      WatchEventJson({std::string("\xff"), EventType::kWrite, std::nullopt}).find("\xEF\xBF\xBD"),
      std::string::npos);
}

TEST(EnvdMessagesTest, MultipartAsUndiciSendsIt) {
  std::string body =
      "------b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/a/x.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\nhello\r\n------b\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"y\"\r\n\r\n\r\n--\r\n"
      "------b--\r\n";
  auto parts = ParseMultipart("multipart/form-data; boundary=----b", body, 10);
  ASSERT_TRUE(parts.ok()) << parts.error().message();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].filename, "/a/x.txt");
  EXPECT_EQ((*parts)[0].data, "hello");
  EXPECT_EQ((*parts)[1].data, "\r\n--");
  EXPECT_FALSE(ParseMultipart("multipart/form-data; boundary=----b", body, 1).ok());
  EXPECT_FALSE(ParseMultipart("multipart/form-data", body, 10).ok());
  // Cut anywhere, the body is refused, never read past.
  for (std::size_t n = 0; n + 8 < body.size(); ++n) {
    EXPECT_FALSE(ParseMultipart("multipart/form-data; boundary=----b", body.substr(0, n), 10).ok())
        << n;
  }
}

}  // namespace
}  // namespace agvisor::e2b::envd

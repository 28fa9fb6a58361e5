// AnswerTracker (intercept.h) on Beast's basic_parser: every callback only notes what the log
// needs; bodies are counted, never kept. A new parser per answer (Beast's parser reads one
// message).
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "agvisor/egress/intercept.h"

namespace agvisor::egress {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::string_view;

class AnswerTracker::Parser : public http::basic_parser<false> {
 public:
  explicit Parser(bool head) {
    header_limit(64 * 1024);
    body_limit(boost::none);
    eager(true);
    skip(head);
  }
  int status = 0;

 private:
  void on_request_impl(http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code&) override { status = code; }
  void on_field_impl(http::field, string_view, string_view, error_code&) override {}
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    return body.size();
  }
  void on_finish_impl(error_code&) override {}
};

AnswerTracker::AnswerTracker() = default;
AnswerTracker::~AnswerTracker() = default;

std::vector<AnswerTracker::Answer> AnswerTracker::Feed(std::string_view bytes) {
  return Run(bytes, false);
}

std::vector<AnswerTracker::Answer> AnswerTracker::End() { return Run({}, true); }

std::vector<AnswerTracker::Answer> AnswerTracker::Run(std::string_view bytes, bool eof) {
  std::vector<Answer> done;
  if (broken_) return done;
  // Parsed from the caller's bytes where nothing is held (the usual case: no copy); only what
  // the parser has not taken (a head not complete yet) is kept.
  if (!held_.empty()) {
    held_.append(bytes);
    bytes = held_;
  }
  std::size_t at = 0;
  while (true) {
    if (!parser_) {
      if (at == bytes.size()) break;
      parser_ = std::make_unique<Parser>(!heads_.empty() && heads_.front());
    }
    error_code ec;
    std::size_t used = 0;
    if (at < bytes.size()) {
      used = parser_->put(boost::asio::buffer(bytes.data() + at, bytes.size() - at), ec);
    }
    at += used;
    bytes_ += used;
    if (ec == http::error::need_more) ec = {};
    if (!ec && !parser_->is_done() && eof && at == bytes.size()) parser_->put_eof(ec);
    if (ec) {
      broken_ = true;
      break;
    }
    if (!parser_->is_done()) {
      if (used == 0) break;
      continue;
    }
    const int status = parser_->status;
    parser_.reset();
    if (status >= 100 && status < 200 && status != 101) continue;  // interim: its final follows
    if (!heads_.empty()) heads_.pop_front();
    done.push_back({.status = status, .bytes = bytes_});
    bytes_ = 0;
  }
  held_ = std::string(bytes.substr(std::min(at, bytes.size())));
  if (held_.size() > 64 * 1024) broken_ = true;
  return done;
}

}  // namespace agvisor::egress

// Internal to src/agvisor/mcp: the tool table of tools.cc and the argument check against each
// tool's JSON Schema, used by session.cc. Boost.JSON stays behind this internal header.
#pragma once

#include <boost/json.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "agvisor/base/error.h"
#include "agvisor/mcp/session.h"

namespace agvisor::mcp::internal {

// What a tool returns: its structured result (sent as JSON text content and, from protocol
// 2025-06-18 on, as structuredContent too), or a PNG sent as image content.
struct ToolResult {
  boost::json::object structured;
  std::string png;  // non-empty: an image result
};

// A tools/call in flight that the client may cancel (notifications/cancelled with its id): the
// tool hands over how to stop what it runs (OnCancel), the session calls Cancel.
class Cancellation {
 public:
  // `stop` runs on Cancel, or at once when the call was cancelled already; replaces the last.
  void OnCancel(std::function<void()> stop);
  void Cancel();
  bool cancelled() const;

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> stop_;
};

struct CallContext {
  Session& session;
  // Set when the client asked for progress: `progress` so far (output bytes) and the new piece.
  std::function<void(double progress, std::string_view message)> progress;
  // Never null while a tools/call runs.
  std::shared_ptr<Cancellation> cancellation = std::make_shared<Cancellation>();
};

struct Tool {
  std::string_view name;
  std::string_view description;
  std::string_view schema;  // the inputSchema, JSON text
  Result<ToolResult> (*run)(const boost::json::object& args, CallContext& ctx);
};

std::span<const Tool> Tools();
const Tool* FindTool(std::string_view name);
// The parsed inputSchema of `tool` (parsed once).
const boost::json::object& SchemaOf(const Tool& tool);

// Checks `args` against `schema` (the subset of JSON Schema the tools use: type object with
// properties, required, additionalProperties false; string, integer, number, boolean, arrays
// and string maps; enum; minimum/maximum). Errors: kInvalidArgument naming the tool, the
// argument and the rule, e.g. "exec: argument 'timeout' must be a number (got a string)".
Result<void> ValidateArguments(std::string_view tool, const boost::json::object& schema,
                               const boost::json::object& args);

}  // namespace agvisor::mcp::internal

// E2B's sandbox list (GET /v2/sandboxes, the SDK's Sandbox.list paginator): its query as the
// pinned SDK sends it (metadata, state, startedAfter, template, order, limit, nextToken), which
// sandboxes a query keeps, and the page it answers with its next token.
//
// Used by e2b/rest.cc. Pure; unit-tested in e2b_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/base/error.h"

namespace agvisor::e2b {

inline constexpr std::size_t kDefaultListLimit = 100;  // E2B's page size when none is asked
inline constexpr std::size_t kMaxListLimit = 1000;

// Where a page ends: the last sandbox it held (the next page starts after it in the list's order).
struct ListCursor {
  std::int64_t started_at = 0;  // unix seconds
  std::string id;
  bool operator==(const ListCursor&) const = default;
};

struct ListQuery {
  std::map<std::string, std::string> metadata;  // each key must have this value
  std::vector<std::string> states{"running", "paused"};
  std::string template_id;                    // "" = any
  std::optional<std::int64_t> started_after;  // unix seconds: started at or after it
  bool ascending = false;                     // by start time; E2B's default: newest first
  std::size_t limit = kDefaultListLimit;
  std::optional<ListCursor> after;  // nextToken
};

// The query of a list request (its decoded query parameters). Errors: kInvalidArgument naming the
// parameter and what it takes (a state other than running/paused, an order other than asc/desc,
// a limit outside 1..kMaxListLimit, a startedAfter that is no RFC 3339 time, a nextToken this
// server did not give, a metadata filter that is not "k=v&k2=v2" percent-encoded).
Result<ListQuery> ParseListQuery(const std::map<std::string, std::string>& query);

// Whether a sandbox in `state`, of `template_id`, with `metadata` (null: none), started at
// `started_at`, is one `q` lists (the cursor is not looked at: PageOf does that).
bool ListWants(const ListQuery& q, std::string_view state, std::string_view template_id,
               const std::map<std::string, std::string>* metadata, std::int64_t started_at);

// One listed sandbox.
struct ListRow {
  std::string id;
  std::int64_t started_at = 0;
};
// A page of `rows` (all that ListWants kept) for `q`: the indices into `rows` in the list's order
// (by start time, ties by id, as q.ascending says) after q.after, at most q.limit; and the next
// page's token, "" when this page is the last.
struct ListPage {
  std::vector<std::size_t> rows;
  std::string next_token;
};
ListPage PageOf(const std::vector<ListRow>& rows, const ListQuery& q);

// The token of a page that ends at `c`, and back. Errors: kInvalidArgument.
std::string ListToken(const ListCursor& c);
Result<ListCursor> ParseListToken(std::string_view token);

// An RFC 3339 time ("2026-12-06T10:00:00Z", ".123" fractions and "+02:00" offsets too) as unix
// seconds (fractions dropped). Errors: kInvalidArgument.
Result<std::int64_t> ParseRfc3339(std::string_view text);

}  // namespace agvisor::e2b

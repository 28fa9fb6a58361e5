#include "agvisor/e2b/list.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>
#include <numeric>

#include "agvisor/api/router.h"
#include "agvisor/base/strings.h"
#include "agvisor/e2b/ids.h"

namespace agvisor::e2b {

namespace {

Error Bad(std::string_view what, std::string_view why) {
  return Error::InvalidArgument(std::string(what) + ": " + std::string(why));
}

std::optional<std::int64_t> Digits(std::string_view s) {
  std::int64_t n = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < 0) return std::nullopt;
  return n;
}

// "k1=v1&k2=v2" as the router hands it (decoded once): the SDK percent-encodes each key and
// value (encodeURIComponent), joins the pairs with URLSearchParams (which encodes them again),
// and the whole is encoded once more as the query value. So each key and value is decoded twice
// here: {"a b": "c&d=e"} arrives as "a%2520b=c%2526d%253De".
Result<std::map<std::string, std::string>> ParseMetadataFilter(std::string_view text) {
  auto twice = [](std::string_view s) -> Result<std::string> {
    return api::PercentDecode(AGVISOR_TRY(api::PercentDecode(s)));
  };
  std::map<std::string, std::string> out;
  for (auto pair : Split(text, '&')) {
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    auto k = twice(pair.substr(0, eq));
    auto v = twice(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (!k.ok() || !v.ok() || k->empty()) {
      return Bad("metadata", "must be key=value pairs joined by '&', each percent-encoded");
    }
    out[*k] = *v;
  }
  return out;
}

}  // namespace

Result<std::int64_t> ParseRfc3339(std::string_view text) {
  auto bad = [&] {
    return Bad("time",
               "'" + std::string(text.substr(0, 64)) + "' is not RFC 3339 (2026-12-06T10:00:00Z)");
  };
  // YYYY-MM-DDTHH:MM:SS
  if (text.size() < 20) return bad();
  auto num = [&](std::size_t at, std::size_t n) { return Digits(text.substr(at, n)); };
  auto year = num(0, 4), mon = num(5, 2), day = num(8, 2), hour = num(11, 2), min = num(14, 2),
       sec = num(17, 2);
  if (!year || !mon || !day || !hour || !min || !sec || text[4] != '-' || text[7] != '-' ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':' || *mon < 1 || *mon > 12 || *day < 1 || *day > 31 || *hour > 23 ||
      *min > 59 || *sec > 60) {
    return bad();
  }
  std::size_t at = 19;
  if (at < text.size() && text[at] == '.') {
    ++at;
    const std::size_t from = at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) ++at;
    if (at == from) return bad();
  }
  std::int64_t offset = 0;
  const std::string_view zone = text.substr(at);
  if (zone == "Z" || zone == "z") {
    offset = 0;
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    auto oh = Digits(zone.substr(1, 2)), om = Digits(zone.substr(4, 2));
    if (!oh || !om || *oh > 23 || *om > 59) return bad();
    offset = (*oh * 3600 + *om * 60) * (zone[0] == '-' ? -1 : 1);
  } else {
    return bad();
  }
  std::tm tm{};
  tm.tm_year = static_cast<int>(*year) - 1900;
  tm.tm_mon = static_cast<int>(*mon) - 1;
  tm.tm_mday = static_cast<int>(*day);
  tm.tm_hour = static_cast<int>(*hour);
  tm.tm_min = static_cast<int>(*min);
  tm.tm_sec = static_cast<int>(*sec);
  return static_cast<std::int64_t>(::timegm(&tm)) - offset;
}

std::string ListToken(const ListCursor& c) { return std::to_string(c.started_at) + "." + c.id; }

Result<ListCursor> ParseListToken(std::string_view token) {
  const auto dot = token.find('.');
  auto started = Digits(token.substr(0, dot));
  if (dot == std::string_view::npos || !started || !IsSandboxId(token.substr(dot + 1))) {
    return Bad("nextToken",
               "is not one this server gave (pass the x-next-token of the page "
               "before, or none for the first page)");
  }
  return ListCursor{*started, std::string(token.substr(dot + 1))};
}

Result<ListQuery> ParseListQuery(const std::map<std::string, std::string>& query) {
  ListQuery q;
  auto get = [&](const char* k) -> const std::string* {
    auto it = query.find(k);
    return it == query.end() || it->second.empty() ? nullptr : &it->second;
  };
  if (auto* m = get("metadata")) q.metadata = AGVISOR_TRY(ParseMetadataFilter(*m));
  if (auto* s = get("state")) {
    q.states.clear();
    for (auto part : Split(*s, ',')) {
      if (part != "running" && part != "paused") {
        return Bad("state", "'" + std::string(part.substr(0, 32)) +
                                "' is no sandbox state: running or paused, comma-separated");
      }
      q.states.emplace_back(part);
    }
  }
  if (auto* t = get("template")) q.template_id = *t;
  if (auto* t = get("startedAfter")) {
    auto at = ParseRfc3339(*t);
    if (!at.ok()) return at.error().WithContext("startedAfter");
    q.started_after = *at;
  }
  if (auto* o = get("order")) {
    if (*o != "asc" && *o != "desc") {
      return Bad("order", "is asc or desc (by start time; desc, newest first, by default)");
    }
    q.ascending = *o == "asc";
  }
  if (auto* l = get("limit")) {
    auto n = Digits(*l);
    if (!n || *n < 1 || *n > static_cast<std::int64_t>(kMaxListLimit)) {
      return Bad("limit", "must be 1-" + std::to_string(kMaxListLimit));
    }
    q.limit = static_cast<std::size_t>(*n);
  }
  if (auto* t = get("nextToken")) q.after = AGVISOR_TRY(ParseListToken(*t));
  return q;
}

bool ListWants(const ListQuery& q, std::string_view state, std::string_view template_id,
               const std::map<std::string, std::string>* metadata, std::int64_t started_at) {
  if (std::find(q.states.begin(), q.states.end(), state) == q.states.end()) return false;
  if (!q.template_id.empty() && template_id != q.template_id) return false;
  if (q.started_after && started_at < *q.started_after) return false;
  for (const auto& [k, v] : q.metadata) {
    if (!metadata) return false;
    auto it = metadata->find(k);
    if (it == metadata->end() || it->second != v) return false;
  }
  return true;
}

ListPage PageOf(const std::vector<ListRow>& rows, const ListQuery& q) {
  // The list's order: by start time, then id, ascending or not; a row comes after the cursor
  // when it sorts after it.
  auto before = [&](std::int64_t sa, const std::string& ia, std::int64_t sb,
                    const std::string& ib) {
    if (sa != sb) return q.ascending ? sa < sb : sa > sb;
    return q.ascending ? ia < ib : ia > ib;
  };
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return before(rows[a].started_at, rows[a].id, rows[b].started_at, rows[b].id);
  });
  ListPage page;
  for (std::size_t i : order) {
    if (q.after && !before(q.after->started_at, q.after->id, rows[i].started_at, rows[i].id)) {
      continue;
    }
    if (page.rows.size() == q.limit) {
      const ListRow& last = rows[page.rows.back()];
      page.next_token = ListToken({last.started_at, last.id});
      break;
    }
    page.rows.push_back(i);
  }
  return page;
}

}  // namespace agvisor::e2b

#include "search/tuning_file.h"

#include "uop/error.h"

namespace kiln::tuning_file {

using json = nlohmann::json;

namespace {

constexpr size_t kCut = std::string_view::npos;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t skip_spaces(std::string_view t, size_t i) {
  while (i < t.size() && is_space(t[i])) ++i;
  return i;
}

// One past the closing quote of the string that opens at t[i]; kCut when the text ends first.
size_t skip_string(std::string_view t, size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\') ++i;
    else if (t[i] == '"') return i + 1;
  }
  return kCut;
}

// One past the value that starts at t[i]: a string, a bracketed value (brackets matched outside
// strings, whatever is between them), or a scalar up to the next delimiter; kCut when the text ends first.
size_t skip_value(std::string_view t, size_t i) {
  if (t[i] == '"') return skip_string(t, i);
  if (t[i] != '{' && t[i] != '[') {
    while (i < t.size() && !is_space(t[i]) && t[i] != ',' && t[i] != '}' && t[i] != ']') ++i;
    return i == t.size() ? kCut : i;
  }
  size_t depth = 0;
  while (i < t.size()) {
    char c = t[i];
    if (c == '"') {
      i = skip_string(t, i);
      if (i == kCut) return kCut;
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    ++i;
  }
  return kCut;
}

}  // namespace

json parse_bounded(std::string_view text) {
  struct TooDeep {};
  auto cap_depth = [](int depth, json::parse_event_t event, json&) {
    // depth counts the containers around this one: the root opens at 0
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= kMaxDepth)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cap_depth);
  } catch (const TooDeep&) {
    throw BadJson{cat("nests JSON more than ", kMaxDepth, " levels deep (a kiln tuning cache nests 4)")};
  } catch (const json::out_of_range& e) {
    throw BadJson{cat("holds a number out of range (", excerpt(e.what(), 200), ")")};
  } catch (const json::exception& e) {
    throw BadJson{cat("is not valid JSON (", excerpt(e.what(), 200), ")")};
  }
}

std::string excerpt(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return cat(text.substr(0, max - 3), "...");
}

std::string excerpt_json(const json& value) {
  // dump() recurses once per level: parse_bounded capped the levels.
  return excerpt(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

Members object_members(std::string_view t) {
  Members m;
  size_t i = skip_spaces(t, 1);
  auto stop_at = [&](size_t at) {
    m.broken = true;
    m.stop = at;
    return m;
  };
  while (i < t.size() && t[i] != '}') {
    if (t[i] != '"') return stop_at(i);
    size_t key_end = skip_string(t, i);
    if (key_end == kCut) return stop_at(i);
    size_t colon = skip_spaces(t, key_end);
    if (colon < t.size() && t[colon] != ':') return stop_at(colon);
    size_t value = skip_spaces(t, colon + 1);
    if (colon >= t.size() || value >= t.size()) {
      m.partial = Member{t.substr(i, key_end - i), {}};
      return stop_at(t.size());
    }
    size_t value_end = skip_value(t, value);
    if (value_end == kCut) {
      m.partial = Member{t.substr(i, key_end - i), t.substr(value)};
      return stop_at(t.size());
    }
    m.whole.push_back(Member{t.substr(i, key_end - i), t.substr(value, value_end - value)});
    i = skip_spaces(t, value_end);
    if (i < t.size() && t[i] == ',') i = skip_spaces(t, i + 1);
    else if (i < t.size() && t[i] != '}') return stop_at(i);
  }
  if (i >= t.size()) return stop_at(t.size());
  m.stop = i;
  return m;
}

}  // namespace kiln::tuning_file

// Reading a tuning cache file that anyone may have written (the helper of search/tuning_cache.cpp):
// JSON parsed with a cap on nesting, values quoted short in messages, and the members of an object
// picked out one by one from text that does not parse whole (cut short, one bad value).
//
//   json doc = parse_bounded(text);                  // throws BadJson{"nests JSON more than 16 ..."}
//   warn(cat("the opt ", excerpt_json(value)));  // at most 60 characters of any value
//   Members m = object_members(text.substr(i));      // text[i] == '{': its whole members, and where it broke
//
// Every routine here is iterative: a hostile file cannot overflow the stack, however deep it nests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tuning_file {

inline constexpr int kMaxDepth = 16;                        // a tuning cache nests 4 levels deep
inline constexpr uintmax_t kMaxBytes = uintmax_t{256} << 20;  // a big cache is a few MiB

// Why a text is not JSON kiln will read, for a message: "is not valid JSON (...)", "nests ...".
struct BadJson {
  std::string why;
};

// The JSON in `text`, nested at most kMaxDepth levels; throws BadJson (never nlohmann's exceptions).
nlohmann::json parse_bounded(std::string_view text);

// At most `max` characters of `text` (longer: cut, with "..."), for quoting untrusted text.
std::string excerpt(std::string_view text, size_t max = 60);
// A JSON value as compact text, cut the same way (the value must come from parse_bounded).
std::string excerpt_json(const nlohmann::json& value);

// One member of an object: the key's JSON text (with its quotes) and the value's JSON text.
struct Member {
  std::string_view key, value;
};

// The members of the object that opens at text[0] ('{'), found by matching brackets outside strings,
// as far as the text holds together: `whole` are complete, `partial` is a member the text ends in the
// middle of (its value runs to the end of the text), `broken` says the text stopped being an object
// (a missing ':', garbage between members) at byte `stop`, or ended, before the object closed.
struct Members {
  std::vector<Member> whole;
  std::optional<Member> partial;
  bool broken = false;
  size_t stop = 0;
};
Members object_members(std::string_view text);

}  // namespace kiln::tuning_file

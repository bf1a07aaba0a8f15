// Reading validated values out of JSON objects. Every problem (missing key, wrong type,
// value out of range, unknown key) is recorded with its dotted JSON path, the value found and
// what was expected; nothing throws until the caller asks, so one pass reports everything.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hardware/errors.hpp"

namespace tpusim {

using Json = nlohmann::json;

/// Accumulates problems for one input (a file or a study).
class Problems {
 public:
  explicit Problems(std::string context) : context_(std::move(context)) {}
  void add(std::string path, std::string found, std::string expected);
  void add(std::string path, const Json& found, std::string expected);
  bool empty() const { return list_.empty(); }
  std::size_t size() const { return list_.size(); }
  const std::string& context() const { return context_; }
  /// What was recorded so far.
  const std::vector<Problem>& list() const { return list_; }
  /// Throws ConfigError with everything recorded so far, if anything was.
  void throw_if_any() const;

 private:
  std::string context_;
  std::vector<Problem> list_;
};

/// Nesting deeper than this is refused: no configuration needs it, and deep trees cost stack.
inline constexpr int kMaxJsonDepth = 64;

/// Parses JSON text strictly. A key repeated in one object (almost always a copy-paste mistake:
/// the last value would silently win), nesting deeper than kMaxJsonDepth, or a number beyond
/// double's range is bad input: ConfigError naming `context`, the JSON path under `path` and
/// both values or what was found. Malformed text throws Json::parse_error for the caller.
Json parse_json_strict(const std::string& text, const std::string& context, const std::string& path = "");

/// A JSON value rendered for a message: compact, cut at 60 characters.
std::string show(const Json& value);
/// `parent.key`, or `key` when parent is the top level.
std::string join_path(const std::string& parent, const std::string& key);
/// `parent[index]`.
std::string index_path(const std::string& parent, std::size_t index);

/// The value at a dotted path of `json` ("core.op_overhead_s", array elements by index:
/// "schedule.mesh.0"), or nullptr when there is none.
const Json* json_at(const Json& json, const std::string& dotted);

/// Reads the fields of one JSON object. Each getter marks its key as known; finish() reports
/// every key that nobody asked for as unknown (a typo is never silently ignored). Getters
/// return a harmless placeholder after recording a problem: callers must call
/// Problems::throw_if_any() before using values in arithmetic that could fail.
class Fields {
 public:
  Fields(const Json& object, std::string path, Problems& problems);
  ~Fields() = default;
  Fields(const Fields&) = delete;
  Fields& operator=(const Fields&) = delete;

  bool ok() const { return object_ != nullptr; }
  /// Whether the object has `key`; asking makes it a known key (an optional key read only when
  /// present is listed among the known ones when another key is misspelled).
  bool has(const std::string& key);
  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return join_path(path_, key); }

  /// A number within [min, max] (inclusive).
  double number(const std::string& key, double min = -std::numeric_limits<double>::infinity(),
                double max = std::numeric_limits<double>::infinity());
  /// A number strictly greater than zero (and finite).
  double positive(const std::string& key);
  /// An integer within [min, max].
  std::int64_t integer(const std::string& key, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t max = std::numeric_limits<std::int64_t>::max());
  bool boolean(const std::string& key);
  /// Optional keys: the value if present (validated like the required getters), else `fallback`.
  std::int64_t integer_or(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max);
  double positive_or(const std::string& key, double fallback);
  bool boolean_or(const std::string& key, bool fallback);
  std::string string_or(const std::string& key, const std::string& fallback,
                        const std::vector<std::string>& allowed);
  /// A string; if `allowed` is non-empty the value must be one of them.
  std::string string(const std::string& key, const std::vector<std::string>& allowed = {});
  /// The raw value of a key (marks it known); nullptr and a problem if missing.
  const Json* value(const std::string& key);
  /// The raw value of an optional key (marks it known); nullptr if absent.
  const Json* optional(const std::string& key);
  /// Marks an optional key known without reading it (e.g. free-text "description").
  void allow(const std::string& key);

  /// Records every key of the object that no getter asked for.
  void finish();

  Problems& problems() { return problems_; }

 private:
  const Json* object_;
  std::string path_;
  Problems& problems_;
  std::set<std::string> known_;
};

}  // namespace tpusim

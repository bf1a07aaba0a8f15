#include "hardware/json_fields.hpp"

#include <cmath>
#include <map>
#include <sstream>

namespace tpusim {

Json parse_json_strict(const std::string& text, const std::string& context, const std::string& path) {
  struct Frame {
    bool array = false;
    std::size_t index = 0;  // arrays: elements started so far
    std::string key;        // objects: the key being read
    std::map<std::string, std::string> seen;
  };
  std::vector<Frame> frames;
  auto where = [&](const std::string& last) {
    std::string p = path;
    for (const auto& f : frames) {
      if (&f == &frames.back() && !last.empty()) break;
      p = f.array ? index_path(p, f.index - 1) : join_path(p, f.key);
    }
    return last.empty() ? p : join_path(p, last);
  };
  auto element_starts = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        element_starts();
        if (depth >= kMaxJsonDepth)
          throw ConfigError(context, where(""),
                            "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                            "a configuration nested at most " + std::to_string(kMaxJsonDepth) + " deep");
        frames.push_back(Frame{event == Json::parse_event_t::array_start, 0, {}, {}});
        break;
      case Json::parse_event_t::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (f.seen.count(f.key))
          throw ConfigError(context, where(f.key),
                            "the key a second time (its first value: " + f.seen[f.key] + ")",
                            "each key once (a repeated key's last value would silently win)");
        f.seen[f.key] = "";
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames.pop_back();
        if (!frames.empty() && !frames.back().array) frames.back().seen[frames.back().key] = show(parsed);
        break;
      case Json::parse_event_t::value:
        element_starts();
        if (!frames.empty() && !frames.back().array) frames.back().seen[frames.back().key] = show(parsed);
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check, true, /*ignore_comments=*/false);
  } catch (const Json::out_of_range& e) {
    throw ConfigError(context, path.empty() ? where("") : path, "a number beyond the range of a double",
                      "a finite number (" + std::string(e.what()) + ")");
  }
}

void Problems::add(std::string path, std::string found, std::string expected) {
  list_.push_back(Problem{std::move(path), std::move(found), std::move(expected)});
}

void Problems::add(std::string path, const Json& found, std::string expected) {
  add(std::move(path), show(found), std::move(expected));
}

void Problems::throw_if_any() const {
  if (!list_.empty()) throw ConfigError(context_, list_);
}

std::string show(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

const Json* json_at(const Json& json, const std::string& dotted) {
  const Json* node = &json;
  for (std::size_t begin = 0;;) {
    const auto dot = dotted.find('.', begin);
    const std::string key = dotted.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    const bool index =
        !key.empty() && key.size() < 19 && key.find_first_not_of("0123456789") == std::string::npos;
    if (node->is_object() && node->contains(key))
      node = &(*node)[key];
    else if (node->is_array() && index && std::stoull(key) < node->size())
      node = &(*node)[std::stoull(key)];
    else
      return nullptr;
    if (dot == std::string::npos) return node;
    begin = dot + 1;
  }
}

namespace {

std::string format_bound(double v) {
  // A whole bound exactly (1048576, not 1.04858e+06).
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string range_text(double min, double max, bool integer) {
  const std::string kind = integer ? "an integer" : "a number";
  const bool has_min = std::isfinite(min);
  const bool has_max = std::isfinite(max);
  if (has_min && has_max) return kind + " in [" + format_bound(min) + ", " + format_bound(max) + "]";
  if (has_min) return kind + " >= " + format_bound(min);
  if (has_max) return kind + " <= " + format_bound(max);
  return kind;
}

}  // namespace

Fields::Fields(const Json& object, std::string path, Problems& problems)
    : object_(&object), path_(std::move(path)), problems_(problems) {
  if (!object.is_object()) {
    problems_.add(path_, object, "a JSON object");
    object_ = nullptr;
  }
}

bool Fields::has(const std::string& key) {
  known_.insert(key);
  return object_ && object_->contains(key);
}

const Json* Fields::optional(const std::string& key) {
  known_.insert(key);
  if (!object_) return nullptr;
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &*it;
}

const Json* Fields::value(const std::string& key) {
  const Json* v = optional(key);
  if (!v && object_)
    problems_.add(path_of(key), std::string("missing"), "a value for required key '" + key + "'");
  return v;
}

void Fields::allow(const std::string& key) { known_.insert(key); }

double Fields::number(const std::string& key, double min, double max) {
  const Json* v = value(key);
  if (!v) return std::isfinite(min) ? min : 0.0;
  if (!v->is_number()) {
    problems_.add(path_of(key), *v, range_text(min, max, false));
    return std::isfinite(min) ? min : 0.0;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    problems_.add(path_of(key), *v, range_text(min, max, false));
    return std::isfinite(min) ? min : 0.0;
  }
  return d;
}

double Fields::positive(const std::string& key) {
  const Json* v = value(key);
  if (!v) return 1.0;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0.0) {
    problems_.add(path_of(key), *v, "a number > 0");
    return 1.0;
  }
  return v->get<double>();
}

std::int64_t Fields::integer(const std::string& key, std::int64_t min, std::int64_t max) {
  const Json* v = value(key);
  const std::int64_t fallback = std::max<std::int64_t>(min, std::min<std::int64_t>(max, 1));
  if (!v) return fallback;
  const auto expected = [&] {  // written only for a problem
    return range_text(min == std::numeric_limits<std::int64_t>::min() ? -INFINITY : double(min),
                      max == std::numeric_limits<std::int64_t>::max() ? INFINITY : double(max), true);
  };
  bool whole = v->is_number_integer();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    whole = std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
  }
  if (!whole) {
    problems_.add(path_of(key), *v, expected());
    return fallback;
  }
  const std::int64_t i = v->is_number_float() ? std::int64_t(v->get<double>()) : v->get<std::int64_t>();
  if (v->is_number_unsigned() &&
      v->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
    problems_.add(path_of(key), *v, expected());
    return fallback;
  }
  if (i < min || i > max) {
    problems_.add(path_of(key), *v, expected());
    return fallback;
  }
  return i;
}

bool Fields::boolean(const std::string& key) {
  const Json* v = value(key);
  if (!v) return false;
  if (!v->is_boolean()) {
    problems_.add(path_of(key), *v, "true or false");
    return false;
  }
  return v->get<bool>();
}

std::string Fields::string(const std::string& key, const std::vector<std::string>& allowed) {
  const Json* v = value(key);
  const auto expected = [&] {  // written only for a problem
    std::string text = "one of";
    for (std::size_t i = 0; i < allowed.size(); ++i) text += (i ? ", \"" : " \"") + allowed[i] + "\"";
    return text;
  };
  if (!v) return allowed.empty() ? std::string() : allowed.front();
  if (!v->is_string() || v->get<std::string>().empty()) {
    problems_.add(path_of(key), *v, allowed.empty() ? "a non-empty string" : expected());
    return allowed.empty() ? std::string() : allowed.front();
  }
  std::string s = v->get<std::string>();
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    problems_.add(path_of(key), *v, expected());
    return allowed.front();
  }
  return s;
}

std::int64_t Fields::integer_or(const std::string& key, std::int64_t fallback, std::int64_t min,
                                std::int64_t max) {
  if (!has(key)) {
    allow(key);
    return fallback;
  }
  return integer(key, min, max);
}

double Fields::positive_or(const std::string& key, double fallback) {
  if (!has(key)) {
    allow(key);
    return fallback;
  }
  return positive(key);
}

bool Fields::boolean_or(const std::string& key, bool fallback) {
  if (!has(key)) {
    allow(key);
    return fallback;
  }
  return boolean(key);
}

std::string Fields::string_or(const std::string& key, const std::string& fallback,
                              const std::vector<std::string>& allowed) {
  if (!has(key)) {
    allow(key);
    return fallback;
  }
  return string(key, allowed);
}

void Fields::finish() {
  if (!object_) return;
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    if (!known_.count(it.key())) {
      std::string expected = "no such key; known keys:";
      for (const auto& k : known_) expected += " " + k;
      problems_.add(path_of(it.key()), std::string("an unknown key"), expected);
    }
  }
}

}  // namespace tpusim

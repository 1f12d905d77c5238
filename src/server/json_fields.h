// Reading a request's fields strictly: a field of the wrong type is a 400
// that names it (OpenAI's `param`), where nlohmann's get<T>() would turn
// true into 1, 1.5 into 1 and 4294967297 into 1 for an int32_t.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "server/openai.h"

namespace reclaim::server {

template <class T>
T get_field(const nlohmann::json& j, const char* name, const char* what) {
  const nlohmann::json& v = j.at(name);
  auto refuse = [&]() -> T { bad_field(name, std::string("'") + name + "' must be " + what); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return refuse();
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return refuse();
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return refuse();
      return static_cast<T>(u);
    }
    const int64_t n = v.get<int64_t>();
    if (n < static_cast<int64_t>(std::numeric_limits<T>::min()) || n > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      return refuse();
    }
    return static_cast<T>(n);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return refuse();
    const T x = v.get<T>();
    if (!std::isfinite(x)) return refuse();
    return x;
  } else {
    if (!v.is_string()) return refuse();
    return v.get<T>();
  }
}


// Whether `j` has `name` with a value other than null.
inline bool has_field(const nlohmann::json& j, const char* name) { return j.contains(name) && !j.at(name).is_null(); }

// "base[i]", the name of an element in an error's `param`.
inline std::string indexed(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

// `item`'s string `key`, where `item` is the element named `here`; a 400
// naming "here.key" otherwise.
inline const nlohmann::json& string_at(const nlohmann::json& item, const char* key, const std::string& here) {
  if (!item.is_object() || !item.contains(key) || !item[key].is_string()) {
    bad_field(here + "." + key, "'" + here + "." + key + "' must be a string");
  }
  return item[key];
}

// `item`'s string `key`, or `fallback` where `item` is no object or has no
// such key (or null); a 400 naming "here.key" where it is something else
// (nlohmann's value() would throw its type_error, a 500).
inline std::string string_or(const nlohmann::json& item, const char* key, const std::string& fallback, const std::string& here) {
  if (!item.is_object()) return fallback;
  const auto it = item.find(key);
  if (it == item.end() || it->is_null()) return fallback;
  if (!it->is_string()) bad_field(here + "." + key, "'" + here + "." + key + "' must be a string");
  return it->get<std::string>();
}

// The model a body names, if a string (empty otherwise: the lease or the
// parse says what is wrong with it).
inline std::string named_model(const nlohmann::json& body) {
  const auto it = body.find("model");
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace reclaim::server

// ReplyFields: the fields of a JSON reply from ringfeedd (a status, a welcome, ...) read with
// their types checked, for ringfeedctl. A field that is missing or null reads as its fallback
// (what a daemon that does not send it means: an older version); one of another JSON type throws
// BadReplyField, naming the field's path in the reply ("throughput.records_per_second",
// "consumers[1].rank"), which ringfeedctl turns into "ringfeedd at SOCKET sent a reply
// ringfeedctl cannot read (...)".
// Thread-safety: a ReplyFields holds a reference to its JSON, which must outlive it and not
// change while it is read; reading from several threads at once is fine.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringfeed {

// A field of a reply whose JSON type is not the one ringfeedctl reads: a daemon of another
// version, or another program answering on the socket. ReadingReply turns it into the error
// the user sees, where the socket is known.
struct BadReplyField {
  std::string field;     // its path in the reply: "throughput.records_per_second", "consumers[1].rank"
  std::string expected;  // "a number", "an object", ...
};

// The fields of one JSON object of a reply, read with their types checked: nlohmann's value()
// and operator[] throw "[json.exception.type_error.302] ..." naming no field, and a const
// operator[] of a missing key is undefined. A field that is missing or null reads as its
// fallback (what a daemon that does not send it means); one of another type throws
// BadReplyField. Holds a reference: the reply must outlive it.
class ReplyFields {
 public:
  explicit ReplyFields(const nlohmann::json& object, std::string path = "") : j_(object), path_(std::move(path)) {
    if (!j_.is_object()) throw BadReplyField{path_.empty() ? "the reply" : path_, "an object"};
  }

  bool Has(const char* key) const { return Find(key) != nullptr; }
  // Missing or null: an object without fields.
  ReplyFields Object(const char* key) const {
    static const nlohmann::json kEmpty = nlohmann::json::object();
    const nlohmann::json* v = Find(key);
    return ReplyFields(v ? *v : kEmpty, Path(key));
  }
  // Lists (missing or null: empty) of objects, strings, integers.
  std::vector<ReplyFields> Objects(const char* key) const {
    std::vector<ReplyFields> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) out.emplace_back((*list)[i], Element(key, i));
    return out;
  }
  std::vector<std::string> Strings(const char* key) const {
    std::vector<std::string> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) {
      if (!(*list)[i].is_string()) throw BadReplyField{Element(key, i), "a string"};
      out.push_back((*list)[i].get<std::string>());
    }
    return out;
  }
  std::vector<int64_t> Integers(const char* key) const {
    std::vector<int64_t> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) out.push_back(AsInteger((*list)[i], Element(key, i)));
    return out;
  }
  double Number(const char* key, double fallback = 0) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_number()) throw BadReplyField{Path(key), "a number"};
    return v->get<double>();
  }
  int64_t Integer(const char* key, int64_t fallback = 0) const {
    const nlohmann::json* v = Find(key);
    return v ? AsInteger(*v, Path(key)) : fallback;
  }
  // An integer >= 0 (a count, bytes).
  uint64_t Count(const char* key, uint64_t fallback = 0) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
      throw BadReplyField{Path(key), "an integer >= 0"};
    }
    return v->get<uint64_t>();
  }
  bool Bool(const char* key, bool fallback = false) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw BadReplyField{Path(key), "true or false"};
    return v->get<bool>();
  }
  std::string String(const char* key, const std::string& fallback = "") const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_string()) throw BadReplyField{Path(key), "a string"};
    return v->get<std::string>();
  }
  // A string that must be there (the fields that say what a message is).
  std::string RequiredString(const char* key) const {
    if (!Has(key)) throw BadReplyField{Path(key), "a string"};
    return String(key);
  }

 private:
  const nlohmann::json* Find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  const nlohmann::json* List(const char* key) const {
    const nlohmann::json* v = Find(key);
    if (v && !v->is_array()) throw BadReplyField{Path(key), "an array"};
    return v;
  }
  static int64_t AsInteger(const nlohmann::json& v, const std::string& path) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
      throw BadReplyField{path, "an integer"};
    }
    return v.get<int64_t>();
  }
  std::string Path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  std::string Element(const char* key, size_t i) const { return Path(key) + "[" + std::to_string(i) + "]"; }

  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace ringfeed

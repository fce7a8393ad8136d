#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace audiodeploy {

// Just enough JSON for the report: values are appended in order, commas are
// placed by the writer so callers cannot produce a malformed document.
class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& key(const std::string& name) {
    separate();
    append_string(name);
    text_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& text) {
    separate();
    append_string(text);
    return *this;
  }
  JsonWriter& value(const char* text) { return value(std::string(text)); }
  JsonWriter& value(int64_t number) {
    separate();
    text_ += std::to_string(number);
    return *this;
  }
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(uint64_t number) {
    separate();
    text_ += std::to_string(number);
    return *this;
  }
  JsonWriter& value(double number) {
    separate();
    if (!std::isfinite(number)) {
      text_ += "null";  // JSON has no NaN or infinity
      return *this;
    }
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6f", number);
    text_ += buffer;
    return *this;
  }
  JsonWriter& value(bool flag) {
    separate();
    text_ += flag ? "true" : "false";
    return *this;
  }
  JsonWriter& null() {
    separate();
    text_ += "null";
    return *this;
  }
  JsonWriter& shape(const std::vector<int64_t>& dims) {
    begin_array();
    for (const int64_t dim : dims) value(dim);
    return end_array();
  }

  const std::string& text() const { return text_; }

 private:
  JsonWriter& open(char bracket) {
    separate();
    text_ += bracket;
    first_in_scope_.push_back(true);
    return *this;
  }
  JsonWriter& close(char bracket) {
    text_ += bracket;
    first_in_scope_.pop_back();
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_in_scope_.empty()) {
      if (!first_in_scope_.back()) text_ += ',';
      first_in_scope_.back() = false;
    }
  }
  void append_string(const std::string& raw) {
    text_ += '"';
    for (const char c : raw) {
      const auto byte = static_cast<unsigned char>(c);
      switch (c) {
        case '"': text_ += "\\\""; break;
        case '\\': text_ += "\\\\"; break;
        case '\n': text_ += "\\n"; break;
        case '\r': text_ += "\\r"; break;
        case '\t': text_ += "\\t"; break;
        default:
          if (byte < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
            text_ += escaped;
          } else {
            text_ += c;
          }
      }
    }
    text_ += '"';
  }

  std::string text_;
  std::vector<bool> first_in_scope_;
  bool after_key_ = false;
};

}  // namespace audiodeploy

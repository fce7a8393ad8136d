#include "executorch_log.h"

#include <cstdio>

#include <executorch/runtime/platform/platform.h>

namespace audiodeploy {

namespace {

bool g_copy_to_stderr = false;
std::string g_last_error;

void on_log_message(
    et_timestamp_t /*timestamp*/,
    et_pal_log_level_t level,
    const char* /*filename*/,
    const char* /*function*/,
    size_t /*line*/,
    const char* message,
    size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  // The runtime quotes raw file bytes (a wrong magic, say); keep the error
  // line printable and on one line.
  for (char& c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) c = '?';
  }
  if (level == kError || level == kFatal) {
    g_last_error = text;
  }
  if (g_copy_to_stderr) {
    std::fprintf(stderr, "executorch %c: %s\n", static_cast<char>(level), text.c_str());
  }
}

}  // namespace

void capture_executorch_log(bool copy_to_stderr) {
  g_copy_to_stderr = copy_to_stderr;
  executorch::runtime::register_pal(
      executorch::runtime::PalImpl::create(on_log_message, __FILE__));
}

std::string last_executorch_error() {
  return g_last_error;
}

}  // namespace audiodeploy

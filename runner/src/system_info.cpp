#include "system_info.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

namespace audiodeploy {

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// The first value of each key in /proc/cpuinfo (the first processor's block).
std::map<std::string, std::string> read_cpuinfo() {
  std::map<std::string, std::string> fields;
  std::ifstream stream("/proc/cpuinfo");
  std::string line;
  while (std::getline(stream, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    fields.emplace(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  return fields;
}

std::string cpu_model(const std::map<std::string, std::string>& fields) {
  // x86 names its model; arm64 kernels give implementer and part numbers, and
  // some vendor kernels a "Hardware" line naming the SoC.
  for (const char* key : {"model name", "Hardware", "Processor", "cpu model"}) {
    const auto found = fields.find(key);
    if (found != fields.end() && !found->second.empty()) return found->second;
  }
  const auto implementer = fields.find("CPU implementer");
  const auto part = fields.find("CPU part");
  if (implementer != fields.end() && part != fields.end()) {
    return "ARM implementer " + implementer->second + " part " + part->second;
  }
  return "unknown";
}

const char* compiled_architecture() {
#if defined(__aarch64__)
  return "aarch64";
#elif defined(__x86_64__)
  return "x86_64";
#elif defined(__arm__)
  return "arm";
#else
  return "unknown";
#endif
}

}  // namespace

CpuInfo describe_cpu() {
  CpuInfo info;
  info.model = cpu_model(read_cpuinfo());
  info.architecture = compiled_architecture();
  utsname names{};
  info.machine = uname(&names) == 0 ? names.machine : "unknown";
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  info.cores = online > 0 ? static_cast<int>(online) : 0;
  return info;
}

uint64_t peak_resident_bytes() {
  std::ifstream stream("/proc/self/status");
  std::string line;
  while (std::getline(stream, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      uint64_t kib = 0;
      if (fields >> kib) return kib * 1024;
    }
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
  }
  return 0;
}

}  // namespace audiodeploy

#pragma once

#include <cstdint>
#include <string>

namespace audiodeploy {

struct CpuInfo {
  std::string model;         // "AMD EPYC ...", or "ARM implementer 0x41 part 0xd0b" on arm64
  std::string architecture;  // what the runner was compiled for
  std::string machine;       // uname -m: what the kernel (or qemu-user) says it runs on
  int cores = 0;
};

CpuInfo describe_cpu();
// Peak resident set size of this process in bytes (VmHWM, else getrusage).
uint64_t peak_resident_bytes();

}  // namespace audiodeploy

#pragma once

#include <stdexcept>
#include <string>

namespace audiodeploy {

// Every expected failure (bad flag, bad file, a program the runtime refuses)
// is thrown as this and printed by main() as one `error: ...` line.
class RunnerError : public std::runtime_error {
 public:
  explicit RunnerError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace audiodeploy

namespace audiodeploy {

// A bad command line: exit status 2, as argument parsers usually do.
class UsageError : public RunnerError {
 public:
  explicit UsageError(const std::string& message) : RunnerError(message) {}
};

}  // namespace audiodeploy

#pragma once

#include <string>

namespace audiodeploy {

// Routes ExecuTorch's log lines away from stdout (which carries only the JSON
// report): dropped, or copied to stderr with --verbose. The last error-level
// line is kept so a failure can say what the runtime complained about.
void capture_executorch_log(bool copy_to_stderr);
std::string last_executorch_error();

}  // namespace audiodeploy

#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace audiodeploy {

using Shape = std::vector<int64_t>;

// "1x80x100" -> {1, 80, 100}; throws RunnerError naming `what` on bad text.
Shape parse_shape(const std::string& text, const std::string& what);
std::string format_shape(const Shape& shape);
// Throws RunnerError when the element count overflows.
int64_t element_count(const Shape& shape);

}  // namespace audiodeploy

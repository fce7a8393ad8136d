#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"
#include "shape.h"

namespace audiodeploy {

// Reads a raw little-endian float32 file whose size must match `input.shape`.
std::vector<float> read_float32_file(const InputFile& input);

// Deterministic input values: zeros, or uniform in [-1, 1) from splitmix64
// seeded with (seed, input index), so a run is reproducible across machines.
std::vector<float> fill_values(FillMode mode, int64_t count, uint64_t seed, size_t input_index);

struct OutputTensor {
  Shape shape;
  std::string dtype;
  const void* data;
  size_t nbytes;
};

// Writes output_<i>.bin (raw bytes as the runtime holds them) and a
// manifest.json of file, shape and dtype; creates `directory` if needed.
void write_outputs(const std::string& directory, const std::vector<OutputTensor>& outputs);

}  // namespace audiodeploy

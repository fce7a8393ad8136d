#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"
#include "shape.h"

namespace audiodeploy {

// A tensor's elements as raw bytes (the allocation is aligned for any scalar).
using TensorBytes = std::vector<uint8_t>;

// Reads a raw little-endian file of `dtype` elements of `element_size` bytes
// whose size must match `input.shape`.
TensorBytes read_tensor_file(const InputFile& input, const std::string& dtype, size_t element_size);

// Deterministic input values: zeros of any dtype, or float32 values uniform in
// [-1, 1) from splitmix64 seeded with (seed, input index), so a run is
// reproducible across machines.
TensorBytes fill_zeros(int64_t count, size_t element_size);
TensorBytes fill_seeded_float32(int64_t count, uint64_t seed, size_t input_index);

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

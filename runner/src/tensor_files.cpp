#include "tensor_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "json_writer.h"
#include "runner_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the runner reads and writes little-endian files as memory images"
#endif

namespace audiodeploy {

namespace fs = std::filesystem;

TensorBytes read_tensor_file(const InputFile& input, const std::string& dtype, size_t element_size) {
  std::error_code error;
  if (!fs::is_regular_file(input.path, error)) {
    throw RunnerError("input file " + input.path + " does not exist or is not a file");
  }
  const auto size = fs::file_size(input.path, error);
  if (error) {
    throw RunnerError("cannot read the size of input file " + input.path + ": " + error.message());
  }
  const int64_t count = element_count(input.shape);
  const auto expected = static_cast<uintmax_t>(count) * element_size;
  if (size != expected) {
    throw RunnerError("input file " + input.path + " has " + std::to_string(size) + " bytes, shape " +
                      format_shape(input.shape) + " of " + dtype + " needs " + std::to_string(expected));
  }
  TensorBytes values(static_cast<size_t>(expected));
  std::ifstream stream(input.path, std::ios::binary);
  if (!stream) {
    throw RunnerError("cannot open input file " + input.path + ": " + std::strerror(errno));
  }
  stream.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(expected));
  if (stream.gcount() != static_cast<std::streamsize>(expected)) {
    throw RunnerError("input file " + input.path + " ended early");
  }
  return values;
}

namespace {

uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

TensorBytes fill_zeros(int64_t count, size_t element_size) {
  return TensorBytes(static_cast<size_t>(count) * element_size, 0);
}

TensorBytes fill_seeded_float32(int64_t count, uint64_t seed, size_t input_index) {
  TensorBytes bytes(static_cast<size_t>(count) * sizeof(float));
  float* values = reinterpret_cast<float*>(bytes.data());
  uint64_t state = seed ^ (0xD1B54A32D192ED03ull * (input_index + 1));
  for (int64_t i = 0; i < count; ++i) {
    // 24 random bits are exactly representable in a float.
    const auto bits = static_cast<uint32_t>(splitmix64(state) >> 40);
    values[i] = static_cast<float>(bits) / 8388608.0f - 1.0f;
  }
  return bytes;
}

void write_outputs(const std::string& directory, const std::vector<OutputTensor>& outputs) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    throw RunnerError("cannot create output directory " + directory + ": " + error.message());
  }
  JsonWriter manifest;
  manifest.begin_object().key("schema").value("audiodeploy.runner.outputs/1").key("outputs").begin_array();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string name = "output_" + std::to_string(i) + ".bin";
    const fs::path path = fs::path(directory) / name;
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    stream.write(static_cast<const char*>(outputs[i].data), static_cast<std::streamsize>(outputs[i].nbytes));
    stream.close();
    if (!stream) {
      throw RunnerError("cannot write " + path.string());
    }
    manifest.begin_object()
        .key("file").value(name)
        .key("shape").shape(outputs[i].shape)
        .key("dtype").value(outputs[i].dtype)
        .end_object();
  }
  manifest.end_array().end_object();
  const fs::path manifest_path = fs::path(directory) / "manifest.json";
  std::ofstream stream(manifest_path, std::ios::trunc);
  stream << manifest.text() << '\n';
  stream.close();
  if (!stream) {
    throw RunnerError("cannot write " + manifest_path.string());
  }
}

}  // namespace audiodeploy

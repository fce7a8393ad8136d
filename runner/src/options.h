#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shape.h"

namespace audiodeploy {

enum class FillMode { None, Zeros, Seeded };

struct InputFile {
  std::string path;
  Shape shape;
};

struct Options {
  std::string model_path;
  std::optional<std::string> data_path;
  std::string method = "forward";
  std::vector<InputFile> input_files;
  FillMode fill = FillMode::None;
  std::vector<Shape> fill_shapes;  // optional, one per input; else the method meta's sizes
  uint64_t seed = 0;
  int warmup = 1;
  int iterations = 10;
  int threads = 0;  // 0: the runtime's default (performant cores)
  std::optional<std::string> output_dir;
  bool verbose = false;
  bool help = false;
};

// Throws RunnerError with a one-line reason; does not touch the filesystem.
Options parse_options(int argc, char** argv);
const char* usage_text();

}  // namespace audiodeploy

#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "runner_error.h"

namespace audiodeploy {

namespace {

int64_t parse_integer(const std::string& text, const std::string& what, int64_t min_value, int64_t max_value) {
  if (text.empty()) {
    throw RunnerError(what + " is empty");
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    throw RunnerError(what + " is not an integer: '" + text + "'");
  }
  if (value < min_value || value > max_value) {
    throw RunnerError(what + " must be between " + std::to_string(min_value) + " and " +
                      std::to_string(max_value) + ", got " + text);
  }
  return value;
}

// FILE:1x80x100. The shape follows the last colon so a path may contain colons.
InputFile parse_input_file(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw RunnerError("--input expects FILE:D0xD1x..., got '" + text + "'");
  }
  return InputFile{text.substr(0, colon), parse_shape(text.substr(colon + 1), "--input " + text)};
}

FillMode parse_fill(const std::string& text) {
  if (text == "zeros") return FillMode::Zeros;
  if (text == "seeded") return FillMode::Seeded;
  throw RunnerError("--fill expects zeros or seeded, got '" + text + "'");
}

Options parse_options_or_throw(int argc, char** argv);

}  // namespace

Shape parse_shape(const std::string& text, const std::string& what) {
  Shape shape;
  if (text == "scalar") {
    return shape;
  }
  std::string::size_type start = 0;
  while (true) {
    const auto cross = text.find('x', start);
    const std::string piece = text.substr(start, cross == std::string::npos ? std::string::npos : cross - start);
    shape.push_back(parse_integer(piece, what + ": dimension", 0, std::numeric_limits<int32_t>::max()));
    if (cross == std::string::npos) break;
    start = cross + 1;
  }
  element_count(shape);  // rejects shapes whose size overflows
  return shape;
}

std::string format_shape(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += 'x';
    text += std::to_string(shape[i]);
  }
  return text;
}

int64_t element_count(const Shape& shape) {
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / 8 / dim) {
      throw RunnerError("shape " + format_shape(shape) + " is too large");
    }
    count *= dim;
  }
  return count;
}

Options parse_options(int argc, char** argv) {
  try {
    return parse_options_or_throw(argc, argv);
  } catch (const UsageError&) {
    throw;
  } catch (const RunnerError& error) {
    throw UsageError(error.what());
  }
}

namespace {

Options parse_options_or_throw(int argc, char** argv) {
  Options options;
  bool have_model = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    // Every flag except the switches takes exactly one value.
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw RunnerError(flag + " needs a value");
      }
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      options.help = true;
    } else if (flag == "--verbose") {
      options.verbose = true;
    } else if (flag == "--model") {
      options.model_path = value();
      have_model = true;
    } else if (flag == "--data") {
      options.data_path = value();
    } else if (flag == "--method") {
      options.method = value();
    } else if (flag == "--input") {
      options.input_files.push_back(parse_input_file(value()));
    } else if (flag == "--fill") {
      options.fill = parse_fill(value());
    } else if (flag == "--shape") {
      options.fill_shapes.push_back(parse_shape(value(), "--shape"));
    } else if (flag == "--seed") {
      options.seed = static_cast<uint64_t>(parse_integer(value(), "--seed", 0, std::numeric_limits<int64_t>::max()));
    } else if (flag == "--warmup") {
      options.warmup = static_cast<int>(parse_integer(value(), "--warmup", 0, 1000000));
    } else if (flag == "--iterations") {
      options.iterations = static_cast<int>(parse_integer(value(), "--iterations", 1, 1000000));
    } else if (flag == "--threads") {
      options.threads = static_cast<int>(parse_integer(value(), "--threads", 0, 1024));
    } else if (flag == "--output-dir") {
      options.output_dir = value();
    } else {
      throw RunnerError("unknown option '" + flag + "' (see --help)");
    }
  }
  if (options.help) {
    return options;
  }
  if (!have_model || options.model_path.empty()) {
    throw RunnerError("--model is required (see --help)");
  }
  if (!options.input_files.empty() && options.fill != FillMode::None) {
    throw RunnerError("give either --input files or --fill, not both");
  }
  if (!options.fill_shapes.empty() && options.fill == FillMode::None) {
    throw RunnerError("--shape only applies with --fill zeros|seeded");
  }
  return options;
}

}  // namespace

const char* usage_text() {
  return "usage: audiodeploy-runner --model M.pte [--data M.ptd] [--method forward]\n"
         "                          [--input FILE:D0xD1x...]... | [--fill zeros|seeded [--shape D0xD1x...]... [--seed S]]\n"
         "                          [--warmup 1] [--iterations 10] [--threads 0] [--output-dir DIR] [--verbose]\n"
         "\n"
         "Runs an ExecuTorch program (XNNPACK and the optimized CPU kernels linked in) and prints one JSON\n"
         "object on stdout. Inputs are raw little-endian files of the method's dtypes with their shapes, one\n"
         "--input per method input in order, or filled (sizes from the method meta unless --shape is given;\n"
         "seeded values are float32, so an integer input is given or zeros). --threads 0\n"
         "keeps the runtime's default. --output-dir writes output_<i>.bin (raw, little-endian) and\n"
         "manifest.json. Errors are one 'error: ...' line on stderr and exit status 1 (2 for bad usage).\n";
}

}  // namespace audiodeploy

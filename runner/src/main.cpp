// audiodeploy-runner: load an ExecuTorch program, run it with given or filled
// inputs, and print one JSON report (schema audiodeploy.runner/1) on stdout.
// Every expected failure is one `error: ...` line on stderr and a non-zero exit.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/backend/backend_options_map.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/executor/method_meta.h>

#include "executorch_log.h"
#include "json_writer.h"
#include "options.h"
#include "runner_error.h"
#include "system_info.h"
#include "tensor_files.h"
#include "thread_count.h"

#ifndef AUDIODEPLOY_EXECUTORCH_VERSION
#define AUDIODEPLOY_EXECUTORCH_VERSION "unknown"
#endif

namespace audiodeploy {

namespace {

namespace fs = std::filesystem;
using executorch::aten::ScalarType;
using executorch::extension::TensorPtr;
using executorch::extension::module::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::MethodMeta;
using executorch::runtime::Tag;
using Clock = std::chrono::steady_clock;

constexpr const char* kSchema = "audiodeploy.runner/1";

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Turns a runtime Error into a RunnerError that also carries the runtime's
// own last error line, which usually names the real cause.
void check(Error error, const std::string& doing) {
  if (error == Error::Ok) return;
  std::string message = doing + " failed: " + executorch::runtime::to_string(error);
  const std::string detail = last_executorch_error();
  if (!detail.empty()) message += " (executorch: " + detail + ")";
  throw RunnerError(message);
}

template <typename T>
T unwrap(executorch::runtime::Result<T> result, const std::string& doing) {
  check(result.error(), doing);
  return std::move(result.get());
}

const char* dtype_name(ScalarType type) {
  switch (type) {
    case ScalarType::Float: return "float32";
    case ScalarType::Double: return "float64";
    case ScalarType::Half: return "float16";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Long: return "int64";
    case ScalarType::Int: return "int32";
    case ScalarType::Short: return "int16";
    case ScalarType::Char: return "int8";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Bool: return "bool";
    default: return "other";
  }
}

Shape shape_of(executorch::runtime::Span<const int32_t> sizes) {
  return Shape(sizes.begin(), sizes.end());
}

void require_regular_file(const std::string& path, const std::string& what) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    throw RunnerError(what + " " + path + " does not exist or is not a file");
  }
}

struct LoadedProgram {
  std::unique_ptr<Module> module;
  double program_ms = 0;
  double method_ms = 0;
};

LoadedProgram load_program(const Options& options) {
  require_regular_file(options.model_path, "model file");
  if (options.data_path) require_regular_file(*options.data_path, "data file");

  LoadedProgram loaded;
  // Mmap: constants are paged in from the file rather than copied up front.
  loaded.module = options.data_path
      ? std::make_unique<Module>(options.model_path, *options.data_path, Module::LoadMode::Mmap)
      : std::make_unique<Module>(options.model_path, Module::LoadMode::Mmap);

  // XNNPACK packs a constant once per operator that reads it unless its weight cache is on: an LSTM unrolled over
  // EnCodec's 75 frames packed its 4 MiB recurrent weight once per step, 148 copies, each step reading a cold one.
  // The options must outlive the program's methods (the map holds a view of them), hence static.
  static executorch::runtime::BackendOptions<1> xnnpack_options;
  check(xnnpack_options.set_option("weight_cache_enabled", true), "setting XNNPACK's weight cache option");
  executorch::runtime::LoadBackendOptionsMap backend_options;
  check(backend_options.set_options("XnnpackBackend", xnnpack_options.view()), "setting XNNPACK's load options");
  const auto program_start = Clock::now();
  check(loaded.module->load(backend_options), "loading program " + options.model_path);
  loaded.program_ms = milliseconds_since(program_start);

  const auto names = unwrap(loaded.module->method_names(), "listing the methods of " + options.model_path);
  if (names.count(options.method) == 0) {
    const std::set<std::string> sorted(names.begin(), names.end());
    std::string listed;
    for (const auto& name : sorted) listed += (listed.empty() ? "" : ", ") + name;
    throw RunnerError("program " + options.model_path + " has no method '" + options.method +
                      "' (methods: " + listed + ")");
  }
  const auto method_start = Clock::now();
  check(loaded.module->load_method(options.method), "loading method '" + options.method + "'");
  loaded.method_ms = milliseconds_since(method_start);
  return loaded;
}

struct PreparedInput {
  Shape shape;
  std::string dtype;   // the method's, as dtype_name gives it
  std::string source;  // "file", "zeros" or "seeded"
  TensorBytes bytes;
  TensorPtr tensor;
};

// The method meta gives each input's dtype and its largest shape (dynamic
// dimensions are planned at their upper bound), so a given shape must have the
// same rank and no dimension above the meta's.
void check_shape_fits(const Shape& shape, const Shape& bound, size_t index, const std::string& method) {
  const std::string where = "input " + std::to_string(index) + " of method '" + method + "'";
  if (shape.size() != bound.size()) {
    throw RunnerError(where + " has rank " + std::to_string(bound.size()) + " (" + format_shape(bound) +
                      "), got shape " + format_shape(shape));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] > bound[d]) {
      throw RunnerError(where + " is at most " + format_shape(bound) + ", got shape " + format_shape(shape) +
                        " (dimension " + std::to_string(d) + ")");
    }
  }
}

std::string inputs_phrase(size_t count) {
  return std::to_string(count) + (count == 1 ? " input" : " inputs");
}

std::vector<PreparedInput> prepare_inputs(const Options& options, const MethodMeta& meta) {
  const size_t count = meta.num_inputs();
  if (!options.input_files.empty() && options.input_files.size() != count) {
    throw RunnerError("method '" + options.method + "' takes " + inputs_phrase(count) + ", got " +
                      std::to_string(options.input_files.size()) + " --input");
  }
  if (!options.fill_shapes.empty() && options.fill_shapes.size() != count) {
    throw RunnerError("method '" + options.method + "' takes " + inputs_phrase(count) + ", got " +
                      std::to_string(options.fill_shapes.size()) + " --shape");
  }
  if (count > 0 && options.input_files.empty() && options.fill == FillMode::None) {
    throw RunnerError("method '" + options.method + "' takes " + inputs_phrase(count) +
                      ": give --input FILE:SHAPE for each, or --fill zeros|seeded");
  }
  std::vector<PreparedInput> inputs(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string where = "input " + std::to_string(i) + " of method '" + options.method + "'";
    const Tag tag = unwrap(meta.input_tag(i), "reading the tag of " + where);
    if (tag != Tag::Tensor) {
      throw RunnerError(where + " is not a tensor; the runner feeds tensors only");
    }
    const auto info = unwrap(meta.input_tensor_meta(i), "reading the meta of " + where);
    const ScalarType type = info.scalar_type();
    PreparedInput& input = inputs[i];
    input.dtype = dtype_name(type);
    if (input.dtype == "other") {
      throw RunnerError(where + " has a dtype the runner cannot feed; it feeds floating-point, integer and bool "
                        "tensors");
    }
    const size_t element_size = executorch::runtime::elementSize(type);
    const Shape bound = shape_of(info.sizes());
    if (!options.input_files.empty()) {
      input.shape = options.input_files[i].shape;
      check_shape_fits(input.shape, bound, i, options.method);
      input.bytes = read_tensor_file(options.input_files[i], input.dtype, element_size);
      input.source = "file";
    } else {
      input.shape = options.fill_shapes.empty() ? bound : options.fill_shapes[i];
      check_shape_fits(input.shape, bound, i, options.method);
      const int64_t count = element_count(input.shape);
      if (options.fill == FillMode::Seeded) {
        // Random values fit a float32 signal; an integer input (codes, token ids) has a valid range the
        // program does not record, so it is given, not invented.
        if (type != ScalarType::Float) {
          throw RunnerError(where + " is " + input.dtype + "; --fill seeded makes float32 values only: give "
                            "--input FILE:SHAPE (or --fill zeros)");
        }
        input.bytes = fill_seeded_float32(count, options.seed, i);
        input.source = "seeded";
      } else {
        input.bytes = fill_zeros(count, element_size);
        input.source = "zeros";
      }
    }
    std::vector<executorch::aten::SizesType> sizes(input.shape.begin(), input.shape.end());
    input.tensor = executorch::extension::make_tensor_ptr(std::move(sizes), input.bytes.data(), type);
  }
  return inputs;
}

struct Timings {
  std::vector<double> latencies_ms;
  std::vector<EValue> outputs;  // of the last iteration; point into the method's memory
};

Timings run_iterations(Module& module, const Options& options, const std::vector<PreparedInput>& inputs) {
  std::vector<EValue> values;
  values.reserve(inputs.size());
  for (const auto& input : inputs) values.emplace_back(input.tensor);

  // Set once up front so a shape the program cannot take (a static dimension
  // given a different size) is reported as an input problem, not a run failure.
  std::string shapes;
  for (const auto& input : inputs) shapes += (shapes.empty() ? "" : ", ") + format_shape(input.shape);
  check(module.set_inputs(options.method, values),
        "setting the inputs of method '" + options.method + "' to shape " + shapes);

  Timings timings;
  const int total = options.warmup + options.iterations;
  for (int i = 0; i < total; ++i) {
    const bool warming_up = i < options.warmup;
    const auto start = Clock::now();
    auto result = module.execute(options.method, values);
    const double elapsed = milliseconds_since(start);
    const std::string which = warming_up ? "warm-up run " + std::to_string(i + 1)
                                         : "timed run " + std::to_string(i - options.warmup + 1);
    timings.outputs = unwrap(std::move(result), "executing method '" + options.method + "' (" + which + ")");
    if (!warming_up) timings.latencies_ms.push_back(elapsed);
  }
  return timings;
}

std::vector<OutputTensor> describe_outputs(const std::vector<EValue>& outputs) {
  std::vector<OutputTensor> described;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].isTensor()) {
      throw RunnerError("output " + std::to_string(i) + " is not a tensor; the runner reports tensors only");
    }
    const auto& tensor = outputs[i].toTensor();
    described.push_back(OutputTensor{
        Shape(tensor.sizes().begin(), tensor.sizes().end()),
        dtype_name(tensor.scalar_type()),
        tensor.const_data_ptr(),
        tensor.nbytes()});
  }
  return described;
}

std::string report_json(const Options& options, const LoadedProgram& loaded, int threads,
                        const std::vector<PreparedInput>& inputs, const Timings& timings,
                        const std::vector<OutputTensor>& outputs) {
  const CpuInfo cpu = describe_cpu();
  JsonWriter json;
  json.begin_object();
  json.key("schema").value(kSchema);
  json.key("executorch_version").value(AUDIODEPLOY_EXECUTORCH_VERSION);
  json.key("model").value(options.model_path);
  json.key("data");
  options.data_path ? json.value(*options.data_path) : json.null();
  json.key("method").value(options.method);
  json.key("load_ms").begin_object()
      .key("program").value(loaded.program_ms)
      .key("method").value(loaded.method_ms)
      .key("total").value(loaded.program_ms + loaded.method_ms)
      .end_object();
  json.key("warmup").value(options.warmup);
  json.key("iterations").value(options.iterations);
  json.key("latencies_ms").begin_array();
  for (const double latency : timings.latencies_ms) json.value(latency);
  json.end_array();
  json.key("peak_rss_bytes").value(peak_resident_bytes());
  json.key("cpu").begin_object()
      .key("model").value(cpu.model)
      .key("architecture").value(cpu.architecture)
      .key("machine").value(cpu.machine)
      .key("cores").value(cpu.cores)
      .end_object();
  json.key("threads").value(threads);
  json.key("inputs").begin_array();
  for (const auto& input : inputs) {
    json.begin_object().key("shape").shape(input.shape).key("dtype").value(input.dtype)
        .key("source").value(input.source).end_object();
  }
  json.end_array();
  json.key("outputs").begin_array();
  for (const auto& output : outputs) {
    json.begin_object().key("shape").shape(output.shape).key("dtype").value(output.dtype).end_object();
  }
  json.end_array();
  json.key("output_dir");
  options.output_dir ? json.value(*options.output_dir) : json.null();
  json.end_object();
  return json.text();
}

int run(const Options& options) {
  capture_executorch_log(options.verbose);
  // Before any method loads: XNNPACK binds the pool it sees at init.
  const int threads = set_thread_count(options.threads);
  LoadedProgram loaded = load_program(options);
  const MethodMeta meta = unwrap(loaded.module->method_meta(options.method), "reading the meta of '" + options.method + "'");
  const std::vector<PreparedInput> inputs = prepare_inputs(options, meta);
  const Timings timings = run_iterations(*loaded.module, options, inputs);
  const std::vector<OutputTensor> outputs = describe_outputs(timings.outputs);
  if (options.output_dir) write_outputs(*options.output_dir, outputs);
  const std::string report = report_json(options, loaded, threads, inputs, timings, outputs);
  std::fwrite(report.data(), 1, report.size(), stdout);
  std::fputc('\n', stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

void print_error(const std::string& message) {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "error: %s\n", line.c_str());
}

}  // namespace

}  // namespace audiodeploy

int main(int argc, char** argv) {
  using namespace audiodeploy;
  try {
    const Options options = parse_options(argc, argv);
    if (options.help) {
      std::fputs(usage_text(), stdout);
      return 0;
    }
    return run(options);
  } catch (const UsageError& error) {
    print_error(error.what());
    return 2;
  } catch (const RunnerError& error) {
    print_error(error.what());
    return 1;
  } catch (const std::bad_alloc&) {
    print_error("out of memory");
    return 1;
  } catch (const std::exception& error) {
    print_error(std::string("unexpected failure: ") + error.what());
    return 1;
  }
}

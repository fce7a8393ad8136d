#include "thread_count.h"

#include <cstddef>
#include <cstdint>

#include "runner_error.h"

// The wheel ships libexecutorch_threadpool.so but not its header
// (extension/threadpool/threadpool.h), so the two members used here are
// declared as the library defines them. Only pointers to the pool are
// handled, never its layout.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace audiodeploy {

int set_thread_count(int threads) {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool == nullptr) {
    throw RunnerError("ExecuTorch's thread pool could not be created");
  }
  if (threads > 0 && !pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads))) {
    throw RunnerError("ExecuTorch's thread pool refused " + std::to_string(threads) + " threads");
  }
  return static_cast<int>(pool->get_thread_count());
}

}  // namespace audiodeploy

#pragma once

namespace audiodeploy {

// Sizes ExecuTorch's shared thread pool (used by XNNPACK and the optimized
// kernels). Must run before a method is loaded: the XNNPACK delegate keeps
// the pool it was initialised with. 0 keeps the default. Returns the count.
int set_thread_count(int threads);

}  // namespace audiodeploy

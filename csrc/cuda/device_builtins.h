// The CUDA built-ins the kernel bodies (*_kernel.cuh) use. Under nvcc they are
// CUDA's own; with VLMRM_CUDA_EMULATION the kernels compile as host C++ and run
// on emulation/cuda_on_host.h, which is how the CPU tests execute them.
#pragma once

#ifdef VLMRM_CUDA_EMULATION
#include "emulation/cuda_on_host.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Dynamic shared memory of a block, as an array of `type`, 16-byte aligned.
#define VLMRM_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

// Host helpers of the kernel launchers: per-device values computed once, so
// that no launcher queries the driver on the hot path. Every launcher that
// needs such a value uses these (the GEMM's dispatch and mma.sync kernel,
// attention, both wgmma kernels); none keeps its own cache.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace qsp {
namespace kern {

// A per-device value computed once (device ordinals < 64), thread-safe: a
// racing first call computes it twice, which is harmless. fn() returns the
// value (>= 0) or a negative "don't know", which is not remembered.
struct PerDevice {
  std::atomic<int> v[64];
  PerDevice() {
    for (auto& x : v) x.store(-1, std::memory_order_relaxed);
  }
  template <class Fn>
  int get(int dev, Fn fn) {
    if (dev < 0 || dev >= 64) return fn();
    int x = v[dev].load(std::memory_order_acquire);
    if (x < 0) {
      x = fn();
      if (x >= 0) v[dev].store(x, std::memory_order_release);
    }
    return x;
  }
};

// Streaming multiprocessors of device `dev`; 0 when the driver cannot say
// (not remembered: the next call asks again).
inline int sm_count(int dev) {
  static PerDevice cache;
  return cache.get(dev, [dev] {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      return -1;
    }
    return n;
  });
}

// Compute capability major of device `dev`; -1 when the driver cannot say.
inline int cc_major(int dev) {
  static PerDevice cache;
  return cache.get(dev, [dev] {
    int m = 0;
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return m;
  });
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on device `dev`,
// once per device: `once` is the caller's cache for this kernel (a static
// next to its launch). A failure is returned (the attribute call's error)
// and not remembered.
template <class Kernel>
cudaError_t set_smem_once(PerDevice& once, int dev, Kernel kernel, int bytes) {
  cudaError_t e = cudaSuccess;
  once.get(dev, [&] {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    return e == cudaSuccess ? 1 : -1;
  });
  return e;
}

// The launch configuration of a grid whose blocks along z form one
// (1, 1, grid.z) thread-block cluster (the GEMMs' split-K): for
// cudaLaunchKernelEx and cudaOccupancyMaxActiveClusters; `pdl` adds the
// programmatic-dependent-launch attribute (kernels/pdl.h). Not copyable (cfg
// points at attr).
struct ClusterZLaunch {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg;
  ClusterZLaunch(dim3 grid, int threads, size_t smem, cudaStream_t stream, bool pdl = false) : attr{}, cfg{} {
    cfg.gridDim = grid;
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = grid.z;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
  }
  ClusterZLaunch(const ClusterZLaunch&) = delete;
  ClusterZLaunch& operator=(const ClusterZLaunch&) = delete;
};

}  // namespace kern
}  // namespace qsp

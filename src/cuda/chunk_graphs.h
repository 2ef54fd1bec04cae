// A context's CUDA graphs, one per repeated shape of work (src/cuda/cuda_pass.cu
// and cuda_batch.cu use them): chunks of one context (ChunkGraphs) and batched passes
// over several (BatchGraphs). No launch's grid depends on the position (the
// kernels read it from device memory, copied in from pinned host memory by
// the graph's first node), so a shape captured once replays at every
// position. A shape is captured at its second use (seen once is not worth a
// capture: capture and instantiation cost about as much as a run), or at its
// first where the key says so (the decode step), up to kMaxGraphs shapes, the
// least recently used dropped first. A batch shape captured twice (dropped
// and wanted again: more shapes in turn than the cache holds) runs eagerly
// from then on (Key::kMaxCaptures): a capture costs milliseconds, and a
// cycle of one shape more than the cache holds would otherwise capture at
// every use (2026-12-05: a benchmark's 9 batch shapes in turn through 8
// graphs did). A context's own chunk shapes have no such limit (its decode
// step must keep its graph). A graph bakes in the weights' device pointers:
// every graph is dropped when the context's weights change.
//
// A context on several devices records a chunk on a stream per device (its
// ranks), the NCCL all-reduces among them: all the streams are captured at
// once, each into its own graph (as nccl-tests captures one thread's GPUs),
// and a chunk launches each graph on its stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/cuda_util.h"

namespace qsp {
namespace cuda_impl {

// Key: equality comparable, `bool eager_capture() const` (capture at the
// first use) and `static constexpr uint32_t kMaxCaptures` (captures of one
// shape before it runs eagerly for good).
template <class Key>
class GraphCache {
 public:
  static constexpr size_t kMaxGraphs = 8, kMaxSeen = 16;

  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { drop(); }

  // The graphs to launch for work of shape k with these weights (their
  // tensors' identities), one per stream, capturing them now if this is the
  // shape's time; nullptr: run eagerly. enqueue() records the chunk on the
  // streams (under capture here), streams[i] on devices[i]. A capture the
  // driver will not instantiate turns graphs off for good rather than fail
  // the caller's prefill; an exception from enqueue() ends the capture and
  // propagates.
  template <class Enqueue>
  const std::vector<cudaGraphExec_t>* get(const Key& k, const std::vector<const void*>& weights,
                                          const std::vector<cudaStream_t>& streams, const std::vector<int>& devices,
                                          Enqueue&& enqueue) {
    if (!enabled_) return nullptr;
    if (!graphs_.empty() && weights != weights_) drop();
    Graph* g = find(k);
    if (!g) {
      Seen* s = seen(k);
      if (!s) s = remember(k);
      if ((k.eager_capture() || s->uses++ > 0) && s->captures < Key::kMaxCaptures) {
        g = capture(k, weights, streams, devices, enqueue);
        if (g) ++seen(k)->captures;
      }
      if (!g) return nullptr;
    }
    g->last_use = ++clock_;
    return &g->exec;
  }

  // Every graph gone (new weights): the shapes may be captured afresh.
  void drop() noexcept {
    for (Graph& g : graphs_) destroy(g.exec);
    graphs_.clear();
    weights_.clear();
    for (Seen& s : seen_) s.captures = 0;
  }
  // Graphs off for good (a capture that failed where eager work succeeds).
  void disable() noexcept {
    drop();
    enabled_ = false;
  }

 private:
  struct Graph {
    Key key;
    std::vector<cudaGraphExec_t> exec;  // one per stream
    uint64_t last_use;
  };

  static void destroy(std::vector<cudaGraphExec_t>& exec) noexcept {
    for (cudaGraphExec_t e : exec)
      if (e) cudaGraphExecDestroy(e);
    exec.clear();
  }

  // A shape run or captured before: how often it ran without a graph, and
  // how often it was captured.
  struct Seen {
    Key key;
    uint32_t uses, captures;
  };

  Graph* find(const Key& k) {
    for (Graph& g : graphs_)
      if (g.key == k) return &g;
    return nullptr;
  }
  Seen* seen(const Key& k) {
    for (Seen& s : seen_)
      if (s.key == k) return &s;
    return nullptr;
  }
  Seen* remember(const Key& k) {
    if (seen_.size() == kMaxSeen) seen_.erase(seen_.begin());
    seen_.push_back(Seen{k, 0, 0});
    return &seen_.back();
  }

  template <class Enqueue>
  Graph* capture(const Key& k, const std::vector<const void*>& weights, const std::vector<cudaStream_t>& streams,
                 const std::vector<int>& devices, Enqueue& enqueue) {
    const size_t n = streams.size();
    std::vector<cudaGraph_t> graph(n, nullptr);
    // Ends every capture begun (graphs included only when all succeeded).
    const auto end_all = [&](size_t begun) {
      cudaError_t first = cudaSuccess;
      for (size_t i = 0; i < begun; ++i) {
        if (n > 1) cudaSetDevice(devices[i]);
        const cudaError_t e = cudaStreamEndCapture(streams[i], &graph[i]);
        if (e != cudaSuccess && first == cudaSuccess) first = e;
      }
      if (n > 1) cudaSetDevice(devices[0]);
      return first;
    };
    const auto free_graphs = [&] {
      for (cudaGraph_t& g : graph)
        if (g) cudaGraphDestroy(g), g = nullptr;
    };
    for (size_t i = 0; i < n; ++i) {
      if (n > 1) cudaSetDevice(devices[i]);
      const cudaError_t e = cudaStreamBeginCapture(streams[i], cudaStreamCaptureModeThreadLocal);
      if (e != cudaSuccess) {
        end_all(i);
        free_graphs();
        throw_cuda(e, "cudaStreamBeginCapture");
      }
    }
    if (n > 1) cudaSetDevice(devices[0]);
    try {
      enqueue();
    } catch (...) {
      end_all(n);
      free_graphs();
      cudaGetLastError();
      throw;
    }
    const cudaError_t ended = end_all(n);
    if (ended != cudaSuccess) {
      free_graphs();
      throw_cuda(ended, "cudaStreamEndCapture");
    }
    std::vector<cudaGraphExec_t> exec(n, nullptr);
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < n && e == cudaSuccess; ++i) {
      if (n > 1) cudaSetDevice(devices[i]);
      e = cudaGraphInstantiate(&exec[i], graph[i], 0);
    }
    if (n > 1) cudaSetDevice(devices[0]);
    free_graphs();
    if (e != cudaSuccess) {
      cudaGetLastError();
      destroy(exec);
      drop();
      enabled_ = false;
      return nullptr;
    }
    if (graphs_.size() == kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const Graph& a, const Graph& b) { return a.last_use < b.last_use; });
      destroy(lru->exec);
      graphs_.erase(lru);
    }
    if (graphs_.empty()) weights_ = weights;
    graphs_.push_back(Graph{k, std::move(exec), 0});
    return &graphs_.back();
  }

  bool enabled_ = true;
  std::vector<Graph> graphs_;        // at most kMaxGraphs
  std::vector<Seen> seen_;           // shapes run or captured before (at most kMaxSeen, oldest dropped first)
  uint64_t clock_ = 0;               // last_use stamps
  std::vector<const void*> weights_;  // the tensors every graph in graphs_ bakes in
};

// A chunk of one context: its token count, whether it ends with the LM
// head, and whether it is a decode step on a short cache (its attention may
// be another kernel: CudaBackend::short_cache_bound). The decode step (one
// token) is captured at its first use.
struct ChunkKey {
  uint32_t n;
  bool logits;
  bool short_cache;
  bool operator==(const ChunkKey& o) const { return n == o.n && logits == o.logits && short_cache == o.short_cache; }
  bool eager_capture() const { return n == 1; }
  static constexpr uint32_t kMaxCaptures = UINT32_MAX;
};
using ChunkGraphs = GraphCache<ChunkKey>;

// A batched pass (CudaBackend::prefill_batch): everything its launches and
// copies depend on besides the contents of the metadata it copies in: the
// counts that size grids and place the metadata, the batch workspaces'
// buffers, and, for contexts on several devices, where the logits rows go
// (in order; on one device their destinations are metadata, so one graph
// serves any contexts of its shape).
struct BatchKey {
  std::vector<int64_t> shape;        // tokens, pieces, attention tiles, logits rows, ...
  std::vector<const void*> buffers;  // the workspaces' and the logits receivers'
  bool operator==(const BatchKey& o) const { return shape == o.shape && buffers == o.buffers; }
  bool eager_capture() const { return false; }
  static constexpr uint32_t kMaxCaptures = 2;
};
using BatchGraphs = GraphCache<BatchKey>;

}  // namespace cuda_impl
}  // namespace qsp

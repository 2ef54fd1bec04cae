// A context's CUDA graphs, one per repeated chunk shape (src/cuda/cuda_backend.cu
// is the one user). No launch's grid depends on the position (the kernels read
// it from a device int), so a chunk of n tokens captured once replays at every
// position. The decode step (one token) is captured at its first use, other
// shapes at their second (a shape seen once is not worth a capture: capture
// and instantiation cost about as much as a run), up to kMaxGraphs shapes,
// the least recently used dropped first. A graph bakes in the weights' device
// pointers: every graph is dropped when the context's weights change.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/cuda_util.h"

namespace qsp {
namespace {

class ChunkGraphs {
 public:
  struct Key {
    uint32_t n;   // tokens
    bool logits;  // the chunk ends with the LM head
    bool operator==(const Key& o) const { return n == o.n && logits == o.logits; }
  };
  static constexpr size_t kMaxGraphs = 8, kMaxSeen = 16;

  ChunkGraphs() = default;
  ChunkGraphs(const ChunkGraphs&) = delete;
  ChunkGraphs& operator=(const ChunkGraphs&) = delete;
  ~ChunkGraphs() { drop(); }

  // The graph to launch for chunk shape k with these weights (their tensors'
  // identities), capturing it now if this is the shape's time; nullptr: run
  // eagerly. enqueue() records the chunk on `stream` (under capture here).
  // A capture the driver will not instantiate turns graphs off for good
  // rather than fail the caller's prefill; an exception from enqueue() ends
  // the capture and propagates.
  template <class Enqueue>
  cudaGraphExec_t get(const Key& k, const std::vector<const void*>& weights, cudaStream_t stream,
                      Enqueue&& enqueue) {
    if (!enabled_) return nullptr;
    if (!graphs_.empty() && weights != weights_) drop();
    Graph* g = find(k);
    if (!g && (k.n == 1 || seen(k))) g = capture(k, weights, stream, enqueue);
    if (!g) {
      remember(k);
      return nullptr;
    }
    g->last_use = ++clock_;
    return g->exec;
  }

  void drop() noexcept {
    for (Graph& g : graphs_) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
    weights_.clear();
  }

 private:
  struct Graph {
    Key key;
    cudaGraphExec_t exec;
    uint64_t last_use;
  };

  Graph* find(const Key& k) {
    for (Graph& g : graphs_)
      if (g.key == k) return &g;
    return nullptr;
  }
  bool seen(const Key& k) const { return std::find(seen_.begin(), seen_.end(), k) != seen_.end(); }
  void remember(const Key& k) {
    if (seen(k)) return;
    if (seen_.size() == kMaxSeen) seen_.erase(seen_.begin());
    seen_.push_back(k);
  }

  template <class Enqueue>
  Graph* capture(const Key& k, const std::vector<const void*>& weights, cudaStream_t stream, Enqueue& enqueue) {
    cudaGraph_t graph = nullptr;
    QSP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    QSP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      cudaGetLastError();
      drop();
      enabled_ = false;
      return nullptr;
    }
    if (graphs_.size() == kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const Graph& a, const Graph& b) { return a.last_use < b.last_use; });
      cudaGraphExecDestroy(lru->exec);
      graphs_.erase(lru);
    }
    if (graphs_.empty()) weights_ = weights;
    graphs_.push_back(Graph{k, exec, 0});
    return &graphs_.back();
  }

  bool enabled_ = true;
  std::vector<Graph> graphs_;        // at most kMaxGraphs
  std::vector<Key> seen_;            // shapes run once, eagerly (at most kMaxSeen)
  uint64_t clock_ = 0;               // last_use stamps
  std::vector<const void*> weights_;  // the tensors every graph in graphs_ bakes in
};

}  // namespace
}  // namespace qsp

#pragma once
// Nearest neighbours by inner product among unit vectors (so by cosine), labelled by entry id.
// Small sets are scanned exactly; from `flat_limit` entries on, an hnswlib graph answers
// instead (approximate, logarithmic). Removal marks the graph entry deleted; once deleted
// entries outnumber live ones the graph is rebuilt from the live vectors. Not thread-safe: the
// owner serialises calls.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hnswlib {
template <typename T>
class HierarchicalNSW;
class InnerProductSpace;
}  // namespace hnswlib

namespace troupe::cache {

struct index_options {
  int dimension = 384;
  size_t flat_limit = 256;     // up to this many entries: exact scan
  int hnsw_m = 16;             // graph degree
  int ef_construction = 100;   // build effort: higher is slower to (re)build, with a little more recall
  int ef_search = 128;         // candidates kept while searching (recall vs speed)
};

struct neighbour {
  uint64_t label = 0;
  float similarity = 0;        // inner product
};

class vector_index {
 public:
  explicit vector_index(index_options o);
  ~vector_index();
  vector_index(vector_index&&) noexcept;
  vector_index& operator=(vector_index&&) noexcept;

  // Adds v (dimension floats) under label; a label already present is replaced.
  void add(uint64_t label, const float* v);
  void remove(uint64_t label);
  bool contains(uint64_t label) const { return live_.count(label) != 0; }
  // Up to k entries, most similar first.
  std::vector<neighbour> search(const float* q, size_t k) const;

  size_t size() const { return live_.size(); }
  bool uses_graph() const { return graph_ != nullptr; }

 private:
  void build_graph();

  index_options o_;
  // label -> row in flat_ (flat mode) or 0 (graph mode)
  std::unordered_map<uint64_t, size_t> live_;
  // Flat mode: vectors and their labels, row by row.
  std::vector<float> flat_;
  std::vector<uint64_t> flat_labels_;
  // Graph mode.
  std::unique_ptr<hnswlib::InnerProductSpace> space_;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph_;
  size_t deleted_ = 0;
};

}  // namespace troupe::cache

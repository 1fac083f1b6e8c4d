#include "cache/semantic/vector_index.hpp"

#include <algorithm>

// hnswlib 0.6's SSE prefetches read one link past the end of a neighbour list (harmless in
// practice, a heap overflow to AddressSanitizer); sanitizer builds use its plain C++ path.
#if defined(__SANITIZE_ADDRESS__)
#define NO_MANUAL_VECTORIZATION
#endif
#include <hnswlib/hnswlib.h>

#include "cache/embed/embedder.hpp"

namespace troupe::cache {

vector_index::vector_index(index_options o) : o_(o) {}
vector_index::~vector_index() = default;
vector_index::vector_index(vector_index&&) noexcept = default;
vector_index& vector_index::operator=(vector_index&&) noexcept = default;

void vector_index::add(uint64_t label, const float* v) {
  const size_t dim = static_cast<size_t>(o_.dimension);
  if (graph_) {
    // hnswlib updates a known label in place, and un-deletes it if it was marked deleted.
    const bool known = graph_->label_lookup_.count(label) != 0;
    if (known && !live_.count(label)) --deleted_;
    if (!known && graph_->cur_element_count >= graph_->max_elements_) graph_->resizeIndex(graph_->max_elements_ * 2);
    graph_->addPoint(v, label);
    live_[label] = 0;
    return;
  }
  if (auto it = live_.find(label); it != live_.end()) {
    std::copy(v, v + dim, flat_.begin() + static_cast<std::ptrdiff_t>(it->second * dim));
    return;
  }
  live_[label] = flat_labels_.size();
  flat_labels_.push_back(label);
  flat_.insert(flat_.end(), v, v + dim);
  if (live_.size() > o_.flat_limit) build_graph();
}

void vector_index::remove(uint64_t label) {
  auto it = live_.find(label);
  if (it == live_.end()) return;
  const size_t dim = static_cast<size_t>(o_.dimension);
  if (graph_) {
    graph_->markDelete(label);
    live_.erase(it);
    ++deleted_;
    if (deleted_ > 1024 && deleted_ > live_.size()) build_graph();
    return;
  }
  // Flat: move the last row into the hole.
  const size_t row = it->second, last = flat_labels_.size() - 1;
  live_.erase(it);
  if (row != last) {
    std::copy(flat_.begin() + static_cast<std::ptrdiff_t>(last * dim), flat_.begin() + static_cast<std::ptrdiff_t>((last + 1) * dim),
              flat_.begin() + static_cast<std::ptrdiff_t>(row * dim));
    flat_labels_[row] = flat_labels_[last];
    live_[flat_labels_[row]] = row;
  }
  flat_labels_.pop_back();
  flat_.resize(last * dim);
}

void vector_index::build_graph() {
  const size_t dim = static_cast<size_t>(o_.dimension);
  // Gather the live vectors from wherever they are now.
  std::vector<uint64_t> labels;
  std::vector<float> vecs;
  labels.reserve(live_.size());
  vecs.reserve(live_.size() * dim);
  if (graph_) {
    for (const auto& [label, _] : live_) {
      auto v = graph_->getDataByLabel<float>(label);
      labels.push_back(label);
      vecs.insert(vecs.end(), v.begin(), v.end());
    }
  } else {
    labels = flat_labels_;
    vecs = flat_;
  }
  auto space = std::make_unique<hnswlib::InnerProductSpace>(dim);
  auto graph = std::make_unique<hnswlib::HierarchicalNSW<float>>(
      space.get(), std::max<size_t>(2 * labels.size(), 1024), static_cast<size_t>(o_.hnsw_m),
      static_cast<size_t>(o_.ef_construction));
  graph->setEf(static_cast<size_t>(o_.ef_search));
  for (size_t i = 0; i < labels.size(); ++i) graph->addPoint(vecs.data() + i * dim, labels[i]);
  graph_ = std::move(graph);
  space_ = std::move(space);
  deleted_ = 0;
  flat_.clear();
  flat_.shrink_to_fit();
  flat_labels_.clear();
  flat_labels_.shrink_to_fit();
  for (auto& [label, row] : live_) row = 0;
}

std::vector<neighbour> vector_index::search(const float* q, size_t k) const {
  std::vector<neighbour> out;
  if (k == 0 || live_.empty()) return out;
  if (graph_) {
    auto pq = graph_->searchKnn(q, std::min(k, live_.size()));
    while (!pq.empty()) {
      out.push_back({pq.top().second, 1.0f - pq.top().first});  // hnswlib's distance is 1 - <a, b>
      pq.pop();
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  const int dim = o_.dimension;
  out.reserve(flat_labels_.size());
  for (size_t r = 0; r < flat_labels_.size(); ++r)
    out.push_back({flat_labels_[r], dot(q, flat_.data() + r * static_cast<size_t>(dim), dim)});
  const size_t n = std::min(k, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(),
                    [](const neighbour& a, const neighbour& b) { return a.similarity > b.similarity; });
  out.resize(n);
  return out;
}

}  // namespace troupe::cache

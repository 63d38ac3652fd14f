// A view of contiguous elements the caller owns (C++17 has no std::span).
#pragma once

#include <cstddef>
#include <vector>

namespace tlc {

template <class T> class Span {
public:
  Span() = default;
  Span(T *data, size_t size) : data_(data), size_(size) {}
  template <class U, class Allocator>
  Span(std::vector<U, Allocator> &vector) : data_(vector.data()), size_(vector.size()) {}
  template <class U, class Allocator>
  Span(const std::vector<U, Allocator> &vector) : data_(vector.data()), size_(vector.size()) {}

  T *data() const { return data_; }
  size_t size() const { return size_; }
  T *begin() const { return data_; }
  T *end() const { return data_ + size_; }
  T &operator[](size_t i) const { return data_[i]; }

private:
  T *data_ = nullptr;
  size_t size_ = 0;
};

} // namespace tlc

// ColumnBuffer<T>: one array of an ExampleBatch column (values, value_offsets or row_splits).
//
// It either owns heap memory and grows it (like std::vector), or views caller memory of fixed
// capacity (a region of a shared-memory batch slot), which it never writes past: growing an
// external buffer beyond its capacity fails (returns false) and leaves it unchanged, so the
// parser can report "no room" as a parse error of that record. Growth never zero-fills: new
// elements are uninitialized until written (the parser writes each one exactly once).
//
// T must be trivially copyable (uint8_t, int64_t). Sizes and capacities count elements.
// Owned memory comes from malloc/realloc (growth by doubling); an allocation failure throws
// std::bad_alloc, as std::vector would. Thread-safety: none; one writer at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace ringfeed {

template <typename T>
class ColumnBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "ColumnBuffer holds raw column elements");

 public:
  // Owned and empty.
  ColumnBuffer() = default;
  // Views `memory` (size 0, capacity memory.size()); the memory must outlive the buffer.
  static ColumnBuffer External(std::span<T> memory) {
    ColumnBuffer b;
    b.data_ = memory.data();
    b.capacity_ = memory.size();
    b.owned_ = false;
    return b;
  }

  ColumnBuffer(ColumnBuffer&& other) noexcept { Steal(other); }
  ColumnBuffer& operator=(ColumnBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      Steal(other);
    }
    return *this;
  }
  // Not copyable: a copy of a slot's column could not say whose memory it is.
  ColumnBuffer(const ColumnBuffer&) = delete;
  ColumnBuffer& operator=(const ColumnBuffer&) = delete;
  ~ColumnBuffer() { Free(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  // False for a view of caller memory (a batch slot region).
  bool owns_memory() const { return owned_; }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("ColumnBuffer::at: index out of range");
    return data_[i];
  }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::span<const T> span() const { return {data_, size_}; }

  // Makes room for `n` elements in all; false (buffer unchanged) when external and too small.
  [[nodiscard]] bool reserve(size_t n) { return n <= capacity_ || Grow(n); }
  // Sets the size to `n`; new elements are uninitialized. False (unchanged) when there is no room.
  [[nodiscard, gnu::always_inline]] bool resize(size_t n) {
    if (n > capacity_ && !Grow(n)) [[unlikely]] return false;
    size_ = n;
    return true;
  }
  // Appends `n` elements copied from `src`. False (unchanged) when there is no room. Always
  // inlined (as resize and push_back), so that a constant `n` (a scalar) becomes one store
  // instead of a memcpy call.
  [[nodiscard, gnu::always_inline]] bool append(const T* src, size_t n) {
    if (n > capacity_ - size_ && !Grow(size_ + n)) [[unlikely]] return false;
    if (n != 0) std::memcpy(data_ + size_, src, n * sizeof(T));
    size_ += n;
    return true;
  }
  [[nodiscard, gnu::always_inline]] bool push_back(T value) {
    if (size_ == capacity_ && !Grow(size_ + 1)) [[unlikely]] return false;
    data_[size_++] = value;
    return true;
  }
  // push_back after a successful reserve() made room for it.
  void push_back_reserved(T value) { data_[size_++] = value; }
  // Shrinks to `n` elements; never grows (a larger `n` leaves the size as it is).
  void truncate(size_t n) { size_ = n < size_ ? n : size_; }

  // For tests: element-wise comparison with a vector.
  friend bool operator==(const ColumnBuffer& a, const std::vector<T>& b) {
    return a.size_ == b.size() && (a.size_ == 0 || std::memcmp(a.data_, b.data(), a.size_ * sizeof(T)) == 0);
  }

 private:
  // Out of line: the hot paths only compare against the capacity.
  [[gnu::noinline]] bool Grow(size_t n) {
    if (!owned_) return false;
    size_t cap = capacity_ < 8 ? 8 : capacity_ * 2;
    if (cap < n) cap = n;
    if (cap > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* p = std::realloc(data_, cap * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    capacity_ = cap;
    return true;
  }
  void Free() {
    if (owned_) std::free(data_);
  }
  void Steal(ColumnBuffer& other) {
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    owned_ = other.owned_;
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
    other.owned_ = true;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  bool owned_ = true;
};

}  // namespace ringfeed

// Tensor views: shape, strides (in elements), dtype and device over shared storage. Storage is
// owned host memory, a memory-mapped file, or device memory owned by a backend.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace kiln {

enum class DeviceKind : uint8_t { kHost, kCuda, kVulkan };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

// Bytes that a tensor views. Subclasses decide who frees them.
class Storage {
 public:
  virtual ~Storage() = default;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 protected:
  Storage(void* data, size_t bytes, Device device) : data_(data), bytes_(bytes), device_(device) {}
  void* data_;
  size_t bytes_;
  Device device_;
};

// Host memory aligned to 64 bytes (a cache line; an AVX-512 vector), zero-initialised.
std::shared_ptr<Storage> allocate_host(size_t bytes);

constexpr int kMaxRank = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // "[2, 3]"
  static Shape of(const int64_t* dims, int rank);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, size_t offset_bytes = 0);

  static Tensor empty(Shape shape, DType dtype);  // owned, zeroed, contiguous host tensor
  // An owned host copy of `values` (f32 or i32) with the given shape.
  template <typename T>
  static Tensor from_values(const std::vector<T>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.rank() : i]; }
  int rank() const { return shape_.rank(); }
  int64_t numel() const { return shape_.numel(); }
  int64_t stride(int i) const { return strides_[i < 0 ? i + shape_.rank() : i]; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset_bytes() const { return offset_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T> T* data() const { return static_cast<T*>(raw()); }

  // Views sharing this tensor's storage.
  Tensor reshape(Shape shape) const;           // requires a contiguous tensor
  Tensor slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along dim
  Tensor select(int dim, int64_t index) const;  // drops dim
  Tensor with_strides(Shape shape, std::array<int64_t, kMaxRank> strides) const;
  // A view of the same storage starting `elem_offset` elements after this view's start.
  Tensor as_strided(Shape shape, std::array<int64_t, kMaxRank> strides, int64_t elem_offset = 0) const;

  std::string describe() const;  // "bf16[2560, 9216]"

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::array<int64_t, kMaxRank> strides_{};
  size_t offset_ = 0;
};

template <typename T>
Tensor Tensor::from_values(const std::vector<T>& values, Shape shape) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, int32_t>, "f32 or i32 values");
  Tensor t = empty(shape, std::is_same_v<T, float> ? DType::kF32 : DType::kI32);
  std::copy(values.begin(), values.begin() + std::min<size_t>(values.size(), static_cast<size_t>(shape.numel())),
            t.data<T>());
  return t;
}

}  // namespace kiln

#include "core/tensor.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace kiln {

std::string Device::to_string() const {
  switch (kind) {
    case DeviceKind::kHost: return "host";
    case DeviceKind::kCuda: return "cuda:" + std::to_string(index);
    case DeviceKind::kVulkan: return "vulkan:" + std::to_string(index);
  }
  return "?";
}

namespace {
class HostStorage final : public Storage {
 public:
  explicit HostStorage(size_t bytes)
      : Storage(nullptr, bytes, Device{}) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, rounded == 0 ? 64 : rounded);
  }
  ~HostStorage() override { std::free(data_); }
};
}  // namespace

std::shared_ptr<Storage> allocate_host(size_t bytes) { return std::make_shared<HostStorage>(bytes); }

Shape::Shape(std::initializer_list<int64_t> dims) {
  assert(dims.size() <= kMaxRank);
  for (int64_t d : dims) dims_[rank_++] = d;
}

Shape Shape::of(const int64_t* dims, int rank) {
  Shape s;
  assert(rank <= kMaxRank);
  for (int i = 0; i < rank; ++i) s.dims_[i] = dims[i];
  s.rank_ = rank;
  return s;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::ostringstream s;
  s << '[';
  for (int i = 0; i < rank_; ++i) s << (i ? ", " : "") << dims_[i];
  s << ']';
  return s.str();
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, size_t offset_bytes)
    : storage_(std::move(storage)), dtype_(dtype), shape_(shape), offset_(offset_bytes) {
  int64_t s = 1;
  for (int i = shape_.rank() - 1; i >= 0; --i) {
    strides_[i] = s;
    s *= shape_[i];
  }
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  return Tensor(allocate_host(static_cast<size_t>(shape.numel()) * dtype_size(dtype)), dtype, shape);
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = shape_.rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(Shape shape) const {
  assert(is_contiguous() && shape.numel() == numel());
  return Tensor(storage_, dtype_, shape, offset_);
}

Tensor Tensor::slice(int dim, int64_t begin, int64_t end) const {
  if (dim < 0) dim += rank();
  assert(0 <= begin && begin <= end && end <= shape_[dim]);
  Tensor t = *this;
  t.shape_[dim] = end - begin;
  t.offset_ += static_cast<size_t>(begin * strides_[dim]) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  if (dim < 0) dim += rank();
  Tensor t = slice(dim, index, index + 1);
  int64_t dims[kMaxRank];
  int r = 0;
  for (int i = 0; i < rank(); ++i) {
    if (i == dim) continue;
    t.strides_[r] = strides_[i];
    dims[r++] = shape_[i];
  }
  t.shape_ = Shape::of(dims, r);
  return t;
}

Tensor Tensor::with_strides(Shape shape, std::array<int64_t, kMaxRank> strides) const {
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

Tensor Tensor::as_strided(Shape shape, std::array<int64_t, kMaxRank> strides, int64_t elem_offset) const {
  Tensor t = with_strides(shape, strides);
  t.offset_ += static_cast<size_t>(elem_offset) * dtype_size(dtype_);
  return t;
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_.to_string(); }

}  // namespace kiln

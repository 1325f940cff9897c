#pragma once
// A device allocation that frees itself.
#include <cstddef>
#include <utility>

#include "device/device.hpp"

namespace ft {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(Device& dev, std::size_t bytes) {
    DeviceBuffer b;
    b.dev_ = &dev;
    b.bytes_ = bytes;
    b.ptr_ = FT_TRY(dev.alloc(bytes == 0 ? 16 : bytes));
    return b;
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : dev_(std::exchange(o.dev_, nullptr)), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = std::exchange(o.dev_, nullptr);
      ptr_ = std::exchange(o.ptr_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != 0; }

 private:
  void reset() {
    if (dev_ && ptr_) (void)dev_->free(ptr_);
    ptr_ = 0;
  }
  Device* dev_ = nullptr;
  DevicePtr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace ft

#include <disco/error.h>
#include <disco/tensor.h>
#include <gtest/gtest.h>

#include <cstring>

#include "core/device_memory.h"

namespace disco {
namespace {

TEST(TensorTest, EmptyAndMetadata) {
  Tensor t = Tensor::Empty(Shape{2, 3}, DataType("float32"));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.device(), CPU());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % memory::kHostAlignment, 0u);
  EXPECT_EQ(t.ToString(), "Tensor(shape=(2, 3), dtype=float32, device=cpu)");
  Tensor z = Tensor::Empty(Shape{0, 4}, DataType("int8"));
  EXPECT_EQ(z.nbytes(), 0u);
  EXPECT_THROW(Tensor::Empty(Shape{-1}, DataType("int8")), ValueError);
  EXPECT_THROW(Tensor().shape(), ValueError);
}

TEST(TensorTest, DLPackRoundTripKeepsBufferAlive) {
  DLManagedTensor* managed;
  void* data;
  {
    Tensor t = Tensor::Empty(Shape{4}, DataType("int32"));
    for (int i = 0; i < 4; ++i) t.data_as<int32_t>()[i] = i * 10;
    data = t.data();
    managed = t.ToDLPack();
  }
  EXPECT_EQ(managed->dl_tensor.data, data);
  Tensor back = Tensor::FromDLPack(managed);
  EXPECT_EQ(back.data_as<int32_t>()[3], 30);
  EXPECT_EQ(back.shape(), Shape{4});
}

TEST(TensorTest, FromDLPackChecksStridesAndCallsDeleterOnce) {
  static int deleted = 0;
  static int64_t shape[2] = {2, 3};
  static int64_t bad_strides[2] = {1, 2};
  static float storage[6];
  auto* m = new DLManagedTensor();
  m->dl_tensor.data = storage;
  m->dl_tensor.device = CPU();
  m->dl_tensor.ndim = 2;
  m->dl_tensor.dtype = DataType("float32");
  m->dl_tensor.shape = shape;
  m->dl_tensor.strides = bad_strides;
  m->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  EXPECT_THROW(Tensor::FromDLPack(m), ValueError);
  EXPECT_EQ(deleted, 0) << "a refused tensor stays the caller's";
  static int64_t good_strides[2] = {3, 1};
  m->dl_tensor.strides = good_strides;
  { Tensor t = Tensor::FromDLPack(m); }
  EXPECT_EQ(deleted, 1);
}

TEST(TensorTest, CopyFromChecksShapeAndDtype) {
  Tensor a = Tensor::Empty(Shape{3}, DataType("float64"));
  Tensor b = Tensor::Empty(Shape{3}, DataType("float64"));
  for (int i = 0; i < 3; ++i) a.data_as<double>()[i] = i + 0.5;
  b.CopyFrom(a);
  EXPECT_EQ(b.data_as<double>()[2], 2.5);
  EXPECT_THROW(b.CopyFrom(Tensor::Empty(Shape{4}, DataType("float64"))), ValueError);
  EXPECT_THROW(b.CopyFrom(Tensor::Empty(Shape{3}, DataType("float32"))), ValueError);
}

TEST(TensorTest, CudaTensors) {
  if (memory::CudaDeviceCount() == 0)
    GTEST_SKIP() << "no CUDA device visible (or built without CUDA)";
  Tensor host = Tensor::Empty(Shape{1024}, DataType("float32"));
  for (int i = 0; i < 1024; ++i) host.data_as<float>()[i] = static_cast<float>(i);
  Tensor dev = Tensor::Empty(Shape{1024}, DataType("float32"), CUDA(0));
  dev.CopyFrom(host);
  Tensor back = Tensor::Empty(Shape{1024}, DataType("float32"));
  back.CopyFrom(dev);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0);
}

TEST(TensorTest, CudaWithoutDeviceIsAClearError) {
  if (memory::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible";
  try {
    Tensor::Empty(Shape{4}, DataType("float32"), CUDA(0));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace disco

#include "llama/shards.h"

#include <dlfcn.h>

#include <string>

#include "llama/model.h"

namespace llama {

using disco::Tensor;

RunDType ParseRunDType(const std::string& s) {
  DISCO_CHECK(s == "float32" || s == "bfloat16" || s == "int8", ValueError)
      << "dtype is float32, bfloat16 or int8, not '" << s << "'";
  return {s == "bfloat16" ? DType::kBF16 : DType::kF32, s == "int8"};
}
DLDataType ToDL(DType d) {
  return d == DType::kF32 ? disco::DataType("float32") : disco::DataType("bfloat16");
}
DType FromDL(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  return DType::kOther;
}

const cuda::Ops& CudaOps() {
  static const cuda::Ops* ops = [] {
    Dl_info self{};
    std::string beside;
    if (dladdr(reinterpret_cast<void*>(&WorkerFunctionNames), &self) != 0 &&
        self.dli_fname != nullptr) {
      std::string me = self.dli_fname;
      beside = me.substr(0, me.find_last_of('/') + 1) + "libdisco_llama_cuda.so";
    }
    std::string errors;
    for (const std::string& path : {beside, std::string("libdisco_llama_cuda.so")}) {
      if (path.empty()) continue;
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        const char* e = dlerror();
        errors += std::string(errors.empty() ? "" : "; ") + (e != nullptr ? e : path);
        continue;
      }
      using Entry = const cuda::Ops* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(h, "disco_llama_cuda_ops"));
      DISCO_CHECK(entry != nullptr && entry()->version == cuda::kVersion, RuntimeError)
          << path << " is not the CUDA module of this libdisco_llama (version "
          << (entry != nullptr ? entry()->version : -1) << ", this library's " << cuda::kVersion
          << "): rebuild and reinstall both";
      return entry();
    }
    DISCO_THROW(RuntimeError)
        << "a llama model on a GPU needs libdisco_llama_cuda.so (built with disco when CUDA, "
        << "cuBLAS and nvcc are found), which could not be loaded: " << errors;
  }();
  return *ops;
}

Tensor OnHost(const Tensor& t) {
  if (t.device().device_type == kDLCPU) return t;
  Tensor h = Tensor::Empty(t.shape(), t.dtype());
  h.CopyFrom(t);
  return h;
}
Tensor OnDevice(const Tensor& t, DLDevice device) {
  if (device.device_type == kDLCPU) return t;
  Tensor d = Tensor::Empty(t.shape(), t.dtype(), device);
  d.CopyFrom(t);
  return d;
}

}  // namespace llama

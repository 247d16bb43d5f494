// The values of disco._core: disco.Device, disco.Tensor, disco.DRef, disco.DPackedFunc (its call
// is in fastcall.cc) and disco.WorkerInfo.
#include <disco/disco.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "module.h"

namespace disco {
namespace python {
namespace {

void BindDevice(py::module_& m) {
  py::class_<DLDevice>(m, "Device", "A DLPack device: (device_type, device_id).")
      .def(py::init([](int type, int id) {
             return DLDevice{static_cast<DLDeviceType>(type), id};
           }),
           py::arg("device_type"), py::arg("device_id") = 0,
           "A device of DLPack type `device_type` (1 cpu, 2 cuda) and index `device_id` (-1 with "
           "cuda: each worker's own GPU).")
      .def_property_readonly(
          "device_type", [](const DLDevice& d) { return int(d.device_type); },
          "The DLPack device type: 1 cpu, 2 cuda.")
      .def_property_readonly(
          "device_id", [](const DLDevice& d) { return d.device_id; },
          "The device's index (-1: each worker's own GPU).")
      .def(
          "__eq__", [](const DLDevice& a, const DLDevice& b) { return a == b; }, py::arg("other"),
          "Whether both name the same device.")
      .def(
          "__hash__", [](const DLDevice& d) { return int(d.device_type) * 1000003 + d.device_id; },
          "A hash of (device_type, device_id).")
      .def("__repr__",
           [](const DLDevice& d) { return "disco.Device('" + DeviceToString(d) + "')"; })
      .def("__str__", [](const DLDevice& d) { return DeviceToString(d); });
}

// A DLPack capsule sharing `t`'s memory (Tensor.__dlpack__).
py::object TensorCapsule(const Tensor& t, py::object /*stream*/) {
  DLManagedTensor* managed = t.ToDLPack();
  PyObject* cap = PyCapsule_New(managed, "dltensor", [](PyObject* c) {
    if (!PyCapsule_IsValid(c, "dltensor")) return;  // consumed: renamed
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  });
  if (cap == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// Tensor.from_numpy: `obj`'s memory, its elements read as `dtype` (same size).
Tensor TensorFromNumpy(py::handle obj, py::object dtype) {
  Tensor t = ToTensorOrThrow(obj, "Tensor.from_numpy");
  if (dtype.is_none()) return t;
  DLDataType want = ToDataType(dtype);
  DISCO_CHECK(DataTypeBytes(want) == DataTypeBytes(t.dtype()), ValueError)
      << "Tensor.from_numpy: a " << DataTypeToString(t.dtype()) << " array cannot be "
      << "viewed as " << DataTypeToString(want) << " (element sizes differ)";
  DLManagedTensor* managed = t.ToDLPack();
  managed->dl_tensor.dtype = want;
  return Tensor::FromDLPack(managed);
}

constexpr const char* kTensorDoc = R"doc(A DLPack tensor of disco's runtime.

np.from_dlpack(t) shares its memory (host tensors). numpy has no bfloat16: t.numpy() of a
bfloat16 tensor is a uint16 view of its raw bits (the upper half of the float32 bit pattern);
Tensor.from_numpy(a, "bfloat16") makes a bfloat16 tensor of such bits, sharing a's memory.)doc";

void BindTensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", kTensorDoc)
      .def_property_readonly(
          "shape",
          [](const Tensor& t) {
            py::tuple out(t.ndim());
            for (int i = 0; i < t.ndim(); ++i) out[i] = t.shape()[i];
            return out;
          },
          "The extents, a tuple of ints.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return DataTypeToString(t.dtype()); },
          "The element type's name ('float32', 'bfloat16', ...).")
      .def_property_readonly("device", &Tensor::device, "Where the memory is, a disco.Device.")
      .def_property_readonly("ndim", &Tensor::ndim, "The number of dimensions.")
      .def_property_readonly("nbytes", &Tensor::nbytes, "The size of the data in bytes.")
      .def("__dlpack__", &TensorCapsule, py::arg("stream") = py::none(),
           "A DLPack capsule sharing this tensor's memory (the DLPack protocol; `stream` is "
           "ignored).")
      .def(
          "__dlpack_device__",
          [](const Tensor& t) {
            return py::make_tuple(int(t.device().device_type), t.device().device_id);
          },
          "(device_type, device_id) of the DLPack protocol.")
      .def("numpy", &TensorToNumpy, "A numpy array sharing this host tensor's memory.")
      .def_static(
          "from_dlpack", [](py::handle obj) { return ToTensorOrThrow(obj, "Tensor.from_dlpack"); },
          py::arg("obj"),
          "A Tensor sharing the memory of a numpy array or DLPack producer (a compact native copy "
          "of one that is read-only, not contiguous or in the other byte order).")
      .def_static("from_numpy", &TensorFromNumpy, py::arg("array"), py::arg("dtype") = py::none(),
                  "A Tensor sharing a numpy array's memory (or a compact native copy, as "
                  "from_dlpack), its elements read as `dtype` (same size).")
      .def_static(
          "empty",
          [](py::object shape, py::object dtype, py::object device) {
            return Tensor::Empty(ToShape(shape), ToDataType(dtype), ToDevice(device));
          },
          py::arg("shape"), py::arg("dtype"), py::arg("device") = py::none(),
          "A new uninitialised tensor in this process (device None: the host).")
      .def("__repr__", [](const Tensor& t) { return "disco." + t.ToString(); });
}

void BindRefs(py::module_& m) {
  py::class_<PyDRef>(m, "DRef", "A register on every worker of a session.")
      .def_property_readonly(
          "reg_id", [](const PyDRef& r) { return r.ref.reg_id(); },
          "The register's id (the same on every worker).")
      .def(
          "debug_get_from_remote",
          [](const PyDRef& r, int worker) {
            CallScope call(r.state.get());
            Any v = Released([&] { return r.ref.DebugGetFromRemote(worker); });
            return FromAny(v);
          },
          py::arg("worker_id"), "The register's value on `worker_id` (tensors as numpy copies).")
      .def(
          "debug_copy_from",
          [](const PyDRef& r, int worker, py::handle value) {
            CallScope call(r.state.get());
            Any v = ToAny(value);
            Released([&] { r.ref.DebugCopyFrom(worker, v); });
          },
          py::arg("worker_id"), py::arg("value"),
          "Stores `value` into the register on `worker_id` (a tensor is copied into the "
          "register's tensor).")
      .def("__repr__", [](const PyDRef& r) {
        return "disco.DRef(reg=" + std::to_string(r.ref.reg_id()) + ")";
      });

  py::class_<PyFunc, PyDRef> func(m, "DPackedFunc",
                                  "A DRef holding a function; calling it is "
                                  "session.call_packed(self, *args).");
  func.def_property_readonly(
          "name", [](const PyFunc& f) { return f.name; },
          "The global function's name, as given to get_global_func.")
      .def("__repr__", [](const PyFunc& f) {
        return "disco.DPackedFunc(" + std::string(py::repr(py::str(f.name))) +
               ", reg=" + std::to_string(f.ref.reg_id()) + ")";
      });
  InstallFuncCall(func);
}

void BindWorkerInfo(py::module_& m) {
  py::class_<WorkerInfo>(m, "WorkerInfo", "Where a worker function runs.")
      .def_readonly("worker_id", &WorkerInfo::worker_id, "This worker's id (its MPI rank).")
      .def_readonly("num_workers", &WorkerInfo::num_workers, "Number of workers in the job.")
      .def_readonly("num_groups", &WorkerInfo::num_groups, "Number of worker groups.")
      .def_readonly("group_id", &WorkerInfo::group_id, "This worker's group.")
      .def_readonly("local_rank", &WorkerInfo::local_rank, "This worker's rank on its node.")
      .def_readonly("local_size", &WorkerInfo::local_size, "How many workers run on its node.")
      .def_readonly("device", &WorkerInfo::device,
                    "This worker's device: its collective library's after init_ccl (its GPU under "
                    "NCCL), else the host.")
      .def("__repr__", [](const WorkerInfo& w) {
        return "disco.WorkerInfo(worker_id=" + std::to_string(w.worker_id) +
               ", num_workers=" + std::to_string(w.num_workers) +
               ", group_id=" + std::to_string(w.group_id) +
               ", num_groups=" + std::to_string(w.num_groups) +
               ", local_rank=" + std::to_string(w.local_rank) +
               ", local_size=" + std::to_string(w.local_size) + ", device='" +
               DeviceToString(w.device) + "')";
      });
}

}  // namespace

void BindValues(py::module_& m) {
  BindDevice(m);
  BindTensor(m);
  BindRefs(m);
  BindWorkerInfo(m);
}

}  // namespace python
}  // namespace disco

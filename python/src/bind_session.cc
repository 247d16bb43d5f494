// disco.Session, by concern: its life and calls, copies between the host and worker 0,
// collectives, HDF5 I/O; and the remote side: disco.connect, disco.serve, shutdown_remote_job.
// Every call holds a CallScope (module.h) and releases the GIL while the runtime works.
#include <disco/disco.h>
#include <disco/h5.h>
#include <disco/remote.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "module.h"

namespace disco {
namespace python {

PyDRef Ref(PySession& ps, DRef r) { return PyDRef(std::move(r), ps.state); }
py::object Wrap(PySession& ps, DRef r) { return py::cast(Ref(ps, std::move(r))); }

Shape ToShape(py::handle obj) {
  if (py::isinstance<py::int_>(obj)) return Shape({obj.cast<int64_t>()});
  DISCO_CHECK(!py::isinstance<PyDRef>(obj), TypeError)
      << "shape: expected a tuple of ints, got a disco.DRef (a shape is given by value; a "
         "register's content may differ between workers)";
  std::vector<int64_t> dims;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(obj)) {
    DISCO_CHECK(PyLong_Check(d.ptr()) && !PyBool_Check(d.ptr()), TypeError)
        << "shape: expected a sequence of ints, got an item of type "
        << std::string(py::str(py::type::of(d).attr("__name__")));
    dims.push_back(d.cast<int64_t>());
  }
  return Shape(std::move(dims));
}

namespace {

using SessionClass = py::class_<PySession, SessionPtr>;

DRef RefOf(py::handle h, const char* what) {
  if (h.is_none()) return DRef();
  DISCO_CHECK(py::isinstance<PyDRef>(h), TypeError)
      << what << ": expected a disco.DRef or None, got "
      << std::string(py::str(py::type::of(h).attr("__name__")));
  return h.cast<const PyDRef&>().ref;
}

// A DRef the call cannot do without (a collective's tensors, as in TVM's Session.allreduce): None
// is refused here, naming the argument, rather than sent as an empty register.
DRef RequiredRefOf(py::handle h, const char* what) {
  DISCO_CHECK(!h.is_none(), TypeError)
      << what << ": expected a disco.DRef of a tensor, got None (for in place, pass the same DRef "
      << "as src and dst)";
  return RefOf(h, what);
}

SessionPtr Connect(const std::string& host, int port, const std::string& key,
                   int connect_timeout_ms, int reply_timeout_ms, const std::string& key_file) {
  ConnectOptions options;
  options.connect_timeout_ms = connect_timeout_ms;
  options.reply_timeout_ms = reply_timeout_ms;
  options.key_file = key_file;
  auto ps = std::make_shared<PySession>();
  {
    py::gil_scoped_release release;
    ps->owned = std::make_unique<Session>(disco::Connect(host, port, key, options));
  }
  ps->session = ps->owned.get();
  ps->remote = true;
  ps->where = host + ":" + std::to_string(port);
  return ps;
}

// shutdown() and leaving the with-block.
void ShutdownSession(PySession& s) {
  CallScope call(s.state.get());
  if (s.session == nullptr) return;
  Released([&] { s.session->Shutdown(); });
  s.shut_down = true;
}

std::string SessionRepr(const PySession& s) {
  // No CallScope: a repr works from any thread, and inside the session's own calls.
  if (s.session == nullptr || s.shut_down) return std::string("disco.Session(ended)");
  return "disco.Session(num_workers=" + std::to_string(s.session->num_workers()) +
         ", num_groups=" + std::to_string(s.session->num_groups()) + ", " +
         (s.remote ? "remote " + s.where : std::string("in_job")) + ")";
}

// ---- Life: construction, shape of the job, shutdown, with-block, capture ------------------------

void BindLife(SessionClass& cls) {
  // disco.Session(host, port, key, ...) is disco.connect(...): the constructor a Python subclass
  // (disco.ProcessSession) calls.
  cls.def(py::init(&Connect), py::arg("host"), py::arg("port"), py::arg("key") = "",
          py::arg("connect_timeout_ms") = 10000, py::arg("reply_timeout_ms") = -1,
          py::arg("key_file") = "",
          "Attaches to a served job, as disco.connect(host, port, key, ...) does.")
      .def_property_readonly(
          "num_workers",
          [](PySession& s) {
            CallScope call(s.state.get());
            return s.get(call).num_workers();
          },
          "Number of workers (the MPI job's ranks).")
      .def_property_readonly(
          "num_groups",
          [](PySession& s) {
            CallScope call(s.state.get());
            return s.get(call).num_groups();
          },
          "Number of worker groups (DISCO_NUM_GROUPS, default 1): contiguous blocks of workers.")
      .def_property_readonly(
          "is_remote", [](PySession& s) { return s.remote; },
          "Whether this session is a client of a served job (disco.connect).")
      .def("shutdown", &ShutdownSession,
           "Ends the session (remote: detaches this client; the served job goes on).")
      .def(
          "capture",
          [](SessionPtr s, int num_inputs) {
            auto g = std::make_shared<PyGraph>();
            g->session = std::move(s);
            g->num_inputs = num_inputs;
            return g;
          },
          py::arg("num_inputs") = 0,
          "A disco.Graph to fill in a with-block: `with sess.capture(1) as g: ...`, then "
          "`g.replay(x)`.")
      .def(
          "__enter__", [](SessionPtr s) { return s; }, "Returns this session.")
      .def(
          "__exit__", [](PySession& s, py::args) { ShutdownSession(s); },
          "Shuts the session down, as shutdown().")
      .def("__repr__", &SessionRepr);
}

// ---- Calls and syncs ----------------------------------------------------------------------------

PyDRef Empty(PySession& s, py::object shape, py::object dtype, py::object device, bool worker0_only,
             bool in_group) {
  CallScope call(s.state.get());
  Session& sess = s.get(call);
  Shape sh = ToShape(shape);
  DLDataType dt = ToDataType(dtype);
  DLDevice dev = ToDevice(device);
  return Ref(s, Released([&] { return sess.Empty(sh, dt, dev, worker0_only, in_group); }));
}

void BindCalls(SessionClass& cls) {
  cls.def(
         "get_global_func",
         [](SessionPtr s, const std::string& name) {
           CallScope call(s->state.get());
           Session& sess = s->get(call);
           DRef f = Released([&] { return sess.GetGlobalFunc(name); });
           return PyFunc(std::move(f), s, name);
         },
         py::arg("name"), "A DPackedFunc for the global function `name` on every worker.")
      .def(
          "call_packed",
          [](PySession& s, const PyDRef& func, py::args args) {
            return CallPacked(s, func.ref, args);
          },
          py::arg("func"), "Calls `func` on every worker; returns the DRef of the result.")
      .def("empty", &Empty, py::arg("shape"), py::arg("dtype"), py::arg("device") = py::none(),
           py::arg("worker0_only") = false, py::arg("in_group") = true,
           "A new tensor register: an uninitialised tensor of `shape` and `dtype` on every worker "
           "(with `worker0_only`, on worker 0 only, or with `in_group` on each group's first "
           "worker). `device`: None or 'cpu' for host memory, 'cuda' for each worker's own GPU "
           "(after init_ccl), a disco.Device.")
      .def(
          "sync_worker_0",
          [](PySession& s) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncWorker(0); });
          },
          "Waits until worker 0 has run every call sent so far; raises its pending errors.")
      .def(
          "sync_worker",
          [](PySession& s, int i) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncWorker(i); });
          },
          py::arg("worker_id"),
          "Waits until `worker_id` has run every call sent so far; raises its pending errors "
          "(disco.RemoteError).")
      .def(
          "sync_all",
          [](PySession& s) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Released([&] { x.SyncAll(); });
          },
          "Waits for every worker; raises the pending errors of workers (disco.RemoteError).");
}

// ---- Copies between the host and worker 0 -------------------------------------------------------

py::object CopyToWorker0(PySession& s, py::handle host, py::handle remote) {
  CallScope call(s.state.get());
  disco::Session& x = s.get(call);
  Tensor t = ToTensorOrThrow(host, "copy_to_worker_0(host)");
  if (remote.is_none()) return Wrap(s, Released([&] { return x.CopyToWorker0(t); }));
  DRef r = RefOf(remote, "copy_to_worker_0(remote)");
  Released([&] { x.CopyToWorker0(t, r); });
  return py::reinterpret_borrow<py::object>(remote);
}

void CopyFromWorker0(PySession& s, py::handle host, const PyDRef& remote) {
  CallScope call(s.state.get());
  disco::Session& x = s.get(call);
  const char* what = "copy_from_worker_0(host)";
  if (py::isinstance<py::array>(host)) {
    auto a = py::reinterpret_borrow<py::array>(host);
    py::object native = a.dtype().attr("newbyteorder")("=");
    if (!native.equal(a.dtype())) {
      // The other byte order: worker 0's values into a native array, then numpy converts them
      // into `host` (written in place like any destination).
      DISCO_CHECK(a.writeable(), ValueError)
          << what << ": the numpy array must be writeable (it is written in place)";
      py::array tmp =
          py::array::ensure(py::module_::import("numpy").attr("empty")(a.attr("shape"), native));
      Tensor t = ToTensorInPlace(tmp, what);
      Released([&] { x.CopyFromWorker0(t, remote.ref); });
      py::module_::import("numpy").attr("copyto")(a, tmp);
      return;
    }
  }
  Tensor t = ToTensorInPlace(host, what);
  Released([&] { x.CopyFromWorker0(t, remote.ref); });
}

void BindCopies(SessionClass& cls) {
  cls.def("copy_to_worker_0", &CopyToWorker0, py::arg("host"), py::arg("remote") = py::none(),
          "Copies a host array into worker 0's tensor `remote` (a new register when None).")
      .def("copy_from_worker_0", &CopyFromWorker0, py::arg("host"), py::arg("remote"),
           "Copies worker 0's tensor `remote` into `host` (a numpy array, written in place).");
}

// ---- Collectives --------------------------------------------------------------------------------

void BindReductions(SessionClass& cls) {
  cls.def(
         "init_ccl",
         [](PySession& s, const std::string& ccl, py::args device_ids) {
           CallScope call(s.state.get());
           disco::Session& x = s.get(call);
           std::vector<int64_t> ids;
           for (py::handle d : device_ids) ids.push_back(d.cast<int64_t>());
           Released([&] { x.InitCCL(ccl, ids); });
         },
         py::arg("ccl"),
         "init_ccl(ccl, *device_ids): initialises the collective library on every worker: "
         "'mpi', 'nccl' or 'auto' (DISCO_CCL overrides). `device_ids` maps node-local ranks to "
         "GPUs (none: local rank modulo the visible GPUs). Calling it again replaces the "
         "communicators.")
      .def(
          "allreduce",
          [](PySession& s, py::handle src, py::handle dst, const std::string& op, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "allreduce(src)"), b = RequiredRefOf(dst, "allreduce(dst)");
            return Ref(s, Released([&] { return x.AllReduce(a, op, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("op") = "sum", py::arg("in_group") = true,
          "Allreduces each worker's tensor `src` into `dst` (the same DRef for in place) over "
          "each group (`in_group`) or the world; `op`: sum, prod, min, max, avg. Returns the "
          "call's (None) result register.")
      .def(
          "allgather",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "allgather(src)"), b = RequiredRefOf(dst, "allgather(dst)");
            return Ref(s, Released([&] { return x.AllGather(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Gathers every worker's `src` into `dst` on every worker (n x src, in rank order), "
          "over each group or the world. Returns the call's (None) result register.")
      .def(
          "reduce_scatter",
          [](PySession& s, py::handle src, py::handle dst, const std::string& op, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RequiredRefOf(src, "reduce_scatter(src)");
            DRef b = RequiredRefOf(dst, "reduce_scatter(dst)");
            return Ref(s, Released([&] { return x.ReduceScatter(a, op, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("op") = "sum", py::arg("in_group") = true,
          "Reduces `src` (n x dst) over each group or the world and leaves part i in worker i's "
          "`dst`; `op`: sum, prod, min, max, avg. Returns the call's (None) result register.")
      .def(
          "barrier",
          [](PySession& s, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            return Ref(s, Released([&] { return x.Barrier(in_group); }));
          },
          py::arg("in_group") = false,
          "A barrier of every worker (of each group, with `in_group`) as a session call. Returns "
          "the call's (None) result register.");
}

void BindHostDistribution(SessionClass& cls) {
  cls.def(
         "broadcast",
         [](PySession& s, py::handle src, py::handle dst, bool in_group) -> py::object {
           CallScope call(s.state.get());
           disco::Session& x = s.get(call);
           Tensor t = ToTensorOrThrow(src, "broadcast(src)");
           if (dst.is_none()) return Wrap(s, Released([&] { return x.Broadcast(t, in_group); }));
           DRef d = RefOf(dst, "broadcast(dst)");
           Released([&] {
             DRef on0 = x.CopyToWorker0(t);
             x.Broadcast(on0, in_group, d);
           });
           return py::reinterpret_borrow<py::object>(dst);
         },
         py::arg("src"), py::arg("dst") = py::none(), py::arg("in_group") = true,
         "The host array `src` on every worker: into `dst`, or a new register when None.")
      .def(
          "scatter",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) -> py::object {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            Tensor t = ToTensorOrThrow(src, "scatter(src)");
            if (dst.is_none()) return Wrap(s, Released([&] { return x.Scatter(t, in_group); }));
            DRef d = RefOf(dst, "scatter(dst)");
            Released([&] {
              DRef on0 = x.CopyToWorker0(t);
              x.Scatter(on0, in_group, d);
            });
            return py::reinterpret_borrow<py::object>(dst);
          },
          py::arg("src"), py::arg("dst") = py::none(), py::arg("in_group") = true,
          "The host array `src` split along its first axis, part i to worker i.");
}

void BindWorker0Distribution(SessionClass& cls) {
  cls.def(
         "broadcast_from_worker0",
         [](PySession& s, py::handle src, py::handle dst, bool in_group) {
           CallScope call(s.state.get());
           disco::Session& x = s.get(call);
           DRef a = RefOf(src, "broadcast_from_worker0(src)");
           DRef b = RefOf(dst, "broadcast_from_worker0(dst)");
           return Ref(s, Released([&] { return x.Broadcast(a, in_group, b); }));
         },
         py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
         "Copies worker 0's tensor `src` (each group's first worker's, with `in_group`) into "
         "`dst` on every worker. Returns the call's (None) result register.")
      .def(
          "scatter_from_worker0",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RefOf(src, "scatter_from_worker0(src)");
            DRef b = RefOf(dst, "scatter_from_worker0(dst)");
            return Ref(s, Released([&] { return x.Scatter(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Splits worker 0's tensor `src` (None on the others; each group's first worker's, with "
          "`in_group`) along its flattened elements: part i into worker i's `dst`. Returns the "
          "call's (None) result register.")
      .def(
          "gather_to_worker0",
          [](PySession& s, py::handle src, py::handle dst, bool in_group) {
            CallScope call(s.state.get());
            disco::Session& x = s.get(call);
            DRef a = RefOf(src, "gather_to_worker0(src)");
            DRef b = RefOf(dst, "gather_to_worker0(dst)");
            return Ref(s, Released([&] { return x.Gather(a, in_group, b); }));
          },
          py::arg("src"), py::arg("dst"), py::arg("in_group") = true,
          "Gathers every worker's `src` into worker 0's `dst` (n x src, in rank order; None on "
          "the others; each group's first worker, with `in_group`). Returns the call's (None) "
          "result register.");
}

// ---- HDF5 I/O -----------------------------------------------------------------------------------

py::dict LoadTensors(PySession& s, const std::string& path, py::dict plan, bool in_group,
                     py::object device) {
  CallScope call(s.state.get());
  disco::Session& x = s.get(call);
  std::vector<h5::LoadEntry> entries;
  for (auto kv : plan) {
    h5::LoadEntry e;
    e.name = kv.first.cast<std::string>();
    e.shard_axis = kv.second.is_none() ? h5::kAxisFromFile : kv.second.cast<int64_t>();
    entries.push_back(std::move(e));
  }
  DLDevice dev = ToDevice(device);
  std::map<std::string, DRef> loaded =
      Released([&] { return h5::LoadTensors(x, path, entries, in_group, dev); });
  py::dict out;
  for (auto& kv : loaded) out[py::str(kv.first)] = Wrap(s, kv.second);
  return out;
}

void SaveTensors(PySession& s, const std::string& path, py::dict tensors, bool in_group) {
  CallScope call(s.state.get());
  disco::Session& x = s.get(call);
  std::vector<h5::SaveEntry> entries;
  for (auto kv : tensors) {
    h5::SaveEntry e;
    e.name = kv.first.cast<std::string>();
    py::handle v = kv.second;
    if (py::isinstance<PyDRef>(v)) {
      e.shard = v.cast<const PyDRef&>().ref;
    } else {
      auto t = v.cast<py::tuple>();
      DISCO_CHECK(t.size() == 2, ValueError)
          << "save_tensors: '" << e.name << "': expected a DRef or (DRef, shard_axis)";
      e.shard = RefOf(t[0], "save_tensors");
      e.shard_axis = t[1].is_none() ? h5::kReplicate : t[1].cast<int64_t>();
    }
    entries.push_back(std::move(e));
  }
  Released([&] { h5::SaveTensors(x, path, entries, in_group); });
}

void BindIO(SessionClass& cls) {
  cls.def("load_tensors", &LoadTensors, py::arg("path"), py::arg("plan"),
          py::arg("in_group") = false, py::arg("device") = py::none(),
          "Loads datasets of an HDF5 file, {name: shard_axis} (-1 whole, None the file's "
          "shard_axis attribute); returns {name: DRef}.")
      .def("save_tensors", &SaveTensors, py::arg("path"), py::arg("tensors"),
           py::arg("in_group") = false,
           "Saves {name: (DRef, shard_axis)} into an HDF5 file (-1 or None: every worker holds "
           "the whole tensor).");
}

// ---- Remote: serving a session, and the served job's end ---------------------------------------

std::string ServeOptionsRepr(const ServeOptions& o) {
  // The key itself stays out of reprs (logs, tracebacks).
  return "disco._core.ServeOptions(host=" + std::string(py::repr(py::str(o.host))) +
         ", port=" + std::to_string(o.port) + ", key=" + (o.key.empty() ? "''" : "<set>") +
         ", key_file=" + std::string(py::repr(py::str(o.key_file))) +
         ", port_file=" + std::string(py::repr(py::str(o.port_file))) +
         ", idle_timeout_s=" + std::to_string(o.idle_timeout_s) +
         ", request_timeout_ms=" + std::to_string(o.request_timeout_ms) +
         ", max_packet_bytes=" + std::to_string(o.max_packet_bytes) +
         ", max_clients=" + std::to_string(o.max_clients) + ")";
}

void BindServeOptions(py::module_& m) {
  py::class_<ServeOptions>(m, "ServeOptions", "How disco.serve serves a session.")
      .def(py::init<>(),
           "The defaults: loopback, any free port, a key from DISCO_SERVE_KEY or "
           "generated.")
      .def_readwrite("host", &ServeOptions::host,
                     "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface).")
      .def_readwrite("port", &ServeOptions::port, "TCP port (0: any free port).")
      .def_readwrite("key", &ServeOptions::key,
                     "The key clients must present, 16 characters or more (empty: "
                     "DISCO_SERVE_KEY, else a generated key written to key_file).")
      .def_readwrite("key_file", &ServeOptions::key_file,
                     "Where a generated key goes (empty: ~/.disco/serve-PORT.key).")
      .def_readwrite("port_file", &ServeOptions::port_file,
                     "When set, the port is written here once the server listens.")
      .def_readwrite("idle_timeout_s", &ServeOptions::idle_timeout_s,
                     "A client silent this many seconds between requests is dropped (0: never).")
      .def_readwrite("request_timeout_ms", &ServeOptions::request_timeout_ms,
                     "A client whose begun request, answer or copy moves no byte for this long "
                     "(plus a second per MiB still to move) is dropped.")
      .def_readwrite("max_packet_bytes", &ServeOptions::max_packet_bytes,
                     "The largest request packet accepted.")
      .def_readwrite("max_clients", &ServeOptions::max_clients,
                     "Stop after this many clients (0: until a client ends the job).")
      .def("__repr__", &ServeOptionsRepr);
}

// Seconds per Session::CallPacked(func, *args) issued from C++: the baseline of
// bench/python_call.py.
double BenchCalls(PySession& s, const PyDRef& func, py::tuple args, int64_t k, bool sync_each) {
  CallScope call(s.state.get());
  disco::Session& x = s.get(call);
  std::vector<Any> packed;
  for (py::handle a : args) packed.push_back(ToAny(a));
  return Released([&] {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < k; ++i) {
      x.CallWithPacked(func.ref, packed.data(), packed.size());
      if (sync_each) x.SyncAll();
    }
    x.SyncAll();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
           static_cast<double>(k);
  });
}

}  // namespace

void BindSession(py::module_& m) {
  SessionClass cls(m, "Session", R"doc(The controller's view of a disco job.

In a job: the argument of the controller that disco.main runs on rank 0. Remote: disco.connect.
Calls are asynchronous and ordered; errors of workers surface at the next sync or debug read as
disco.RemoteError. A context manager: leaving it shuts the session down.)doc");
  BindLife(cls);
  BindCalls(cls);
  BindCopies(cls);
  BindReductions(cls);
  BindHostDistribution(cls);
  BindWorker0Distribution(cls);
  BindIO(cls);
  m.def("_bench_calls", &BenchCalls, py::arg("session"), py::arg("func"), py::arg("args"),
        py::arg("k"), py::arg("sync_each"),
        "Seconds per Session::CallPacked(func, *args) issued from C++ (benchmark baseline).");
}

void BindRemote(py::module_& m) {
  BindServeOptions(m);  // first: serve's docstring names its type, disco._core.ServeOptions
  m.def("connect", &Connect, py::arg("host"), py::arg("port"), py::arg("key") = "",
        py::arg("connect_timeout_ms") = 10000, py::arg("reply_timeout_ms") = -1,
        py::arg("key_file") = "", "A Session attached to the job served at host:port.");
  m.def(
      "shutdown_remote_job",
      [](PySession& s, int exit_code) {
        CallScope call(s.state.get());
        disco::Session& x = s.get(call);
        Released([&] { ShutdownRemoteJob(x, exit_code); });
        s.session = nullptr;
      },
      py::arg("session"), py::arg("exit_code") = 0,
      "Ends the served job of `session` (from connect); every rank exits with `exit_code`.");
  m.def(
      "serve",
      [](PySession& s, const ServeOptions& options) {
        CallScope call(s.state.get());
        disco::Session& x = s.get(call);
        return Released([&] { return Serve(x, options); });
      },
      py::arg("session"), py::arg("options"),
      "Serves the in-job `session` to remote clients (rank 0's controller) until one ends the "
      "job (returns its exit code) or max_clients have come and gone (returns 0).");
}

}  // namespace python
}  // namespace disco

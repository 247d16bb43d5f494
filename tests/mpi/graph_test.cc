// Capture and replay (disco/graph.h): recorded calls run on every worker at each replay with the
// inputs substituted, into fixed registers; collectives inside graphs; errors name the graph, the
// call and the function; what cannot be recorded is refused and the capture discarded.
#include <disco/disco.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "mpi/mpi_test_env.h"
#include "session/session_impl.h"
#include "session/worker.h"

namespace disco {
namespace {

using testing::RemoteErrorOf;

// out[i] = x[i] * k + worker id
DISCO_REGISTER_GLOBAL("test.graph.scale_into").set_body_typed([](Tensor x, double k, Tensor out) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    out.data_as<float>()[i] =
        static_cast<float>(x.data_as<float>()[i] * k + ThisWorker().worker_id);
  }
  return out;
});
DISCO_REGISTER_GLOBAL("test.graph.fill").set_body_typed([](Tensor t, double v) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(v);
});
DISCO_REGISTER_GLOBAL("test.graph.add").set_body_typed([](int64_t a, int64_t b) { return a + b; });
DISCO_REGISTER_GLOBAL("test.graph.fail_on_last_if").set_body_typed([](int64_t a, bool fail) {
  const WorkerInfo& w = ThisWorker();
  if (fail && w.worker_id == w.num_workers - 1) throw ValueError("asked to fail");
  return a;
});
DISCO_REGISTER_GLOBAL("test.graph.noop").set_body_packed([](const Args&, Any*) {});
DISCO_REGISTER_GLOBAL("test.graph.num_graphs").set_body_typed([]() {
  return static_cast<int64_t>(detail::CurrentWorker()->num_graphs());
});

class GraphTest : public ::testing::Test {
 protected:
  Session& s() { return *testing::g_session; }
  DRef F(const std::string& name) { return s().GetGlobalFunc(name); }
  int n() { return s().num_workers(); }
  void Check(const std::string& what) { testing::ExpectNoRemoteError(s(), what); }
  int64_t NumGraphs(int worker) {
    return s().CallPacked(F("test.graph.num_graphs")).DebugGetFromRemote(worker).cast<int64_t>();
  }
};

TEST_F(GraphTest, ReplaysRunEveryCallWithTheInputsOnEveryWorker) {
  DRef add = F("test.graph.add");
  DRef sum;
  Graph g = s().Capture(2, [&](const std::vector<Any>& in) {
    DRef t = s().CallPacked(add, in[0], in[1]);
    sum = s().CallPacked(add, t, 100);
  });
  EXPECT_EQ(g.num_inputs(), 2);
  EXPECT_EQ(g.num_calls(), 2u);
  for (int64_t i = 0; i < 5; ++i) {
    g.Replay({Any(i), Any(i * 10)});
    for (int w = 0; w < n(); ++w) {
      EXPECT_EQ(sum.DebugGetFromRemote(w).cast<int64_t>(), i * 11 + 100) << "worker " << w;
    }
  }
  Check("replays");
}

// A register given as a replay input is its value on every worker (found by outside testing: the
// fast path passed the DRef itself).
TEST_F(GraphTest, RegistersGivenAsInputsAreTheirValues) {
  DRef add = F("test.graph.add");
  DRef out;
  Graph g =
      s().Capture(2, [&](const std::vector<Any>& in) { out = s().CallPacked(add, in[0], in[1]); });
  DRef five = s().CallPacked(add, 2, 3);
  g.Replay({Any(five), Any(int64_t{10})});
  EXPECT_EQ(out.DebugGetFromRemote(n() - 1).cast<int64_t>(), 15);
  g.Replay({Any(out), Any(out)});  // the graph's own result as both inputs
  EXPECT_EQ(out.DebugGetFromRemote(0).cast<int64_t>(), 30);
  Check("registers as inputs");
}

// A packed function that writes its result only when told to.
DISCO_REGISTER_GLOBAL("test.graph.maybe").set_body_packed([](const Args& args, Any* rv) {
  if (args[0].cast<bool>()) *rv = Any(int64_t{7});
});

// A replayed call writes its result into its register: one that writes none leaves None there,
// not the last replay's value.
TEST_F(GraphTest, ACallThatReturnsNothingLeavesNone) {
  DRef out;
  Graph g = s().Capture(
      1, [&](const std::vector<Any>& in) { out = s().CallPacked(F("test.graph.maybe"), in[0]); });
  g.Replay({Any(true)});
  EXPECT_EQ(out.DebugGetFromRemote(n() - 1).cast<int64_t>(), 7);
  g.Replay({Any(false)});
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(out.DebugGetFromRemote(w).type_code(), TypeCode::kNone) << "worker " << w;
  }
  Check("a call that returns nothing");
}

// A tensor whose memory, when its last holder lets it go, counts itself in `tracked_freed`.
std::atomic<int64_t> tracked_freed{0};
DISCO_REGISTER_GLOBAL("test.graph.tracked").set_body_typed([]() {
  struct Ctx {
    float data[4] = {};
    int64_t shape[1] = {4};
  };
  auto* ctx = new Ctx;
  auto* mt = new DLManagedTensor{};
  mt->dl_tensor.data = ctx->data;
  mt->dl_tensor.device = CPU();
  mt->dl_tensor.ndim = 1;
  mt->dl_tensor.dtype = DataType("float32");
  mt->dl_tensor.shape = ctx->shape;
  mt->manager_ctx = ctx;
  mt->deleter = [](DLManagedTensor* self) {
    delete static_cast<Ctx*>(self->manager_ctx);
    delete self;
    ++tracked_freed;
  };
  return Tensor::FromDLPack(mt);
});
DISCO_REGISTER_GLOBAL("test.graph.tracked_freed").set_body_typed([]() {
  return tracked_freed.load();
});
DISCO_REGISTER_GLOBAL("test.graph.take").set_body_typed([](Tensor t) { return t.numel(); });

// A replay binds its calls' arguments in buffers of their own; a tensor it was given (or read
// from a register) is let go when the call returns, not kept until the next replay: the tensor of
// a register the caller freed is freed.
TEST_F(GraphTest, AReplayKeepsNoTensorItWasGivenAlive) {
  DRef count;
  Graph g = s().Capture(
      1, [&](const std::vector<Any>& in) { count = s().CallPacked(F("test.graph.take"), in[0]); });
  DRef freed = F("test.graph.tracked_freed");
  std::vector<int64_t> before;
  for (int w = 0; w < n(); ++w) {
    before.push_back(s().CallPacked(freed).DebugGetFromRemote(w).cast<int64_t>());
  }
  {
    DRef t = s().CallPacked(F("test.graph.tracked"));
    g.Replay({Any(t)});
    EXPECT_EQ(count.DebugGetFromRemote(0).cast<int64_t>(), 4);
  }  // the caller's register goes, and with it the last holder of the tensor
  s().SyncAll();
  for (int w = 0; w < n(); ++w) {
    EXPECT_EQ(s().CallPacked(freed).DebugGetFromRemote(w).cast<int64_t>(), before[w] + 1)
        << "worker " << w << " still holds the tensor the replay was given";
  }
  Check("a replay's bound arguments");
}

TEST_F(GraphTest, TensorsEmptyAtInstallAndCollectivesInsideAGraph) {
  s().InitCCL("mpi");
  const int64_t count = 1000;
  DRef x, y;
  Graph g = s().Capture(1, [&](const std::vector<Any>& in) {
    x = s().Empty(Shape{count}, DataType("float32"));
    y = s().Empty(Shape{count}, DataType("float32"));
    s().CallPacked(F("test.graph.fill"), x, in[0]);
    s().CallPacked(F("test.graph.scale_into"), x, 2.0, y);
    s().AllReduce(y, "sum", false, y);
  });
  EXPECT_EQ(g.num_calls(), 3u) << "Empty runs at install, not at each replay";
  for (int r = 1; r <= 3; ++r) {
    g.Replay({Any(static_cast<double>(r))});
    // sum over workers of (2r + w) = 2rn + n(n-1)/2
    const double want = 2.0 * r * n() + n() * (n() - 1) / 2.0;
    for (int w = 0; w < n(); ++w) {
      Tensor got = y.DebugGetFromRemote(w).cast<Tensor>();
      EXPECT_FLOAT_EQ(got.data_as<float>()[0], static_cast<float>(want)) << "replay " << r;
      EXPECT_FLOAT_EQ(got.data_as<float>()[count - 1], static_cast<float>(want));
    }
  }
  Check("collective replays");
}

DISCO_REGISTER_GLOBAL("test.graph.fresh").set_body_typed([](int64_t count, double v) {
  Tensor t = Tensor::Empty(Shape{count}, DataType("float32"));
  for (int64_t i = 0; i < count; ++i) t.data_as<float>()[i] = static_cast<float>(v);
  return t;
});

// A collective on tensors a recorded function makes anew at every replay agrees on them at the
// first replay only: the key is the graph's (its registers), and each worker checks its tensors
// against what it agreed with (a change ends the job: mpi.fault.graph_shape_changes). Registers
// from outside the graph keep their versions: rewritten, they are agreed on again.
TEST_F(GraphTest, CollectivesOnTensorsMadeInsideAgreeOnceNotAtEveryReplay) {
  s().InitCCL("mpi");
  auto rounds = [&] {
    return s()
        .CallPacked(F("test.ccl.agreement_rounds"))
        .DebugGetFromRemote(n() - 1)
        .cast<int64_t>();
  };
  DRef fresh = F("test.graph.fresh");
  DRef outside = s().CallPacked(fresh, 16, 1.0);
  DRef made, gathered;
  Graph g = s().Capture(1, [&](const std::vector<Any>& in) {
    made = s().CallPacked(fresh, 64, in[0]);
    s().AllReduce(made, "sum", false, made);
    s().AllReduce(outside, "sum", false, outside);
  });
  const int64_t start = rounds();
  for (int r = 1; r <= 5; ++r) {
    g.Replay({Any(static_cast<double>(r))});
    for (int w = 0; w < n(); ++w) {
      EXPECT_FLOAT_EQ(made.DebugGetFromRemote(w).cast<Tensor>().data_as<float>()[63],
                      static_cast<float>(r * n()))
          << "replay " << r << " worker " << w;
    }
  }
  Check("replays");
  EXPECT_EQ(rounds() - start, 2) << "one round per collective of the graph, at the first replay";
  // A register the graph reads but does not write, given as an input: agreed on once per version.
  Graph h = s().Capture(1, [&](const std::vector<Any>& in) {
    DRef placeholder = in[0].cast<DRef>();
    s().AllReduce(placeholder, "sum", false, placeholder);
  });
  DRef x = s().CallPacked(fresh, 16, 1.0);
  h.Replay({Any(x)});
  h.Replay({Any(x)});
  Check("a graph on an outside register");
  EXPECT_EQ(rounds() - start, 3);
  x = s().CallPacked(fresh, 16, 1.0);  // a new register (or a new version of a reused one)
  h.Replay({Any(x)});
  g.Replay({Any(1.0)});
  Check("a new input");
  EXPECT_EQ(rounds() - start, 4);
}

TEST_F(GraphTest, AFailingCallPoisonsWhatDependsOnItAndNamesGraphCallAndFunction) {
  DRef add = F("test.graph.add"), fail = F("test.graph.fail_on_last_if");
  DRef out;
  Graph g = s().Capture(1, [&](const std::vector<Any>& in) {
    DRef a = s().CallPacked(fail, 5, in[0]);
    out = s().CallPacked(add, a, 1);
  });
  g.Replay({Any(true)});
  std::string msg = RemoteErrorOf([&] { s().SyncAll(); });
  EXPECT_NE(msg.find("graph " + std::to_string(g.id()) + " call 0 'test.graph.fail_on_last_if'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("asked to fail"), std::string::npos) << msg;
  g.Replay({Any(false)});
  Check("the next replay");
  EXPECT_EQ(out.DebugGetFromRemote(n() - 1).cast<int64_t>(), 6);
}

TEST_F(GraphTest, WhatCannotBeRecordedIsRefusedAndTheCaptureDiscarded) {
  DRef add = F("test.graph.add");
  auto refused = [&](const std::string& what, const std::function<void()>& call) {
    try {
      s().Capture(0, [&](const std::vector<Any>&) {
        s().CallPacked(add, 1, 2);
        call();
      });
      ADD_FAILURE() << what << " was recorded";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  DRef t = s().Empty(Shape{4}, DataType("float32"));
  Tensor host = Tensor::Empty(Shape{4}, DataType("float32"));
  refused("SyncAll", [&] { s().SyncAll(); });
  refused("SyncWorker", [&] { s().SyncWorker(0); });
  refused("CopyToWorker0", [&] { s().CopyToWorker0(host, t); });
  refused("CopyFromWorker0", [&] { s().CopyFromWorker0(host, t); });
  refused("DebugGetFromRemote", [&] { t.DebugGetFromRemote(0); });
  refused("DebugSetRegister", [&] { t.DebugCopyFrom(0, Any(host)); });
  refused("InitCCL", [&] { s().InitCCL("mpi"); });
  refused("nested Capture", [&] { s().Capture(0, [](const std::vector<Any>&) {}); });
  // A body that swallows the refusal still gets its capture discarded.
  try {
    s().Capture(0, [&](const std::vector<Any>&) {
      try {
        s().SyncAll();
      } catch (const ValueError&) {
      }
      s().CallPacked(add, 1, 2);
    });
    ADD_FAILURE() << "a capture whose body swallowed a refusal was kept";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("discarded"), std::string::npos) << e.what();
  }
  // Lookups made inside a discarded capture still work.
  try {
    s().Capture(0, [&](const std::vector<Any>&) {
      DRef late = F("test.graph.add");
      s().CallPacked(late, 1, 2);
      s().SyncAll();
    });
  } catch (const ValueError&) {
  }
  EXPECT_EQ(s().CallPacked(add, 2, 3).DebugGetFromRemote(n() - 1).cast<int64_t>(), 5);
  Check("after refusals");
}

TEST_F(GraphTest, BadInputsAreValueErrorsAndGraphsAreFreedWithTheirLastCopy) {
  const int64_t before = NumGraphs(n() - 1);
  {
    Graph g = s().Capture(
        1, [&](const std::vector<Any>& in) { s().CallPacked(F("test.graph.add"), in[0], 1); });
    EXPECT_THROW(g.Replay({}), ValueError);
    EXPECT_THROW(g.Replay({Any(1), Any(2)}), ValueError);
    Graph copy = g;
    EXPECT_EQ(NumGraphs(n() - 1), before + 1);
    g = Graph();
    copy.Replay({Any(int64_t{1})});
    Check("a copy replays");
  }
  s().CallPacked(F("test.graph.noop"));
  EXPECT_EQ(NumGraphs(n() - 1), before);
  EXPECT_EQ(NumGraphs(0), before);
  EXPECT_THROW(Graph().Replay(), ValueError);
}

// A capture the workers never install (here: a value that cannot be sent, the empty DRef of
// AllReduce's recv) still installs what its body was handed: a builtin first looked up inside
// (disco.empty, disco.allreduce) and a DRef from GetGlobalFunc keep working afterwards.
TEST_F(GraphTest, ACaptureThatCannotBeInstalledKeepsItsLookupsAndBuiltins) {
  if (s().impl() != nullptr) s().impl()->TestClearBuiltins();  // first looked up in the capture
  DRef mine, x;
  try {
    s().Capture(0, [&](const std::vector<Any>&) {
      mine = F("test.graph.add");
      x = s().Empty(Shape{4}, DataType("float32"));
      s().CallPacked(F("test.graph.fill"), x, 1.0);
      s().AllReduce(x, "sum", false, DRef());
    });
    ADD_FAILURE() << "a capture with an empty DRef was installed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("empty DRef"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s().CallPacked(mine, 2, 3).DebugGetFromRemote(n() - 1).cast<int64_t>(), 5);
  s().CallPacked(F("test.graph.fill"), x, 1.0);
  s().AllReduce(x, "sum", false, x);
  DRef y = s().Empty(Shape{4}, DataType("float32"));
  s().CallPacked(F("test.graph.fill"), y, 2.0);
  s().AllReduce(y, "sum", false, y);
  for (int w : {0, n() - 1}) {
    EXPECT_EQ(x.DebugGetFromRemote(w).cast<Tensor>().data_as<float>()[3], 1.0f * n());
    EXPECT_EQ(y.DebugGetFromRemote(w).cast<Tensor>().data_as<float>()[0], 2.0f * n());
  }
  Check("after a capture that could not be installed");
}

// Under DISCO_MAX_FRAME_BYTES=65536 (mpi.session.small_frames.np2): a program larger than a frame
// is a ValueError, its registers are still reserved on every worker, what the body was handed
// (lookups, Empty tensors, a builtin first looked up inside) is installed, and later calls work.
TEST_F(GraphTest, AGraphOverTheFrameLimitIsRefusedAndTheSessionGoesOn) {
  if (s().impl() == nullptr || s().impl()->config().max_frame_bytes > (1 << 20)) {
    GTEST_SKIP() << "needs the in-job session under a small DISCO_MAX_FRAME_BYTES";
  }
  DRef echo = F("test.graph.add");
  const std::string big(200, 'x');
  std::vector<DRef> made;
  DRef looked_up, x;
  s().impl()->TestClearBuiltins();  // disco.empty is first looked up inside the capture
  try {
    s().Capture(0, [&](const std::vector<Any>&) {
      looked_up = F("test.graph.add");  // a lookup inside, handed out as a DRef
      x = s().Empty(Shape{4}, DataType("float32"));
      for (int i = 0; i < 1000; ++i) made.push_back(s().CallPacked(echo, 1, 2, big));
    });
    ADD_FAILURE() << "a program over the frame limit was installed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DISCO_MAX_FRAME_BYTES"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot be installed"), std::string::npos) << e.what();
  }
  made.clear();  // their registers go back to the free list: reused below
  for (int i = 0; i < 2000; ++i) s().CallPacked(echo, i, 1);
  DRef last = s().CallPacked(echo, 40, 2);
  EXPECT_EQ(last.DebugGetFromRemote(n() - 1).cast<int64_t>(), 42);
  EXPECT_EQ(s().CallPacked(looked_up, 1, 2).DebugGetFromRemote(n() - 1).cast<int64_t>(), 3);
  DRef y = s().Empty(Shape{4}, DataType("float32"));
  for (const DRef& t : {x, y}) s().CallPacked(F("test.graph.fill"), t, 5.0);
  EXPECT_EQ(x.DebugGetFromRemote(n() - 1).cast<Tensor>().data_as<float>()[3], 5.0f);
  EXPECT_EQ(y.DebugGetFromRemote(n() - 1).cast<Tensor>().data_as<float>()[3], 5.0f);
  Check("calls after a refused install");
}

// Even what the body was handed can be over a frame (thousands of Empty calls): it is installed
// step by step.
TEST_F(GraphTest, HandedOutStepsOverTheFrameLimitAreInstalledOneByOne) {
  if (s().impl() == nullptr || s().impl()->config().max_frame_bytes > (1 << 20)) {
    GTEST_SKIP() << "needs the in-job session under a small DISCO_MAX_FRAME_BYTES";
  }
  std::vector<DRef> made;
  try {
    s().Capture(0, [&](const std::vector<Any>&) {
      for (int i = 0; i < 3000; ++i) made.push_back(s().Empty(Shape{1}, DataType("float32")));
    });
    ADD_FAILURE() << "a program over the frame limit was installed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DISCO_MAX_FRAME_BYTES"), std::string::npos) << e.what();
  }
  for (size_t i : {size_t{0}, made.size() / 2, made.size() - 1}) {
    s().CallPacked(F("test.graph.fill"), made[i], static_cast<double>(i));
    EXPECT_EQ(made[i].DebugGetFromRemote(n() - 1).cast<Tensor>().data_as<float>()[0],
              static_cast<float>(i));
  }
  made.clear();
  Check("Empty tensors of a refused install");
}

}  // namespace
}  // namespace disco

// Capture and replay (disco/graph.h): the controller records the calls a capture makes, sends the
// program once (install_graph) and each replay as one small frame (replay_graph); workers keep the
// program and run it with the inputs substituted (Worker::InstallGraph / ReplayGraph).
#include <disco/graph.h>
#include <disco/log.h>
#include <disco/session.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/trace.h"
#include "protocol/graph.h"
#include "session/session_impl.h"

namespace disco {
namespace detail {

namespace {
// A placeholder of a capture: an unowned DRef with an id no register has (the register file grows
// one id at a time from 1), which still crosses the wire like any id (a remote client's capture):
// 2^62 + the capture's serial x kMaxGraphInputs + the input's index, so that a placeholder of
// one capture is never taken for another's.
constexpr int64_t kPlaceholderBase = int64_t{1} << 62;
constexpr int64_t kMaxCaptureSerial = (int64_t{1} << 62) / protocol::kMaxGraphInputs - 1;
Any Placeholder(int64_t serial, int i) {
  return Any(DRef::Unowned(kPlaceholderBase + serial * protocol::kMaxGraphInputs + i));
}
// The capture serial of a placeholder, or -1.
int64_t PlaceholderSerial(const Any& a) {
  if (PlaceholderIndex(a) < 0) return -1;
  return (std::get<DRef>(a.storage()).reg_id() - kPlaceholderBase) / protocol::kMaxGraphInputs;
}
}  // namespace

int64_t PlaceholderIndex(const Any& a) {
  const DRef* ref = std::get_if<DRef>(&a.storage());
  if (ref == nullptr || ref->session() != 0 || ref->reg_id() < kPlaceholderBase) return -1;
  return (ref->reg_id() - kPlaceholderBase) % protocol::kMaxGraphInputs;
}

namespace {
bool NestsPlaceholderAt(const Any& a, int depth) {
  if (depth > 64) return false;  // deeper than any frame carries
  auto any_of = [&](const auto& items, const auto& value) {
    for (const auto& item : items) {
      const Any& v = value(item);
      if (PlaceholderIndex(v) >= 0 || NestsPlaceholderAt(v, depth + 1)) return true;
    }
    return false;
  };
  if (const Array* arr = std::get_if<Array>(&a.storage())) {
    return any_of(arr->items(), [](const Any& v) -> const Any& { return v; });
  }
  if (const Map* map = std::get_if<Map>(&a.storage())) {
    return any_of(map->items(), [](const auto& kv) -> const Any& { return kv.second; });
  }
  return false;
}
}  // namespace

bool NestsPlaceholder(const Any& a) { return NestsPlaceholderAt(a, 0); }

void SessionImpl::CheckNotCapturing(const char* what) {
  if (recording_ == nullptr) return;
  if (recording_->discarded.empty()) recording_->discarded = what;
  DISCO_THROW(ValueError) << what
                          << " cannot be recorded in Session::Capture (only calls, collectives, "
                             "point-to-point and Empty can); the capture is discarded";
}

Graph SessionBackend::Capture(int num_inputs,
                              const std::function<void(const std::vector<Any>&)>& body) {
  DISCO_CHECK(body != nullptr, ValueError) << "Capture without a body";
  std::vector<Any> inputs = BeginCapture(num_inputs);
  try {
    body(inputs);
  } catch (...) {
    try {
      EndCapture(/*discard=*/true);
    } catch (const ValueError&) {
      // the discard's own message; the body's error is the one to see
    }
    throw;
  }
  return EndCapture(/*discard=*/false);
}

std::vector<Any> SessionImpl::BeginCapture(int num_inputs) {
  CheckLive("Capture");
  CheckNotCapturing("a nested Capture");
  DISCO_CHECK(num_inputs >= 0 && num_inputs <= protocol::kMaxGraphInputs, ValueError)
      << "Capture: " << num_inputs << " inputs (0 to " << protocol::kMaxGraphInputs << ")";
  recording_ = std::make_unique<Recording>();
  recording_->num_inputs = num_inputs;
  recording_->serial = next_capture_serial_;
  next_capture_serial_ = next_capture_serial_ < kMaxCaptureSerial ? next_capture_serial_ + 1 : 0;
  std::vector<Any> inputs;
  for (int i = 0; i < num_inputs; ++i) inputs.push_back(Placeholder(recording_->serial, i));
  return inputs;
}

Graph SessionImpl::EndCapture(bool discard) {
  DISCO_CHECK(recording_ != nullptr, ValueError) << "EndCapture without a capture";
  std::unique_ptr<Recording> rec = std::move(recording_);
  if (discard || !rec->discarded.empty()) {
    // Its lookups and Empty tensors were handed out as DRefs: install them, without a graph.
    InstallHandedOut(*rec);
    DISCO_THROW(ValueError) << "Capture: "
                            << (rec->discarded.empty() ? std::string("the body raised")
                                                       : "the body called " + rec->discarded +
                                                             ", which cannot be recorded")
                            << "; the capture was discarded";
  }
  const int64_t id = next_graph_id_++;
  Install(*rec, id);
  auto state = std::make_shared<GraphState>();
  state->session = generation();
  state->id = id;
  state->num_inputs = rec->num_inputs;
  state->num_calls = rec->num_calls;
  state->keep = std::move(rec->keep);
  return Graph(std::move(state));
}

DRef SessionImpl::RecordLookup(const std::string& name) {
  Recording& rec = *recording_;
  const int64_t reg = AllocateReg();
  rec.reserved.push_back(reg);
  rec.step_offsets.push_back(rec.steps.size());
  rec.steps.insert(rec.steps.end(), {Any(int64_t{0}), Any(reg), Any(name)});
  ++rec.num_steps;
  rec.names[reg] = name;
  DRef out = MakeDRef(reg);
  rec.keep.push_back(out);
  return out;
}

DRef SessionImpl::RecordCall(const DRef& func, const Any* args, size_t num_args) {
  Recording& rec = *recording_;
  DISCO_CHECK(func.defined(), ValueError) << "CallPacked with an empty function DRef";
  DISCO_CHECK(num_args <= protocol::kMaxGraphCallArgs, ValueError)
      << "Capture: a recorded call takes at most " << protocol::kMaxGraphCallArgs
      << " arguments, not " << num_args;
  CheckOwnRefs(&func, args, num_args, "CallPacked");
  DISCO_CHECK(PlaceholderIndex(Any(func)) < 0, ValueError)
      << "Capture: a placeholder cannot be the function of a call";
  auto named = rec.names.find(func.reg_id());
  const std::string name =
      named != rec.names.end() ? named->second : worker0_.FunctionName(func.reg_id());
  bool collective = worker0_.HoldsCollective(func.reg_id());
  if (named != rec.names.end()) {
    Function f = Registry::Get(name);
    collective = f.defined() && f.get()->collective;
  }
  const bool at_install = name == "disco.empty";
  uint64_t mask = 0;
  std::vector<Any> encoded(args, args + num_args);
  for (size_t i = 0; i < num_args; ++i) {
    const int64_t input = PlaceholderIndex(args[i]);
    const DRef* ref = std::get_if<DRef>(&args[i].storage());
    DISCO_CHECK(!NestsPlaceholder(args[i]), ValueError)
        << "Capture: argument " << i << " holds a placeholder inside a tuple or dict; a "
        << "placeholder is substituted only as an argument of its own";
    if (at_install) {
      DISCO_CHECK(input < 0 && (ref == nullptr || rec.call_results.count(ref->reg_id()) == 0),
                  ValueError)
          << "Capture: Empty is allocated once, at install; its argument " << i
          << " cannot be a placeholder or the result of a recorded call";
    }
    if (input >= 0) {
      DISCO_CHECK(PlaceholderSerial(args[i]) == rec.serial && input < rec.num_inputs, ValueError)
          << "Capture: argument " << i << " is a placeholder of another capture";
      mask |= uint64_t{1} << i;
      encoded[i] = Any(input);
    } else if (ref != nullptr) {
      rec.keep.push_back(*ref);
    }
  }
  const int64_t reg = AllocateReg();
  rec.reserved.push_back(reg);
  rec.step_offsets.push_back(rec.steps.size());
  rec.steps.insert(
      rec.steps.end(),
      {Any(int64_t{at_install ? 1 : 2}), Any(reg), Any(func), Any(int64_t{collective ? 1 : 0}),
       Any(static_cast<int64_t>(mask)), Any(static_cast<int64_t>(num_args))});
  rec.steps.insert(rec.steps.end(), std::make_move_iterator(encoded.begin()),
                   std::make_move_iterator(encoded.end()));
  ++rec.num_steps;
  rec.keep.push_back(func);
  if (!at_install) {
    rec.call_results.insert(reg);
    ++rec.num_calls;
  }
  DRef out = MakeDRef(reg);
  rec.keep.push_back(out);  // the program writes it at every replay: never freed before the graph
  return out;
}

namespace {
// The install operands of a program: graph `id` (0: steps only), its input count, the registers
// to reserve, then `num_steps` steps.
std::vector<Any> InstallOperands(int64_t id, int num_inputs, const int64_t* reserved,
                                 size_t num_reserved, int64_t num_steps, const Any* steps,
                                 size_t num_step_operands) {
  std::vector<Any> ops;
  ops.reserve(5 + num_reserved + num_step_operands);
  ops.push_back(Any(id));
  ops.push_back(Any(static_cast<int64_t>(num_inputs)));
  ops.push_back(Any(static_cast<int64_t>(num_reserved)));
  for (size_t i = 0; i < num_reserved; ++i) ops.push_back(Any(reserved[i]));
  ops.push_back(Any(num_steps));
  ops.insert(ops.end(), steps, steps + num_step_operands);
  return ops;
}

// An error's message without its "[rank R/N host] " prefix, for a message that wraps it.
std::string WithoutRankPrefix(const std::string& what) {
  const size_t end = what.rfind("[rank ", 0) == 0 ? what.find("] ") : std::string::npos;
  return end == std::string::npos ? what : what.substr(end + 2);
}
}  // namespace

bool SessionImpl::SendInstall(const std::vector<Any>& ops, std::string* why) {
  uint64_t seq = 0;
  try {
    seq = Broadcast(protocol::Action::kInstallGraph, nullptr, 0, ops.data(), ops.size());
  } catch (const ValueError& e) {
    // Broadcast encodes and checks a frame before it sends any of it: no worker heard of it.
    *why = WithoutRankPrefix(e.what());
    return false;
  }
  FlushWorker0();
  worker0_.InstallGraph(seq, ops.data(), ops.size());
  return true;
}

void SessionImpl::Install(const Recording& rec, int64_t id) {
  std::string why;
  if (SendInstall(InstallOperands(id, rec.num_inputs, rec.reserved.data(), rec.reserved.size(),
                                  rec.num_steps, rec.steps.data(), rec.steps.size()),
                  &why)) {
    return;
  }
  // Over DISCO_MAX_FRAME_BYTES, or a value that cannot be sent (an empty DRef, an Object): what
  // the body was handed must exist all the same.
  InstallHandedOut(rec);
  DISCO_THROW(ValueError) << "Capture: the program cannot be installed (" << why
                          << "); the capture was discarded, its lookups and Empty tensors were "
                             "installed";
}

void SessionImpl::InstallHandedOut(const Recording& rec) {
  // The steps the body got DRefs from, in order: its lookups and Empty calls (kinds 0 and 1).
  std::vector<std::pair<size_t, size_t>> spans;  // [begin, end) in rec.steps
  std::vector<Any> steps;
  for (size_t i = 0; i < rec.step_offsets.size(); ++i) {
    const size_t begin = rec.step_offsets[i];
    const size_t end = i + 1 < rec.step_offsets.size() ? rec.step_offsets[i + 1] : rec.steps.size();
    if (std::get<int64_t>(rec.steps[begin].storage()) == protocol::GraphStep::kCall) continue;
    spans.emplace_back(begin, end);
    steps.insert(steps.end(), rec.steps.begin() + begin, rec.steps.begin() + end);
  }
  std::string why;
  if (SendInstall(InstallOperands(0, 0, rec.reserved.data(), rec.reserved.size(),
                                  static_cast<int64_t>(spans.size()), steps.data(), steps.size()),
                  &why)) {
    return;
  }
  // Still too large, or a value of an Empty call cannot be sent. The registers to reserve, in
  // order (a worker's register file grows one id at a time), in frames of kReserveChunk ids, far
  // below the smallest DISCO_MAX_FRAME_BYTES; then a frame per step.
  constexpr size_t kReserveChunk = 4096;
  for (size_t at = 0; at < rec.reserved.size(); at += kReserveChunk) {
    const size_t n = std::min(kReserveChunk, rec.reserved.size() - at);
    const bool sent =
        SendInstall(InstallOperands(0, 0, rec.reserved.data() + at, n, 0, nullptr, 0), &why);
    DISCO_ICHECK(sent) << "reserving " << n << " registers: " << why;
  }
  for (const auto& [begin, end] : spans) {
    if (!SendInstall(InstallOperands(0, 0, nullptr, 0, 1, rec.steps.data() + begin, end - begin),
                     &why)) {
      // Its register stays empty ("does not exist" at its first use); the others are installed.
      DISCO_LOG(WARN) << "Capture: a lookup or Empty call of a capture that was not installed "
                         "cannot be sent either: "
                      << why;
    }
  }
}

void SessionImpl::ReplayGraph(int64_t id, const std::vector<Any>& inputs) {
  CheckLive("Graph::Replay");
  CheckNotCapturing("Graph::Replay");
  CheckOwnRefs(nullptr, inputs.data(), inputs.size(), "Graph::Replay");
  for (size_t i = 0; i < inputs.size(); ++i) {
    DISCO_CHECK(PlaceholderIndex(inputs[i]) < 0 && !NestsPlaceholder(inputs[i]), ValueError)
        << "Graph::Replay: input " << i << " is or holds a placeholder of a capture";
  }
  Any head[1] = {Any(id)};
  const uint64_t seq =
      Broadcast(protocol::Action::kReplayGraph, head, 1, inputs.data(), inputs.size());
  FlushWorker0();
  worker0_.ReplayGraph(seq, id, inputs.data(), inputs.size());
}

void SessionImpl::FreeGraph(int64_t id) noexcept {
  if (is_shut_down()) return;
  worker0_.FreeGraph(id);
  pending_graph_frees_.push_back(id);
}

GraphState::~GraphState() {
  if (SessionBackend* s = LiveSession(session)) s->FreeGraph(id);
}

}  // namespace detail

void Graph::Replay(const std::vector<Any>& inputs) const {
  DISCO_CHECK(state_ != nullptr, ValueError) << "Replay of an empty Graph";
  DISCO_CHECK(static_cast<int>(inputs.size()) == state_->num_inputs, ValueError)
      << "Graph::Replay: graph " << state_->id << " takes " << state_->num_inputs
      << " input(s), got " << inputs.size();
  detail::SessionBackend* s = detail::LiveSession(state_->session);
  DISCO_CHECK(s != nullptr, ValueError)
      << "Graph::Replay: graph " << state_->id << " belongs to a session that has ended";
  trace::Span span(trace::Kind::kReplay, "Graph::Replay");
  span.set(0, state_->id);
  span.set(1, static_cast<int64_t>(state_->num_calls));
  s->ReplayGraph(state_->id, inputs);
}
int Graph::num_inputs() const { return state_ != nullptr ? state_->num_inputs : 0; }
size_t Graph::num_calls() const { return state_ != nullptr ? state_->num_calls : 0; }
int64_t Graph::id() const { return state_ != nullptr ? state_->id : 0; }

Graph Session::Capture(int num_inputs, std::function<void(const std::vector<Any>&)> body) {
  return impl_->Capture(num_inputs, body);
}

}  // namespace disco

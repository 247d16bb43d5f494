// The loop of worker ranks 1..N-1 (RunWorkerLoop, session/worker.h): each command frame from the
// controller's broadcast, checked and run on the rank's Worker.
#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ccl/context.h"
#include "protocol/serializer.h"
#include "session/config.h"
#include "session/mpi_transport.h"
#include "session/watchdog.h"
#include "session/worker.h"

namespace disco {

namespace {

template <typename T>
T Operand(const protocol::Command& cmd, size_t i, const char* name) {
  DISCO_CHECK(i < cmd.args.size(), ProtocolError)
      << protocol::ActionName(cmd.action()) << " command #" << cmd.header.seq << " lacks operand "
      << i << " (" << name << ")";
  std::optional<T> v = cmd.args[i].as<T>();
  DISCO_CHECK(v.has_value(), ProtocolError)
      << protocol::ActionName(cmd.action()) << " command #" << cmd.header.seq << ": operand " << i
      << " (" << name << ") is a " << cmd.args[i].type_name();
  return *v;
}

}  // namespace

namespace {
std::atomic<bool> g_corrupt_next_frame{false};
}  // namespace

void detail::TestCorruptNextFrame() { g_corrupt_next_frame.store(true); }

namespace {

// The loop of a worker rank: receives each command frame (inline part, the rest, bulk payloads),
// checks its sequence, and runs it on the rank's Worker.
class WorkerLoop {
 public:
  WorkerLoop(MpiTransport* transport, const SessionConfig& config, const WorkerInfo& info)
      : transport_(transport),
        info_(info),
        worker_(info,
                [this](const protocol::ErrorReport& report) {
                  protocol::EncodeErrorReport(&out_, report);
                  transport_->SendAsync(0, MpiTransport::kTagError, out_.data(), out_.size());
                }),
        inline_bytes_(static_cast<size_t>(config.inline_bytes)),
        max_payload_(config.max_payload()),
        posted_(inline_bytes_) {
    frame_.Reserve(inline_bytes_);
  }

  int Run() {
    for (;;) {
      const protocol::FrameHeader header = Receive();
      // The flight recorder and the watchdog see every command; call_packed records itself (with
      // its function's name), and parking and shutdown are waits, not work.
      const protocol::Action action = cmd_.action();
      const bool recorded =
          action != protocol::Action::kCallPacked && action != protocol::Action::kReplayGraph &&
          action != protocol::Action::kPark && action != protocol::Action::kShutdown;
      if (recorded) watchdog::Begin(header.seq, protocol::ActionName(action), "");
      if (action == protocol::Action::kShutdown) return Shutdown();
      Dispatch(header);
      if (recorded) watchdog::End();
      transport_->ProgressSends(/*wait=*/false);
      // The command's values own their data: a large frame or reply is not kept for the next one.
      frame_.ReleaseAbove(std::max(protocol::kKeepBufferBytes, inline_bytes_));
      out_.ReleaseAbove(protocol::kKeepBufferBytes);
    }
  }

 private:
  // The next command into cmd_: its frame, the part past the inline bytes, its bulk payloads.
  protocol::FrameHeader Receive() {
    frame_.Resize(inline_bytes_);
    if (transport_->posted()) {
      transport_->WaitPosted();
      std::memcpy(frame_.data(), posted_.data(), inline_bytes_);
    } else {
      transport_->Broadcast(frame_.data(), inline_bytes_);
    }
    if (g_corrupt_next_frame.exchange(false)) frame_.data()[0] ^= 0xFF;
    protocol::FrameHeader header =
        protocol::ParseHeader(frame_.data(), inline_bytes_, max_payload_);
    size_t total = protocol::kHeaderBytes + header.payload_bytes;
    if (total > inline_bytes_) {
      frame_.Resize(total);
      transport_->Broadcast(frame_.data() + inline_bytes_, total - inline_bytes_);
    }
    protocol::DecodeCommand(header, frame_.data(), total, max_payload_, &cmd_);
    for (const protocol::BulkSlot& b : cmd_.bulk) transport_->Broadcast(b.data, b.size);
    DISCO_CHECK(header.seq == expected_seq_, ProtocolError)
        << "desynchronised command stream on worker " << info_.worker_id << ": expected command #"
        << expected_seq_ << ", received #" << header.seq << " ("
        << protocol::ActionName(cmd_.action()) << "); this rank and the controller disagree on "
        << "the command sequence";
    ++expected_seq_;
    // Posted before the command runs: MPI forwards the next frame inside the collective's calls.
    if (header.flags & protocol::kFlagNextFrameNonblocking) {
      transport_->PostBroadcast(posted_.data(), inline_bytes_);
    }
    if (!cmd_.kills.empty()) worker_.KillRegs(cmd_.kills.data(), cmd_.kills.size());
    return header;
  }

  int Shutdown() {
    watchdog::ShuttingDown();
    ccl::Reset();
    transport_->ReduceSumU64(worker_.errors_reported());
    transport_->ProgressSends(/*wait=*/true);
    return static_cast<int>(transport_->BroadcastI64(0));
  }

  void Dispatch(const protocol::FrameHeader& header) {
    const protocol::Command& cmd = cmd_;
    switch (cmd.action()) {
      case protocol::Action::kShutdown:  // Run's
      case protocol::Action::kKillReg:
        break;
      case protocol::Action::kPark:
        transport_->ParkUntilWoken(kParkMaxSleepUs);
        break;
      case protocol::Action::kInstallGraph:
        worker_.InstallGraph(header.seq, cmd.args.data(), cmd.args.size());
        break;
      case protocol::Action::kReplayGraph:
        DISCO_CHECK(!cmd.args.empty(), ProtocolError)
            << "replay_graph command #" << header.seq << " has no graph id";
        worker_.ReplayGraph(header.seq, Operand<int64_t>(cmd, 0, "graph id"), cmd.args.data() + 1,
                            cmd.args.size() - 1);
        break;
      case protocol::Action::kFreeGraph:
        for (const Any& id : cmd.args) {
          std::optional<int64_t> g = id.as<int64_t>();
          DISCO_CHECK(g.has_value(), ProtocolError)
              << "free_graph command #" << header.seq << ": a graph id that is not an integer";
          worker_.FreeGraph(*g);
        }
        break;
      case protocol::Action::kGetGlobalFunc:
        worker_.GetGlobalFunc(header.seq, Operand<int64_t>(cmd, 0, "register"),
                              Operand<std::string>(cmd, 1, "name"));
        break;
      case protocol::Action::kCallPacked:
        DISCO_CHECK(cmd.args.size() >= 2, ProtocolError)
            << "call_packed command #" << header.seq << " has " << cmd.args.size()
            << " operands (needs at least 2)";
        worker_.CallPacked(header.seq, Operand<int64_t>(cmd, 0, "result register"),
                           Operand<DRef>(cmd, 1, "function").reg_id(), cmd.args.data() + 2,
                           cmd.args.size() - 2, (header.flags & protocol::kFlagCollective) != 0);
        break;
      case protocol::Action::kSyncWorker:
        SyncWorker();
        break;
      case protocol::Action::kDebugGetFromRemote:
        if (Operand<int64_t>(cmd, 1, "worker id") == info_.worker_id) {
          DebugGet(Operand<int64_t>(cmd, 0, "register"));
        }
        break;
      case protocol::Action::kDebugSetRegister:
        DebugSet(header);
        break;
    }
  }

  void SyncWorker() {
    int64_t target = Operand<int64_t>(cmd_, 0, "worker id");
    if (target == -1) {
      transport_->ReduceSumU64(worker_.errors_reported());
    } else if (target == info_.worker_id) {
      protocol::EncodeSyncAck(&out_, worker_.errors_reported());
      transport_->Send(0, MpiTransport::kTagReply, out_.data(), out_.size());
    }
  }

  // Register `reg` of this worker, sent to the controller.
  void DebugGet(int64_t reg) {
    const std::string where =
        "register " + std::to_string(reg) + " on worker " + std::to_string(info_.worker_id);
    Any value;
    protocol::DebugStatus status = worker_.DebugGetRegister(reg, &value);
    try {
      protocol::EncodeDebugValue(&out_, worker_.errors_reported(), status, value);
    } catch (const std::exception& e) {
      // A Function or Object cannot be sent; say so instead of ending the job.
      protocol::EncodeDebugValue(&out_, worker_.errors_reported(),
                                 protocol::DebugStatus::kUnsendable,
                                 Any(where + " cannot be read remotely: " + e.what()));
    }
    // A value larger than the controller takes (DISCO_MAX_FRAME_BYTES, the same on every rank)
    // or than one MPI message holds is refused here, in a small reply, not sent.
    const size_t limit = std::min<size_t>(max_payload_, INT_MAX - protocol::kHeaderBytes);
    if (out_.size() > limit) {
      size_t bytes = out_.size();
      protocol::EncodeDebugValue(
          &out_, worker_.errors_reported(), protocol::DebugStatus::kUnsendable,
          Any(where + " holds " + std::to_string(bytes) +
              " bytes, more than a debug read carries (" + std::to_string(limit) +
              " bytes: DISCO_MAX_FRAME_BYTES, and MPI's 2 GiB per message); gather it to "
              "worker 0 and use CopyFromWorker0, or read it in parts"));
    }
    transport_->Send(0, MpiTransport::kTagReply, out_.data(), out_.size());
  }

  void DebugSet(const protocol::FrameHeader& header) {
    int64_t reg = Operand<int64_t>(cmd_, 0, "register");
    if (Operand<int64_t>(cmd_, 1, "worker id") == info_.worker_id) {
      DISCO_CHECK(cmd_.args.size() == 3, ProtocolError)
          << "debug_set_register command #" << header.seq << " has " << cmd_.args.size()
          << " operands (needs 3)";
      worker_.DebugSetRegister(header.seq, reg, cmd_.args[2]);
    } else {
      worker_.TouchRegister(header.seq, reg);
    }
  }

  MpiTransport* transport_;
  const WorkerInfo& info_;
  protocol::ByteBuffer out_;  // before worker_: its error callback writes here
  Worker worker_;
  const size_t inline_bytes_;
  const size_t max_payload_;
  protocol::ByteBuffer frame_;
  // The next frame, when the last one asked for it by MPI_Ibcast (kFlagNextFrameNonblocking).
  std::vector<uint8_t> posted_;
  protocol::Command cmd_;
  uint64_t expected_seq_ = 1;
};

}  // namespace

int RunWorkerLoop(MpiTransport* transport, const SessionConfig& config, const WorkerInfo& info) {
  detail::SetThisWorker(info);
  WorkerLoop loop(transport, config, info);
  return loop.Run();
}

}  // namespace disco

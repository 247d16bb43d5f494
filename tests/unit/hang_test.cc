// The watchdog's hang verdict (session/hang.h): from every rank's state, the rank(s) that hold the
// others up and why, for each kind of hang the fault matrix (tests/mpi/run_hang_matrix.sh) makes
// for real.
#include "session/hang.h"

#include "core/wait_record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace disco {
namespace hang {
namespace {

using liveness::RankState;

RankState Idle(uint64_t seq, const char* fn = "f") {
  RankState s;
  s.seq = seq;
  s.flags = RankState::kRanCommand;
  std::strcpy(s.action, "call_packed");
  std::strcpy(s.function, fn);
  s.elapsed_ms = 3100;
  return s;
}
RankState Busy(uint64_t seq, const char* fn, uint32_t more = 0, int peer = -1) {
  RankState s = Idle(seq, fn);
  s.flags |= RankState::kBusy | more;
  s.peer = peer;
  return s;
}
constexpr uint32_t kColl = RankState::kCollective;
constexpr uint32_t kOp = RankState::kCollective | RankState::kInCollective;

std::vector<RankView> Views(std::vector<RankState> states) {
  std::vector<RankView> v;
  for (size_t r = 0; r < states.size(); ++r) {
    RankView view;
    view.answered = true;
    view.host = "node" + std::to_string(r / 2);
    view.state = states[r];
    v.push_back(view);
  }
  return v;
}

TEST(HangVerdictTest, AFunctionStuckOnOneRank) {
  // Rank 2 runs its function on; the others finished it and wait in the next collective.
  std::string v = Verdict(Views({Busy(8, "disco.allreduce", kOp), Busy(8, "disco.allreduce", kOp),
                                 Busy(7, "fault.spin"), Busy(8, "disco.allreduce", kOp)}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) is still running 'fault.spin' (command #7) for 3.1 s, "
            "outside any collective: its own code does not return; ranks 0, 1, 3 wait in "
            "'disco.allreduce' (command #8) for 3.1 s");
}

TEST(HangVerdictTest, ARankThatSkippedTheCollectiveWithItsPeerNamed) {
  std::string v = Verdict(
      Views({Busy(5, "c", kOp, 3), Busy(5, "c", kOp, 3), Busy(5, "c", kOp, 3), Idle(5, "c")}));
  EXPECT_EQ(v,
            "hang culprit: rank 3 (node1) finished 'c' (command #5) without joining its "
            "collective; ranks 0, 1, 2 wait in 'c' (command #5) for 3.1 s");
}

TEST(HangVerdictTest, ARankThatSkippedTheCollectiveWithNoPeerKnown) {
  // The same as seen by MPI's own collectives (no peer) and by a rank that went on since.
  std::string v = Verdict(Views({Busy(5, "c", kOp), Busy(5, "c", kOp), Idle(9, "g")}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) finished 'c' (command #5) without joining its "
            "collective (it has run to command #9 since); ranks 0, 1 wait in 'c' (command #5) for "
            "3.1 s");
}

TEST(HangVerdictTest, ARankInAForeignMpiCall) {
  // An MPI call of a worker function's own is a wait for the ranks not inside it.
  RankState stuck = Busy(4, "fault.foreign_barrier");
  std::strcpy(stuck.foreign_call, "MPI_Barrier");
  std::strcpy(stuck.foreign_caller, "disco_fault_program");
  std::string v = Verdict(Views({Idle(4), stuck, Idle(4)}));
  EXPECT_EQ(v,
            "hang culprits: ranks 0 (node0), 2 (node1) finished 'fault.foreign_barrier' (command "
            "#4) without joining the MPI_Barrier (called from outside disco (disco_fault_program)) "
            "that rank 1 is inside; rank 1 waits inside MPI_Barrier in 'fault.foreign_barrier' "
            "(command #4) for 3.1 s");
}

TEST(HangVerdictTest, ARankThatSkippedAnMpiCollectiveOfTheFunctionsOwn) {
  // mpi4py's allreduce in a worker function, which rank 2 skips: ranks 0 and 1 are innocent.
  RankState in = Busy(5, "user.fn");
  std::strcpy(in.foreign_call, "MPI_Allreduce");
  std::strcpy(in.foreign_caller, "MPI.cpython-311.so");
  std::string v = Verdict(Views({in, in, Idle(5, "user.fn")}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) finished 'user.fn' (command #5) without joining the "
            "MPI_Allreduce (called from outside disco (MPI.cpython-311.so)) that ranks 0, 1 are "
            "inside; ranks 0, 1 wait inside MPI_Allreduce in 'user.fn' (command #5) for 3.1 s");
  // ... or runs on before it.
  v = Verdict(Views({in, in, Busy(5, "user.fn")}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) is still running 'user.fn' (command #5) for 3.1 s, "
            "outside any collective: its own code does not return; ranks 0, 1 wait inside "
            "MPI_Allreduce in 'user.fn' (command #5) for 3.1 s");
}

TEST(HangVerdictTest, AStuckRankHoldsUpTheSyncAfterIt) {
  // Rank 3 runs command #3 on; the controller's SyncAll (command #4, a reduction over every rank)
  // waits on rank 1, which waits for rank 3; rank 2 passed its part of it. Only rank 3 is named.
  RankState controller = Idle(3, "p.spin_on");
  controller.flags |= RankState::kController;
  std::strcpy(controller.activity, "the controller waits in SyncAll");
  RankState sync = Busy(4, "", RankState::kInMpi);
  std::strcpy(sync.action, "sync_worker");
  RankState synced = Idle(4, "");
  std::strcpy(synced.action, "sync_worker");
  std::string v = Verdict(Views({controller, sync, synced, Busy(3, "p.spin_on")}));
  EXPECT_EQ(v,
            "hang culprit: rank 3 (node1) is still running 'p.spin_on' (command #3) for 3.1 s, "
            "outside any collective: its own code does not return; rank 1 waits in sync_worker "
            "(command #4) for 3.1 s");
}

TEST(HangVerdictTest, AQuoteInANameCannotPassForVerdictText) {
  std::string v = Verdict(Views({Idle(2), Busy(3, "it's (command #1); rank 0")}));
  EXPECT_EQ(v,
            "hang culprit: rank 1 (node0) is still running 'it\\'s (command #1); rank 0' (command "
            "#3) for 3.1 s, outside any collective: its own code does not return");
}

// UTF-8 names stay readable in the verdict (also through a datagram); a newline, a terminal's
// escape or a character cut short in a name still cannot split or forge the line.
TEST(HangVerdictTest, Utf8NamesStayReadableAndTheVerdictOneLine) {
  std::vector<RankView> views =
      Views({Idle(2), Busy(3, "répétition.函数"), Busy(3, "a\nb\x1b[0m")});
  views[2].host = "nœud\n";
  std::string v = Verdict(views);
  EXPECT_NE(v.find("rank 1 (node0) is still running 'répétition.函数' (command #3)"),
            std::string::npos)
      << v;
  EXPECT_NE(v.find("rank 2 (nœud\\x0a) is still running 'a?b?[0m' (command #3)"), std::string::npos)
      << v;
  EXPECT_EQ(v.find('\n'), std::string::npos) << v;
  EXPECT_EQ(v.find('\x1b'), std::string::npos) << v;
  RankState cut = Busy(3, "");
  std::strcpy(cut.function, "函数");
  cut.function[5] = '\0';  // "数" cut short
  liveness::MakePrintable(&cut);
  EXPECT_STREQ(cut.function, "函??");
}

TEST(HangVerdictTest, AControllerInAForeignMpiCall) {
  RankState controller = Idle(2);
  controller.flags |= RankState::kController;
  std::strcpy(controller.foreign_call, "MPI_Barrier");
  std::strcpy(controller.foreign_caller, "MPI.cpython-311-x86_64-linux-gnu.so");
  std::string v = Verdict(Views({controller, Idle(2), Idle(2)}));
  EXPECT_EQ(v,
            "hang culprit: rank 0 (node0) is inside MPI_Barrier, called from outside disco "
            "(MPI.cpython-311-x86_64-linux-gnu.so) in the controller's own code, with no command "
            "running: the other ranks wait in disco and never join it");
}

TEST(HangVerdictTest, ARankThatAnswersNothing) {
  std::vector<RankView> v = Views({Busy(6, "c", kOp), Busy(6, "c", kOp), RankState()});
  v[2].answered = false;
  EXPECT_EQ(Verdict(v),
            "hang culprit: rank 2 (node1) answered no state request: dead, stopped, or its node "
            "is off the network; ranks 0, 1 wait in 'c' (command #6) for 3.1 s");
}

TEST(HangVerdictTest, AnHdf5ReadThatDoesNotReturnWhileTheOthersWaitInMpi) {
  RankState reading = Busy(3, "disco.h5.load", kColl);
  std::strcpy(reading.activity, "HDF5 read of '/tmp/x.h5' dataset 'w'");
  RankState waiting = Busy(3, "disco.h5.load", kColl | RankState::kInMpi);
  std::strcpy(waiting.activity, "HDF5 read of '/tmp/x.h5' dataset 'w'");
  std::string v = Verdict(Views({waiting, reading, waiting}));
  EXPECT_EQ(v,
            "hang culprit: rank 1 (node0) is still running 'disco.h5.load' (command #3) for 3.1 s, "
            "HDF5 read of '/tmp/x.h5' dataset 'w', outside its collective, which the other "
            "ranks wait in; ranks 0, 2 wait in 'disco.h5.load' (command #3) for 3.1 s");
}

TEST(HangVerdictTest, AnHdf5ReadThatEveryOtherRankFinished) {
  RankState reading = Busy(3, "disco.h5.load", kColl);
  std::strcpy(reading.activity, "HDF5 read of '/tmp/x.h5' dataset 'w'");
  std::string v = Verdict(Views({Idle(3), Idle(3), reading}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) is still in 'disco.h5.load' (command #3) for 3.1 s, HDF5 "
            "read of '/tmp/x.h5' dataset 'w', which every other rank finished");
}

TEST(HangVerdictTest, ARankThatHasNotStartedTheCommand) {
  // Worker 0 runs its share of a command when the controller next enters disco; a controller
  // that computes in code of its own meanwhile leaves the collective short of rank 0.
  RankState controller = Idle(4);
  controller.flags |= RankState::kController;
  std::string v = Verdict(Views({controller, Busy(5, "c", kOp), Busy(5, "c", kOp)}));
  EXPECT_EQ(v,
            "hang culprit: rank 0 (node0) has not started 'c' (command #5) (its controller runs "
            "code of its own); ranks 1, 2 wait in 'c' (command #5) for 3.1 s");
}

TEST(HangVerdictTest, RanksThatWaitForEachOther) {
  std::string v = Verdict(Views({Busy(5, "p", kOp, 1), Busy(5, "p", kOp, 0)}));
  EXPECT_EQ(v,
            "hang culprits: ranks 0, 1 wait for each other (0 for 1 in 'p' (command #5), 1 for 0 "
            "in 'p' (command #5)): a deadlock");
}

TEST(HangVerdictTest, EveryRankInTheCollective) {
  std::string v = Verdict(Views({Busy(5, "c", kOp), Busy(5, "c", kOp)}));
  EXPECT_EQ(v,
            "hang culprit: no rank is missing: every rank is in 'c' (command #5) for 3.1 s; the "
            "collective itself does not complete (its transport, or the network between the "
            "ranks)");
}

TEST(HangVerdictTest, AReplayNamesTheCallItIsAt) {
  RankState waiting = Busy(5, "graph 1 call 1 'c'", kOp, 2);
  std::strcpy(waiting.action, "replay_graph");
  RankState done = Idle(5, "graph 1");
  std::strcpy(done.action, "replay_graph");
  std::string v = Verdict(Views({waiting, waiting, done}));
  EXPECT_EQ(v,
            "hang culprit: rank 2 (node1) finished graph 1 call 1 'c' (command #5) without "
            "joining its collective; ranks 0, 1 wait in graph 1 call 1 'c' (command #5) for 3.1 s");
}

TEST(HangVerdictTest, NothingStuck) {
  std::string v = Verdict(Views({Idle(5), Idle(5)}));
  EXPECT_EQ(v,
            "hang culprit: not found: no rank is stuck in a command or in an MPI call of its own "
            "(rank 0 idle after command #5; rank 1 idle after command #5)");
}

// Rank 0 answers nothing and workers 1 and 2 time out a poll apart: rank 2 (first) leaves the
// verdict to rank 1 although rank 1's command is a few milliseconds short of the timeout yet
// (the race CI met: both printed it).
TEST(VerdictPrinterTest, TheLowestWorkerThatTimesOutPrintsIt) {
  std::vector<RankView> v = Views({Busy(8, "c", kOp), Busy(8, "c", kOp), Busy(8, "c", kOp)});
  v[0].answered = false;
  v[1].state.elapsed_ms = 3970;
  v[2].state.elapsed_ms = 4010;
  int64_t wait_ms = -1;
  EXPECT_EQ(VerdictPrinterBelow(v, 2, 4000, 3000, &wait_ms), 1);
  EXPECT_EQ(wait_ms, 30);
  EXPECT_EQ(VerdictPrinterBelow(v, 1, 4000, 3000, &wait_ms), -1);  // rank 1 prints
  v[1].state.elapsed_ms = 4500;
  EXPECT_EQ(VerdictPrinterBelow(v, 2, 4000, 3000, &wait_ms), 1);
  EXPECT_EQ(wait_ms, 0);
}

TEST(VerdictPrinterTest, AWorkerFarFromItsTimeoutOrSilentOrIdleDoesNot) {
  std::vector<RankView> v = Views({Busy(8, "c", kOp), Busy(8, "c", kOp), Busy(8, "c", kOp)});
  v[0].answered = false;
  int64_t wait_ms = -1;
  v[1].state.elapsed_ms = 500;  // began long after: its watchdog is seconds away
  EXPECT_EQ(VerdictPrinterBelow(v, 2, 4000, 3000, &wait_ms), -1);
  v[1].state.elapsed_ms = 4100;
  v[1].answered = false;
  EXPECT_EQ(VerdictPrinterBelow(v, 2, 4000, 3000, &wait_ms), -1);
  v[1].answered = true;
  v[1].state.flags &= ~RankState::kBusy;  // idle: nothing of its own times out
  EXPECT_EQ(VerdictPrinterBelow(v, 2, 4000, 3000, &wait_ms), -1);
}

TEST(WaitRecordTest, ActivitiesLastAsLongAsTheirScope) {
  char out[wait_record::kActivityBytes];
  wait_record::Activity(out, sizeof out);
  EXPECT_STREQ(out, "");
  {
    wait_record::Doing doing("the controller waits in SyncAll");  // a literal: by address
    wait_record::Activity(out, sizeof out);
    EXPECT_STREQ(out, "the controller waits in SyncAll");
    char small[8];
    wait_record::Activity(small, sizeof small);
    EXPECT_STREQ(small, "the con");
  }
  wait_record::Activity(out, sizeof out);
  EXPECT_STREQ(out, "");
  {
    const std::string long_text(200, 'x');
    wait_record::Doing doing(long_text + "\n");  // copied, cut, made printable
    wait_record::Activity(out, sizeof out);
    EXPECT_EQ(std::string(out), std::string(wait_record::kActivityBytes - 1, 'x'));
    wait_record::Clear();  // a command's end clears it
    wait_record::Activity(out, sizeof out);
    EXPECT_STREQ(out, "");
  }
  {
    wait_record::Doing doing(std::string("HDF5 read \x01"));
    wait_record::Activity(out, sizeof out);
    EXPECT_STREQ(out, "HDF5 read ?");
  }
}

TEST(StateDatagramTest, RoundTripsAndRefusesAlteredBits) {
  liveness::JobSecret secret = liveness::NewJobSecret();
  crypto::HmacSha256 mac(secret.secret, sizeof secret.secret);
  liveness::Packet p;
  p.kind = liveness::kState;
  p.sender = 2;
  p.receiver = 0;
  p.job_id = secret.job_id;
  p.nonce = 77;
  RankState s = Busy(9, "fault.spin", kOp, 3);
  std::strcpy(s.activity, "HDF5 read \x01\xff");
  uint8_t d[liveness::kStatePacketBytes];
  liveness::EncodeState(p, s, mac, d);
  liveness::Packet got;
  ASSERT_EQ(liveness::Decode(d, sizeof d, 0, 4, secret.job_id, mac, &got),
            liveness::Verdict::kAccepted);
  RankState back = liveness::DecodeState(d);
  EXPECT_EQ(back.seq, 9u);
  EXPECT_EQ(back.flags, s.flags);
  EXPECT_EQ(back.peer, 3);
  EXPECT_STREQ(back.function, "fault.spin");
  EXPECT_STREQ(back.activity, "HDF5 read ??");  // made printable
  // A state cut to a ping's size, or a ping grown to a state's, is malformed; a flipped payload
  // bit fails the MAC.
  EXPECT_EQ(liveness::Decode(d, liveness::kPacketBytes, 0, 4, secret.job_id, mac, &got),
            liveness::Verdict::kMalformed);
  for (size_t bit = 0; bit < sizeof d * 8; bit += 7) {
    uint8_t x[sizeof d];
    std::memcpy(x, d, sizeof x);
    x[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(liveness::Decode(x, sizeof x, 0, 4, secret.job_id, mac, &got),
              liveness::Verdict::kAccepted)
        << "bit " << bit;
  }
  uint8_t ping[liveness::kStatePacketBytes];
  p.kind = liveness::kPing;
  liveness::Encode(p, mac, ping);
  EXPECT_EQ(liveness::Decode(ping, sizeof ping, 0, 4, secret.job_id, mac, &got),
            liveness::Verdict::kMalformed);
  // Strings without their NUL come back cut.
  std::memset(d + liveness::kPacketBytes + 24, 'A', liveness::kStateBytes - 24);
  back = liveness::DecodeState(d);
  EXPECT_EQ(std::strlen(back.action), sizeof back.action - 1);
  EXPECT_EQ(std::strlen(back.foreign_caller), sizeof back.foreign_caller - 1);
}

}  // namespace
}  // namespace hang
}  // namespace disco

// collectives.cc: the frame's way down (MPI_Bcast, libnbc's MPI_Ibcast, the alternatives) and the
// MPI collectives disco's calls make, spelled out as point-to-point messages.
//
// Collectives: --collectives library calls MPI's (the real build, and the cross-check with disco
// under SMPI, whose own collectives are SMPI's); --collectives explicit (the default under SMPI)
// spells out with point-to-point calls what Open MPI 4.1's coll/tuned picks for these sizes
// (k-nomial radix-4 broadcast, recursive doubling, Rabenseifner) and libnbc's binomial MPI_Ibcast,
// whose forwarding happens whenever the rank is inside MPI (waits here go through WaitAll, which
// forwards the posted frame the moment it arrives). SimGrid's own k-nomial broadcast first builds
// SMP leader communicators in O(P^2), and its MPI_Ibcast is a flat send from the root, so neither
// serves beyond a few hundred ranks.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "rank.h"

namespace skel {
namespace {

// The MPI backend's choice of its ring (disco::ccl::UseRing); --before: the ring for every size
// from kRingMinBytes on.
bool UseRing(size_t bytes, int ranks) {
  if (g.before) return bytes >= kRingMinBytes;
  return disco::ccl::UseRing(bytes, ranks);
}

}  // namespace

// ---- libnbc's binomial MPI_Ibcast (Open MPI 4.1 for a 256-byte frame at more than 4 ranks;
// at 4 or fewer ranks the root sends to each rank: "linear") ----------------------------------
int Rank::IbcastParent() const {
  if (size_ <= 4) return 0;
  int r = 0;
  while ((2 << r) <= rank_) ++r;  // rank_ in [2^r, 2^(r+1))
  return rank_ - (1 << r);
}
std::vector<int> Rank::IbcastChildren() const {
  std::vector<int> c;
  if (size_ <= 4) {
    if (rank_ == 0)
      for (int i = 1; i < size_; ++i) c.push_back(i);
    return c;
  }
  for (int bit = 1; bit < size_; bit <<= 1) {
    if ((rank_ == 0 || rank_ < bit) && rank_ + bit < size_) c.push_back(rank_ + bit);
  }
  return c;
}
// Workers: post the receive of the next frame (MpiTransport::PostBroadcast).
void Rank::PostFrame() {
  posted_ = true;
  frame_arrived_ = false;
  if (!g.explicit_coll) {
    MPI_Ibcast(posted_frame_.b, g.inline_bytes, MPI_BYTE, 0, ctrl_, &frame_req_);
    return;
  }
  MPI_Irecv(posted_frame_.b, g.inline_bytes, MPI_BYTE, IbcastParent(), kIbcastTag, ctrl_,
            &frame_req_);
}
// libnbc's sends of a frame to this rank's children; their requests are appended to `reqs`.
void Rank::IbcastToChildren(const void* frame, std::vector<MPI_Request>* reqs) {
  for (int c : IbcastChildren()) {
    reqs->push_back(MPI_REQUEST_NULL);
    MPI_Isend(frame, g.inline_bytes, MPI_BYTE, c, kIbcastTag, ctrl_, &reqs->back());
  }
}
// The posted frame arrived: send it on to this rank's children (libnbc's next round).
void Rank::ForwardFrame() {
  frame_arrived_ = true;
  IbcastToChildren(posted_frame_.b, &forwards_);
}
void Rank::WaitPostedFrame() {  // MpiTransport::WaitPosted
  MPI_Wait(&frame_req_, MPI_STATUS_IGNORE);
  if (g.explicit_coll && !frame_arrived_) ForwardFrame();
  MPI_Waitall(static_cast<int>(forwards_.size()), forwards_.data(), MPI_STATUSES_IGNORE);
  forwards_.clear();
  posted_ = false;
}
// MPI_Waitall of `reqs` that, like Open MPI's progress engine inside any wait, forwards a posted
// frame the moment it arrives.
void Rank::WaitAll(int n, MPI_Request* reqs) {
  if (!posted_ || frame_arrived_ || !g.explicit_coll) {
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    return;
  }
  waiting_.assign(reqs, reqs + n);
  waiting_.push_back(frame_req_);
  for (;;) {
    bool left = false;
    for (int i = 0; i < n; ++i) left = left || waiting_[i] != MPI_REQUEST_NULL;
    if (!left) break;
    int index = MPI_UNDEFINED;
    MPI_Waitany(n + 1, waiting_.data(), &index, MPI_STATUS_IGNORE);
    if (index == n) ForwardFrame();
  }
  frame_req_ = waiting_[n];  // MPI_REQUEST_NULL once it completed
  for (int i = 0; i < n; ++i) reqs[i] = MPI_REQUEST_NULL;
}
void Rank::SendRecv(const void* out, int out_bytes, int to, void* in, int in_bytes, int from,
                    int tag, MPI_Comm comm) {
  MPI_Request r[2];
  MPI_Irecv(in, in_bytes, MPI_BYTE, from, tag, comm, &r[0]);
  MPI_Isend(out, out_bytes, MPI_BYTE, to, tag, comm, &r[1]);
  WaitAll(2, r);
}

// ---- the control transport ------------------------------------------------------------------
// The studied alternative for the issue rate: a binary tree (rank r forwards to 2r+1, 2r+2).
void Rank::BinaryTreeBcast(void* buf, int n, MPI_Comm comm) {
  if (rank_ > 0) MPI_Recv(buf, n, MPI_BYTE, (rank_ - 1) / 2, kBcastTag, comm, MPI_STATUS_IGNORE);
  MPI_Request reqs[2];
  int nreq = 0;
  for (int c = 2 * rank_ + 1; c <= 2 * rank_ + 2 && c < size_; ++c)
    MPI_Isend(buf, n, MPI_BYTE, c, kBcastTag, comm, &reqs[nreq++]);
  MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
}

void Rank::SendFrame(Frame* f) {  // rank 0: SessionImpl::Broadcast
  if (size_ == 1) return;
  if (next_nonblocking_ && !g.p2p && !g.binary_ctrl) {
    if (!g.explicit_coll) {
      MPI_Request r;
      MPI_Ibcast(f->b, g.inline_bytes, MPI_BYTE, 0, ctrl_, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
      std::vector<MPI_Request> r;
      IbcastToChildren(f->b, &r);
      MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE);
    }
  } else if (g.binary_ctrl) {
    BinaryTreeBcast(f->b, g.inline_bytes, ctrl_);
  } else if (!g.p2p) {
    Bcast(f->b, g.inline_bytes, ctrl_);
  } else {  // TVM model: the frame goes to each worker's channel in turn
    for (int w = 1; w < size_; ++w) MPI_Send(f->b, g.inline_bytes, MPI_BYTE, w, kTagFrame, ctrl_);
  }
  next_nonblocking_ = (f->flags() & kFlagNextFrameNonblocking) != 0;
}
void Rank::RecvFrame(Frame* f) {  // workers
  if (g.binary_ctrl) {
    BinaryTreeBcast(f->b, g.inline_bytes, ctrl_);
  } else if (!g.p2p) {
    Bcast(f->b, g.inline_bytes, ctrl_);
  } else {
    MPI_Recv(f->b, g.inline_bytes, MPI_BYTE, 0, kTagFrame, ctrl_, MPI_STATUS_IGNORE);
  }
}

// ---- collectives --------------------------------------------------------------------------
// MPI_Bcast from rank 0. Open MPI 4.1 for a 256-byte frame: "pipeline" (a chain, one segment)
// below 4 ranks, else k-nomial radix 4 (coll_tuned_bcast_knomial_radix).
void Rank::Bcast(void* buf, int n, MPI_Comm comm) {
  if (!g.explicit_coll) {
    MPI_Bcast(buf, n, MPI_BYTE, 0, comm);
    return;
  }
  if (size_ == 1) return;
  if (size_ < 4) {
    if (rank_ > 0) MPI_Recv(buf, n, MPI_BYTE, rank_ - 1, kBcastTag, comm, MPI_STATUS_IGNORE);
    if (rank_ + 1 < size_) MPI_Send(buf, n, MPI_BYTE, rank_ + 1, kBcastTag, comm);
    return;
  }
  const int radix = 4;
  int mask = 1;
  while (mask < size_) {  // receive from the parent
    if (rank_ % (radix * mask)) {
      int parent = rank_ / (radix * mask) * (radix * mask);
      MPI_Request r;
      MPI_Irecv(buf, n, MPI_BYTE, parent, kBcastTag, comm, &r);
      WaitAll(1, &r);
      break;
    }
    mask *= radix;
  }
  mask /= radix;
  MPI_Request reqs[96];
  int nreq = 0;
  while (mask > 0) {  // send to the children, farthest subtree first
    for (int r = 1; r < radix; ++r) {
      int child = rank_ + mask * r;
      if (child < size_) MPI_Isend(buf, n, MPI_BYTE, child, kBcastTag, comm, &reqs[nreq++]);
    }
    mask /= radix;
  }
  WaitAll(nreq, reqs);
}

// Recursive doubling (power-of-two P): log2(P) exchanges of the whole vector.
void Rank::RecursiveDoubling(float* recv, int64_t n, float* tmp, MPI_Comm comm) {
  for (int mask = 1; mask < size_; mask <<= 1) {
    int peer = rank_ ^ mask;
    SendRecv(recv, static_cast<int>(n * 4), peer, tmp, static_cast<int>(n * 4), peer, kAllreduceTag,
             comm);
    ReduceF32(recv, recv, tmp, n);
  }
}

// MPI_Allreduce below the ring's sizes. Open MPI 4.1 (4 KiB): "ring" below 4 ranks, recursive
// doubling at 8..2047; from 2048 "segmented ring" falls back to ring and then, count < P, to
// recursive doubling. `send == recv`: in place (MPI_IN_PLACE: no copy of send into recv first).
void Rank::SmallAllReduce(const float* send, float* recv, int64_t n, float* tmp, MPI_Comm comm) {
  const bool in_place = send == recv;
  if (g.explicit_coll && (size_ & (size_ - 1)) == 0 && n >= size_) {
    if (size_ < 4) {
      RingAllReduce(send, recv, n, comm);  // one segment per chunk: Open MPI's ring
    } else {
      if (!in_place) CopyBytes(recv, send, n * 4);
      RecursiveDoubling(recv, n, tmp, comm);
    }
    return;
  }
  MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                comm);
}

// The agreement round (Communicator::HostMax): MPI_Allreduce(MPI_IN_PLACE, n x int64, MAX).
// Open MPI 4.1 for 56 bytes: recursive doubling below 512 ranks, from 512 "nonoverlapping" =
// MPI_Reduce (binomial) + MPI_Bcast (k-nomial).
void Rank::HostMax(int64_t* v, int n) {
  if (g.explicit_coll && (size_ & (size_ - 1)) == 0) {
    if (size_ < 512) {
      int64_t in[kAgreementValues];
      for (int mask = 1; mask < size_; mask <<= 1) {
        int peer = rank_ ^ mask;
        SendRecv(v, n * 8, peer, in, n * 8, peer, kAllreduceTag, ccl_);
        for (int i = 0; i < n; ++i) v[i] = std::max(v[i], in[i]);
      }
    } else {
      int64_t out[kAgreementValues];
      MPI_Reduce(v, out, n, MPI_INT64_T, MPI_MAX, 0, ccl_);
      if (rank_ == 0) std::memcpy(v, out, n * 8);
      Bcast(v, n * 8, ccl_);
    }
    return;
  }
  MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, ccl_);
}

void Rank::Ensure(int64_t b) {
  if (bytes_ == b) return;
  if (send_) BigFree(send_), BigFree(recv_);
  if (tmp_) BigFree(tmp_);
  bytes_ = b;
  send_ = static_cast<float*>(BigAlloc(b));
  recv_ = static_cast<float*>(BigAlloc(b));
  tmp_ = nullptr;
}
float* Rank::Tmp() {
  if (tmp_ == nullptr) tmp_ = static_cast<float*>(BigAlloc(bytes_));
  return tmp_;
}

// ---- disco's ring (src/ccl/mpi/communicator.cc) --------------------------------------------
void Rank::ExchangeAndReduce(const float* out, int64_t out_count, int64_t in_count,
                             const float* mine, float* dst, int right, int left, MPI_Comm comm) {
  const int64_t seg = kSegmentBytes / 4;
  const int64_t nseg = (in_count + seg - 1) / seg;
  const int64_t nout = (out_count + seg - 1) / seg;
  if (slots_ == nullptr) slots_ = static_cast<float*>(BigAlloc(kWindow * seg * 4));
  requests_.assign(kWindow + nout, MPI_REQUEST_NULL);
  auto post = [&](int64_t k) {
    int64_t c = std::min(seg, in_count - k * seg);
    MPI_Irecv(slots_ + (k % kWindow) * seg, static_cast<int>(c * 4), MPI_BYTE, left, kRingTag, comm,
              &requests_[k % kWindow]);
  };
  for (int64_t k = 0; k < std::min<int64_t>(kWindow, nseg); ++k) post(k);
  for (int64_t k = 0; k < nout; ++k) {
    int64_t c = std::min(seg, out_count - k * seg);
    MPI_Isend(out + k * seg, static_cast<int>(c * 4), MPI_BYTE, right, kRingTag, comm,
              &requests_[kWindow + k]);
  }
  for (int64_t k = 0; k < nseg; ++k) {
    WaitAll(1, &requests_[k % kWindow]);
    int64_t c = std::min(seg, in_count - k * seg);
    ReduceF32(dst + k * seg, mine + k * seg, slots_ + (k % kWindow) * seg, c);
    if (k + kWindow < nseg) post(k + kWindow);
  }
  WaitAll(static_cast<int>(nout), requests_.data() + kWindow);
}
void Rank::RingAllReduce(const float* send, float* recv, int64_t n, MPI_Comm comm) {
  const int right = Mod(rank_ + 1), left = Mod(rank_ - 1);
  const int steps = size_ - 1;
  const int run = g.ring_cap > 0 ? std::min<int64_t>(steps, g.ring_cap) : steps;
  double t0 = Now();
  const float* outgoing = nullptr;
  int64_t out_count = 0;
  for (int s = 0; s < run; ++s) {
    int send_chunk = Mod(rank_ - s - 1), recv_chunk = Mod(rank_ - s - 2);
    if (s == 0) {
      outgoing = send + ChunkOffset(n, send_chunk);
      out_count = ChunkCount(n, send_chunk);
    }
    int64_t in_count = ChunkCount(n, recv_chunk);
    const float* mine = send + ChunkOffset(n, recv_chunk);
    float* dst = recv + ChunkOffset(n, recv_chunk);
    ExchangeAndReduce(outgoing, out_count, in_count, mine, dst, right, left, comm);
    outgoing = dst;
    out_count = in_count;
  }
  double t1 = Now();
  for (int s = 0; s < run; ++s) {
    int send_chunk = Mod(rank_ - s), recv_chunk = Mod(rank_ - s - 1);
    SendRecv(recv + ChunkOffset(n, send_chunk), static_cast<int>(ChunkCount(n, send_chunk) * 4),
             right, recv + ChunkOffset(n, recv_chunk),
             static_cast<int>(ChunkCount(n, recv_chunk) * 4), left, kRingTag, comm);
  }
  double t2 = Now();
  ring_measured_ = t2 - t0;
  ring_time_ = run == steps ? t2 - t0 : ((t1 - t0) + (t2 - t1)) * steps / run;
}

// Open MPI 4.1's large allreduce (coll/tuned "rabenseifner",
// ompi_coll_base_allreduce_intra_redscat_allgather): copy send into recv, reduce-scatter by
// recursive halving, allgather by recursive doubling. Power-of-two P; others call the library.
void Rank::RabenseifnerAllReduce(const float* send, float* recv, int64_t n, float* tmp) {
  const int p = size_;
  if (!g.explicit_coll || (p & (p - 1)) != 0 || n < p) {
    MPI_Allreduce(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, ccl_);
    return;
  }
  CopyBytes(recv, send, n * 4);
  int nsteps = 0;
  while ((1 << nsteps) < p) ++nsteps;
  std::vector<int64_t> rindex(nsteps), sindex(nsteps), rcount(nsteps), scount(nsteps);
  int64_t wsize = n;
  int step = 0;
  sindex[0] = rindex[0] = 0;
  for (int mask = 1; mask < p; mask <<= 1) {
    int dest = rank_ ^ mask;
    if (rank_ < dest) {
      rcount[step] = wsize / 2;
      scount[step] = wsize - rcount[step];
      sindex[step] = rindex[step] + rcount[step];
    } else {
      scount[step] = wsize / 2;
      rcount[step] = wsize - scount[step];
      rindex[step] = sindex[step] + scount[step];
    }
    SendRecv(recv + sindex[step], static_cast<int>(scount[step] * 4), dest, tmp + rindex[step],
             static_cast<int>(rcount[step] * 4), dest, 13, ccl_);
    ReduceF32(recv + rindex[step], tmp + rindex[step], recv + rindex[step], rcount[step]);
    if (step + 1 < nsteps) {
      rindex[step + 1] = rindex[step];
      sindex[step + 1] = rindex[step];
      wsize = rcount[step];
      ++step;
    }
  }
  step = nsteps - 1;
  for (int mask = p >> 1; mask > 0; mask >>= 1) {
    int dest = rank_ ^ mask;
    SendRecv(recv + rindex[step], static_cast<int>(rcount[step] * 4), dest, recv + sindex[step],
             static_cast<int>(scount[step] * 4), dest, 14, ccl_);
    --step;
  }
}

// The MPI backend's AllReduce: MPI's below the ring's sizes, else UseRing's choice.
void Rank::BackendAllReduce(int64_t bytes, bool in_place) {
  const int64_t n = bytes / 4;
  if (size_ == 1) return;
  if (static_cast<size_t>(bytes) < kRingMinBytes) {
    SmallAllReduce(in_place ? recv_ : send_, recv_, n, Tmp(), ccl_);
  } else if (UseRing(static_cast<size_t>(bytes), size_)) {
    RingAllReduce(send_, recv_, n, ccl_);
  } else {
    RabenseifnerAllReduce(send_, recv_, n, Tmp());
  }
}

}  // namespace skel

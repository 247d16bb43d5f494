#include "ccl/traced.h"

#include <string>
#include <utility>

#include "core/trace.h"

namespace disco {
namespace ccl {
namespace {

// The agreement round that precedes this thread's next operation: its start and length.
thread_local int64_t g_round_start = -1;
thread_local int64_t g_round_ns = 0;

class TracedCommunicator final : public Communicator {
 public:
  explicit TracedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {
    prefix_ = std::string(" ") + inner_->backend();
  }

  const char* backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  DLDevice device() const override { return inner_->device(); }
  bool SupportsDType(DLDataType dtype) const override { return inner_->SupportsDType(dtype); }
  MPI_Comm host_comm() const override { return inner_->host_comm(); }

  void AllReduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    Op o(this, "allreduce", send);
    inner_->AllReduce(send, recv, op);
  }
  void AllReduceQueued(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    Op o(this, "allreduce (in function)", send);
    inner_->AllReduceQueued(send, recv, op);
  }
  void AllGather(const Tensor& send, const Tensor& recv) override {
    Op o(this, "allgather", recv);
    inner_->AllGather(send, recv);
  }
  void ReduceScatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    Op o(this, "reduce_scatter", send);
    inner_->ReduceScatter(send, recv, op);
  }
  void Broadcast(const Tensor& send, const Tensor& recv, int root) override {
    Op o(this, "broadcast", recv);
    inner_->Broadcast(send, recv, root);
  }
  void Scatter(const Tensor& send, const Tensor& recv, int root) override {
    Op o(this, "scatter", recv);
    inner_->Scatter(send, recv, root);
  }
  void Gather(const Tensor& send, const Tensor& recv, int root) override {
    Op o(this, "gather", send);
    inner_->Gather(send, recv, root);
  }
  void Send(const Tensor& buffer, int peer) override {
    Op o(this, "send", buffer);
    inner_->Send(buffer, peer);
  }
  void Recv(const Tensor& buffer, int peer) override {
    Op o(this, "recv", buffer);
    inner_->Recv(buffer, peer);
  }
  void SendRecv(const Tensor& send, int dest, const Tensor& recv, int source) override {
    Op o(this, "sendrecv", dest >= 0 ? send : recv);
    inner_->SendRecv(send, dest, recv, source);
  }
  void Barrier() override {
    Op o(this, "barrier", Tensor());
    inner_->Barrier();
  }
  void HostMax(int64_t* values, int n) override {
    const int64_t start = trace::NowNs();
    inner_->HostMax(values, n);
    g_round_start = start;
    g_round_ns = trace::NowNs() - start;
  }

 private:
  // One operation's span; it takes the agreement round just before it.
  class Op {
   public:
    Op(TracedCommunicator* c, const char* what, const Tensor& sized)
        : c_(c), what_(what), bytes_(sized.defined() ? static_cast<int64_t>(sized.nbytes()) : 0) {
      start_ = g_round_start >= 0 ? g_round_start : trace::NowNs();
      round_ns_ = g_round_start >= 0 ? g_round_ns : 0;
      g_round_start = -1;
      g_round_ns = 0;
    }
    ~Op() {
      trace::Record(trace::Kind::kCollective, std::string(what_) + c_->prefix_, start_,
                    trace::NowNs(), bytes_, round_ns_);
    }
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;

   private:
    TracedCommunicator* c_;
    const char* what_;
    int64_t bytes_;
    int64_t start_ = 0;
    int64_t round_ns_ = 0;
  };

  std::unique_ptr<Communicator> inner_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<Communicator> Traced(std::unique_ptr<Communicator> inner) {
  if (inner == nullptr) return inner;
  return std::make_unique<TracedCommunicator>(std::move(inner));
}

}  // namespace ccl
}  // namespace disco

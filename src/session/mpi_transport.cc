#include "session/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <ctime>
#include <vector>

namespace disco {
namespace {
constexpr size_t kMaxChunk = size_t{1} << 30;
}

MpiTransport::MpiTransport(MPI_Comm world) : comm_(mpi::Comm::Dup(world)) {
  rank_ = comm_.rank();
  size_ = comm_.size();
}

void MpiTransport::Broadcast(void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    size_t chunk = n < kMaxChunk ? n : kMaxChunk;
    DISCO_MPI_CALL(MPI_Bcast(p, static_cast<int>(chunk), MPI_BYTE, 0, comm_.get()));
    p += chunk;
    n -= chunk;
  }
}

void MpiTransport::BroadcastNonblocking(void* data, size_t n) {
  MPI_Request req = MPI_REQUEST_NULL;
  DISCO_MPI_CALL(MPI_Ibcast(data, static_cast<int>(n), MPI_BYTE, 0, comm_.get(), &req));
  DISCO_MPI_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
}

void MpiTransport::PostBroadcast(void* data, size_t n) {
  DISCO_ICHECK(posted_ == MPI_REQUEST_NULL) << "a broadcast is already posted";
  DISCO_MPI_CALL(MPI_Ibcast(data, static_cast<int>(n), MPI_BYTE, 0, comm_.get(), &posted_));
}

void MpiTransport::WaitPosted() {
  if (posted_ != MPI_REQUEST_NULL) DISCO_MPI_CALL(MPI_Wait(&posted_, MPI_STATUS_IGNORE));
}

void MpiTransport::Send(int dest, int tag, const void* data, size_t n) {
  DISCO_CHECK(n <= static_cast<size_t>(INT_MAX), ValueError)
      << "a reply of " << n << " bytes exceeds MPI's 2 GiB message limit";
  DISCO_MPI_CALL(MPI_Send(data, static_cast<int>(n), MPI_BYTE, dest, tag, comm_.get()));
}

void MpiTransport::SendAsync(int dest, int tag, const void* data, size_t n) {
  DISCO_CHECK(n <= static_cast<size_t>(INT_MAX), ValueError)
      << "a message of " << n << " bytes exceeds MPI's 2 GiB message limit";
  sends_.Send(data, static_cast<int>(n), dest, tag, comm_.get());
}

void MpiTransport::ProgressSends(bool wait) { sends_.Progress(wait); }

int MpiTransport::Receive(int source, int tag, protocol::ByteBuffer* buf, size_t max_bytes) {
  MPI_Status status;
  DISCO_MPI_CALL(MPI_Probe(source, tag, comm_.get(), &status));
  int count = 0;
  DISCO_MPI_CALL(MPI_Get_count(&status, MPI_BYTE, &count));
  if (count < 0 || static_cast<size_t>(count) > max_bytes) {
    // Take the message anyway (whole: a truncated receive is not safe on every transport), so
    // that the next receive from this rank gets the next message, not this one.
    std::vector<uint8_t> drain(static_cast<size_t>(std::max(count, 0)));
    DISCO_MPI_CALL(MPI_Recv(drain.data(), std::max(count, 0), MPI_BYTE, status.MPI_SOURCE, tag,
                            comm_.get(), MPI_STATUS_IGNORE));
    DISCO_THROW(ProtocolError) << "a message of " << count << " bytes from rank "
                               << status.MPI_SOURCE << " exceeds the limit of " << max_bytes
                               << " bytes (it was received and dropped)";
  }
  buf->Resize(static_cast<size_t>(count));
  DISCO_MPI_CALL(MPI_Recv(buf->data(), count, MPI_BYTE, status.MPI_SOURCE, tag, comm_.get(),
                          MPI_STATUS_IGNORE));
  return status.MPI_SOURCE;
}

size_t MpiTransport::ReceiveSmall(int source, int tag, protocol::ByteBuffer* buf, size_t capacity) {
  buf->Resize(capacity);
  MPI_Status status;
  DISCO_MPI_CALL(MPI_Recv(buf->data(), static_cast<int>(capacity), MPI_BYTE, source, tag,
                          comm_.get(), &status));
  int count = 0;
  DISCO_MPI_CALL(MPI_Get_count(&status, MPI_BYTE, &count));
  buf->Resize(static_cast<size_t>(count));
  return static_cast<size_t>(count);
}

bool MpiTransport::Probe(int tag, int* source) {
  int flag = 0;
  MPI_Status status;
  DISCO_MPI_CALL(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_.get(), &flag, &status));
  if (flag) *source = status.MPI_SOURCE;
  return flag != 0;
}

uint64_t MpiTransport::ReduceSumU64(uint64_t mine) {
  uint64_t sum = 0;
  DISCO_MPI_CALL(MPI_Reduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, comm_.get()));
  return sum;
}

int64_t MpiTransport::BroadcastI64(int64_t value) {
  DISCO_MPI_CALL(MPI_Bcast(&value, 1, MPI_INT64_T, 0, comm_.get()));
  return value;
}

void MpiTransport::ParkUntilWoken(int max_sleep_us) {
  MPI_Request req = MPI_REQUEST_NULL;
  DISCO_MPI_CALL(MPI_Ibarrier(comm_.get(), &req));
  int sleep_us = 1;
  for (;;) {
    int done = 0;
    DISCO_MPI_CALL(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    ProgressSends(/*wait=*/false);
    timespec ts{0, static_cast<long>(sleep_us) * 1000};  // NOLINT(runtime/int)
    nanosleep(&ts, nullptr);
    sleep_us = std::min(sleep_us * 2, max_sleep_us);
  }
}

void MpiTransport::Unpark() {
  MPI_Request req = MPI_REQUEST_NULL;
  DISCO_MPI_CALL(MPI_Ibarrier(comm_.get(), &req));
  DISCO_MPI_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
}

}  // namespace disco

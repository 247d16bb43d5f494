// A request between the HTTP threads and the scheduler: the HTTP side queues a Job and reads its
// pieces as the scheduler pushes them (each decode step's new text), until the last piece or an
// error. A client that goes away cancels its job; the scheduler then drops its output.
#ifndef DISCO_MODELS_LLAMA_SERVER_JOB_H_
#define DISCO_MODELS_LLAMA_SERVER_JOB_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "llama/server/api.h"

namespace llm_server {

class Job {
 public:
  Job(CompletionRequest req, std::vector<int64_t> prompt)
      : req_(std::move(req)), prompt_(std::move(prompt)) {}

  const CompletionRequest& request() const { return req_; }
  const std::vector<int64_t>& prompt() const { return prompt_; }

  /// The scheduler's side: a piece of output (the last one has a finish reason), or an error that
  /// ends the job.
  void Push(Piece piece);
  void Fail(int status, const std::string& message);
  /// The HTTP side: waits for the next piece; false at the end (then error() says if it failed).
  bool Next(Piece* piece);
  /// Waits up to `wait` for a piece or the end; true when Next would not wait.
  bool Ready(std::chrono::milliseconds wait);
  /// The error that ended the job (status 0: none).
  int error_status() const;
  /// Whether the job ended in an error before it had any piece.
  bool FailedBeforeOutput() const;
  std::string error_message() const;

  /// The client went away: the scheduler stops producing for it.
  void Cancel();
  bool cancelled() const;
  /// Whether the job has had its last piece or an error.
  bool finished() const;

 private:
  const CompletionRequest req_;
  const std::vector<int64_t> prompt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> pieces_;
  bool done_ = false, cancelled_ = false, pushed_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

/// The waiting jobs, first come first served.
class JobQueue {
 public:
  /// False once closed (the server is stopping).
  bool Push(std::shared_ptr<Job> job);
  /// Waits until a job waits or Wake is called; takes up to `max` jobs (cancelled ones are
  /// dropped). Returns an empty list when woken without jobs.
  std::vector<std::shared_ptr<Job>> Take(size_t max);
  /// Take without waiting: the jobs waiting now, up to `max` (maybe none).
  std::vector<std::shared_ptr<Job>> TakeNow(size_t max);
  bool empty();
  /// Makes a waiting Take return.
  void Wake();
  /// Refuses new jobs and returns those waiting.
  std::vector<std::shared_ptr<Job>> Close();

 private:
  std::vector<std::shared_ptr<Job>> TakeLocked(size_t max);  // with mu_ held

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool closed_ = false, woken_ = false;
};

}  // namespace llm_server

#endif  // DISCO_MODELS_LLAMA_SERVER_JOB_H_

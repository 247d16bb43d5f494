#include "llama/server/job.h"

namespace llm_server {

void Job::Push(Piece piece) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  if (!piece.finish_reason.empty()) done_ = true;
  pushed_ = true;
  pieces_.push_back(std::move(piece));
  cv_.notify_all();
}

void Job::Fail(int status, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  error_status_ = status;
  error_message_ = message;
  cv_.notify_all();
}

bool Job::Next(Piece* piece) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pieces_.empty() || done_; });
  if (pieces_.empty()) return false;
  *piece = std::move(pieces_.front());
  pieces_.pop_front();
  return true;
}

bool Job::Ready(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, wait, [this] { return !pieces_.empty() || done_; });
}

bool Job::FailedBeforeOutput() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_status_ != 0 && !pushed_;
}

int Job::error_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_status_;
}

std::string Job::error_message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_message_;
}

void Job::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool Job::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool Job::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool JobQueue::Push(std::shared_ptr<Job> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  jobs_.push_back(std::move(job));
  cv_.notify_all();
  return true;
}

std::vector<std::shared_ptr<Job>> JobQueue::Take(size_t max) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !jobs_.empty() || woken_; });
  woken_ = false;
  return TakeLocked(max);
}

std::vector<std::shared_ptr<Job>> JobQueue::TakeNow(size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeLocked(max);
}

std::vector<std::shared_ptr<Job>> JobQueue::TakeLocked(size_t max) {
  std::vector<std::shared_ptr<Job>> out;
  while (!jobs_.empty() && out.size() < max) {
    std::shared_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    if (!job->cancelled()) out.push_back(std::move(job));
  }
  return out;
}

bool JobQueue::empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.empty();
}

void JobQueue::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  woken_ = true;
  cv_.notify_all();
}

std::vector<std::shared_ptr<Job>> JobQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  std::vector<std::shared_ptr<Job>> out(jobs_.begin(), jobs_.end());
  jobs_.clear();
  return out;
}

}  // namespace llm_server

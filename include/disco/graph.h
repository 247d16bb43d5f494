/// \file disco/graph.h
/// \brief Capture and replay: a recorded sequence of session calls that every worker keeps and
/// runs again on one small frame (Session::Capture; docs/graphs.md).
///
/// `Session::Capture(n, body)` runs `body` with `n` placeholders and records the session calls it
/// makes instead of sending them; the recording then travels once to every worker (the install
/// frame). `Graph::Replay(inputs)` sends one frame with the graph's id and the input values, and
/// every worker runs the recorded calls with the placeholders replaced. DRefs returned inside
/// `body` name the registers every replay writes (fixed buffers, as in CUDA graphs).
#ifndef DISCO_GRAPH_H_
#define DISCO_GRAPH_H_

#include <disco/any.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace disco {

namespace detail {
struct GraphState;
}  // namespace detail

/// A captured sequence of session calls. Copies share one worker-side program, freed on every
/// worker when the last copy goes.
class Graph {
 public:
  Graph() = default;
  /// Runs the recording on every worker with `inputs` substituted for the placeholders; async and
  /// ordered like CallPacked. A wrong count or an input of another session is a ValueError, and
  /// nothing is sent.
  void Replay(const std::vector<Any>& inputs = {}) const;
  int num_inputs() const;
  size_t num_calls() const;
  /// The graph's id on the workers (0 for an empty Graph).
  int64_t id() const;
  bool defined() const { return state_ != nullptr; }

  explicit Graph(std::shared_ptr<detail::GraphState> state) : state_(std::move(state)) {}
  const std::shared_ptr<detail::GraphState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::GraphState> state_;
};

}  // namespace disco

#endif  // DISCO_GRAPH_H_

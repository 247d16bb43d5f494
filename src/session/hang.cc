#include "session/hang.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "core/text.h"

namespace disco {
namespace hang {
namespace {

using liveness::RankState;

bool Busy(const RankState& s) { return (s.flags & RankState::kBusy) != 0; }
bool Collective(const RankState& s) { return (s.flags & RankState::kCollective) != 0; }
bool RanCommand(const RankState& s) { return (s.flags & RankState::kRanCommand) != 0; }
bool InOp(const RankState& s) { return (s.flags & RankState::kInCollective) != 0; }
bool InMpi(const RankState& s) { return (s.flags & RankState::kInMpi) != 0; }

std::string Seconds(uint64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

// "'fn' (command #7)", "graph 1 call 2 'fn' (command #7)" (the call a replay is at: its label
// quotes the function itself), "sync_worker (command #7)". A quote inside a name is escaped, so
// that a name cannot pass for verdict text.
std::string Where(const RankState& s) {
  const std::string fn = s.function;
  std::string what;
  if (fn.empty()) {
    what = s.action;
  } else if (std::string(s.action) == "replay_graph" && fn.rfind("graph ", 0) == 0) {
    what = fn;
  } else {
    what = text::Quoted(fn);
  }
  return what + " (command #" + std::to_string(s.seq) + ")";
}

std::string Ranks(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() > 1 ? "ranks " : "rank ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

struct Analysis {
  const std::vector<RankView>& ranks;
  std::vector<std::string> why;  // per rank: why it holds the others up ("": it does not)
  std::vector<int> waits_for;    // per rank: whom it waits for (-1: nobody known)
  std::map<uint64_t, std::vector<int>> waiters;  // by command: the ranks waiting in its collective

  explicit Analysis(const std::vector<RankView>& r)
      : ranks(r), why(r.size()), waits_for(r.size(), -1) {}

  int size() const { return static_cast<int>(ranks.size()); }
  const RankState& S(int r) const { return ranks[r].state; }
  bool InCommand(int r, uint64_t seq) const {
    return ranks[r].answered && Busy(S(r)) && S(r).seq == seq;
  }

  // Why rank `p` is not in the collective of command `seq` (`where` names it; `joined` says what
  // the others wait in: "its collective", "the MPI_Allreduce ... that ranks 0, 1 are inside").
  std::string Missing(int p, uint64_t seq, const std::string& where,
                      const std::string& joined) const {
    const RankState& s = S(p);
    if (Busy(s)) {
      return "is in " + Where(s) + " for " + Seconds(s.elapsed_ms) + ", not in " +
             (joined == "its collective" ? "the collective of " + where : joined);
    }
    if (RanCommand(s) && s.seq >= seq) {
      std::string line = "finished " + where + " without joining " + joined;
      if (s.seq > seq) line += " (it has run to command #" + std::to_string(s.seq) + " since)";
      return line;
    }
    std::string line = "has not started " + where;
    if (p == 0 && (s.flags & RankState::kController) != 0) {
      line += " (its controller runs code of its own";
      if (s.activity[0] != '\0') line += std::string(": ") + s.activity;
      line += ")";
    } else if (RanCommand(s)) {
      line += " (idle after command #" + std::to_string(s.seq) + ")";
    }
    return line;
  }

  // Whether rank `r`, busy in a command, is known to wait for other ranks there.
  bool Waiting(int r) const {
    const RankState& s = S(r);
    return waits_for[r] >= 0 || InOp(s) || InMpi(s) || s.foreign_call[0] != '\0';
  }

  void Run() {
    SettleUnsure(Classify());
    DropRanksStuckAlone();
    BlameTheMissing();
  }

  // Each rank's part from its own state: a culprit by itself (why), or a waiter in its command
  // (waiters, waits_for); the ranks busy in a collective command not known to wait in it.
  std::vector<int> Classify() {
    std::vector<int> unsure;  // busy in a collective command, not known to wait in it
    for (int r = 0; r < size(); ++r) {
      const RankState& s = S(r);
      if (!ranks[r].answered) {
        why[r] = "answered no state request: dead, stopped, or its node is off the network";
      } else if (s.foreign_call[0] != '\0' && Busy(s)) {
        // An MPI call of the worker function's own (mpi4py's, say): a wait for the ranks that
        // are not inside it, like a collective's.
        waiters[s.seq].push_back(r);
      } else if (s.foreign_call[0] != '\0') {
        why[r] = std::string("is inside ") + s.foreign_call + ", called from outside disco (" +
                 s.foreign_caller + ")" +
                 (r == 0 ? " in the controller's own code, with no command running" : "") +
                 ": the other ranks wait in disco and never join it";
      } else if (!Busy(s)) {
        continue;
      } else if (s.peer >= 0 && s.peer < size() && s.peer != r) {
        waits_for[r] = s.peer;
        waiters[s.seq].push_back(r);
      } else if (InOp(s) || InMpi(s)) {
        waiters[s.seq].push_back(r);
      } else if (!Collective(s)) {
        why[r] = "is still running " + Where(s) + " for " + Seconds(s.elapsed_ms);
        if (s.activity[0] != '\0') why[r] += std::string(", ") + s.activity;
        why[r] += ", outside any collective: its own code does not return";
      } else {
        unsure.push_back(r);
      }
    }
    return unsure;
  }

  // A rank in a collective command but in none of its collectives nor in MPI, while others wait
  // in that command: its own code (an HDF5 read, a computation) holds them up. With no one
  // waiting in the command, it is counted a waiter (a collective disco did not see, in which
  // the sample found no MPI frame).
  void SettleUnsure(const std::vector<int>& unsure) {
    for (int r : unsure) {
      const uint64_t seq = S(r).seq;
      bool others_wait = false;
      for (int q = 0; q < size() && !others_wait; ++q) {
        others_wait = q != r && InCommand(q, seq) && Waiting(q);
      }
      if (others_wait) {
        const RankState& s = S(r);
        why[r] = "is still running " + Where(s) + " for " + Seconds(s.elapsed_ms);
        if (s.activity[0] != '\0') why[r] += std::string(", ") + s.activity;
        why[r] += ", outside its collective, which the other ranks wait in";
      } else {
        waiters[seq].push_back(r);
      }
    }
  }

  // Ranks in a command that every other rank has finished, none of them known to wait (in a
  // collective, in MPI, for a peer): stuck themselves (inside an HDF5 read, say).
  void DropRanksStuckAlone() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      const uint64_t seq = it->first;
      std::vector<int>& in = it->second;
      bool others_done = true;
      for (int r = 0; r < size() && others_done; ++r) {
        if (InCommand(r, seq)) continue;
        others_done = ranks[r].answered && RanCommand(S(r)) && S(r).seq >= seq && !Busy(S(r));
      }
      const bool any_waits = std::any_of(in.begin(), in.end(), [&](int r) { return Waiting(r); });
      if (others_done && !any_waits && static_cast<int>(in.size()) < size()) {
        for (int r : in) {
          const RankState& s = S(r);
          why[r] = "is still in " + Where(s) + " for " + Seconds(s.elapsed_ms);
          if (s.activity[0] != '\0') why[r] += std::string(", ") + s.activity;
          why[r] += ", which every other rank finished";
        }
        it = waiters.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The ranks the waiters wait for: named by the transport; else, when no rank is stuck at or
  // before their command already (a rank that never reached it holds every later collective
  // up: commands run in order), every rank not in the command. Rank 0's controller waiting in
  // a disco call (SyncAll) takes part in the command it waits for without running it.
  void BlameTheMissing() {
    for (const auto& [seq, in] : waiters) {
      const std::string where = Where(S(in.front()));
      std::vector<int> foreign;
      for (int r : in) {
        if (S(r).foreign_call[0] != '\0') foreign.push_back(r);
      }
      std::string joined = "its collective";
      if (!foreign.empty()) {
        const RankState& f = S(foreign.front());
        joined = std::string("the ") + f.foreign_call + " (called from outside disco (" +
                 f.foreign_caller + ")) that " + Ranks(foreign) +
                 (foreign.size() > 1 ? " are" : " is") + " inside";
      }
      std::set<int> blamed;
      for (int r : in) {
        const int p = waits_for[r];
        // A peer that waits for a peer of its own is followed from there (a chain ends at a rank
        // that waits for nobody, or closes a cycle).
        if (p >= 0 && !InCommand(p, seq) && waits_for[p] < 0) blamed.insert(p);
      }
      const bool any_peer =
          std::any_of(in.begin(), in.end(), [&](int r) { return waits_for[r] >= 0; });
      bool explained = false;
      for (int q = 0; q < size() && !explained; ++q) {
        if (why[q].empty()) continue;
        explained = !ranks[q].answered || (Busy(S(q)) && S(q).seq <= seq);
      }
      if (blamed.empty() && !any_peer && !explained) {
        for (int p = 0; p < size(); ++p) {
          if (InCommand(p, seq)) continue;
          const RankState& s = S(p);
          const bool controller_waits = p == 0 && !Busy(s) &&
                                        (s.flags & RankState::kController) != 0 &&
                                        s.activity[0] != '\0' && (!RanCommand(s) || s.seq < seq);
          if (!controller_waits) blamed.insert(p);
        }
      }
      for (int p : blamed) {
        if (why[p].empty()) why[p] = Missing(p, seq, where, joined);
      }
    }
  }

  // Ranks that wait for each other in a cycle (each named by the transport), or an empty list.
  std::vector<int> Cycle() const {
    for (int start = 0; start < size(); ++start) {
      std::vector<int> path;
      std::set<int> seen;
      int r = start;
      while (r >= 0 && !seen.count(r) && why[r].empty()) {
        seen.insert(r);
        path.push_back(r);
        r = waits_for[r];
      }
      if (r >= 0 && seen.count(r)) {
        std::vector<int> cycle(std::find(path.begin(), path.end(), r), path.end());
        if (cycle.size() > 1) return cycle;
      }
    }
    return {};
  }
};

}  // namespace

std::string Verdict(const std::vector<RankView>& given) {
  if (given.empty()) return "hang culprit: not known (no rank's state)";
  // One line whatever the names hold (a function registered with a newline in its name); UTF-8
  // names stay readable.
  std::vector<RankView> ranks = given;
  for (RankView& v : ranks) {
    liveness::MakePrintable(&v.state);
    v.host = text::ForLogLine(v.host);
  }
  Analysis a(ranks);
  a.Run();
  std::vector<int> culprits;
  for (int r = 0; r < a.size(); ++r) {
    if (!a.why[r].empty()) culprits.push_back(r);
  }
  std::ostringstream os;
  if (culprits.empty()) {
    std::vector<int> cycle = a.Cycle();
    if (!cycle.empty()) {
      os << "hang culprits: " << Ranks(cycle) << " wait for each other (";
      for (size_t i = 0; i < cycle.size(); ++i) {
        os << (i ? ", " : "") << cycle[i] << " for " << a.waits_for[cycle[i]] << " in "
           << Where(a.S(cycle[i]));
      }
      os << "): a deadlock";
      return os.str();
    }
    if (!a.waiters.empty()) {
      const auto& [seq, in] = *a.waiters.begin();
      os << "hang culprit: no rank is missing: every rank is in " << Where(a.S(in.front()))
         << " for " << Seconds(a.S(in.front()).elapsed_ms)
         << "; the collective itself does not complete (its transport, or the network between "
            "the ranks)";
      return os.str();
    }
    os << "hang culprit: not found: no rank is stuck in a command or in an MPI call of its own "
          "(";
    for (int r = 0; r < a.size(); ++r) {
      const RankState& s = a.S(r);
      os << (r ? "; " : "") << "rank " << r << " "
         << (Busy(s)         ? "in " + Where(s)
             : RanCommand(s) ? "idle after command #" + std::to_string(s.seq)
                             : std::string("idle"));
    }
    os << ")";
    return os.str();
  }
  os << (culprits.size() > 1 ? "hang culprits: " : "hang culprit: ");
  // Ranks with the same reason in one clause: "ranks 2, 3 (node2) answered no ...".
  std::vector<std::vector<int>> groups;
  for (int r : culprits) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const std::vector<int>& g) {
      return a.why[g.front()] == a.why[r];
    });
    if (same == groups.end()) {
      groups.push_back({r});
    } else {
      same->push_back(r);
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::vector<int>& g = groups[i];
    const bool one_host =
        std::all_of(g.begin(), g.end(), [&](int r) { return ranks[r].host == ranks[g[0]].host; });
    os << (i ? "; " : "") << (g.size() > 1 ? "ranks " : "rank ");
    for (size_t k = 0; k < g.size(); ++k) {
      os << (k ? ", " : "") << g[k];
      if (!one_host && !ranks[g[k]].host.empty()) os << " (" << ranks[g[k]].host << ")";
    }
    if (one_host && !ranks[g[0]].host.empty()) os << " (" << ranks[g[0]].host << ")";
    os << " " << a.why[g[0]];
  }
  // Who waits, by command.
  for (const auto& [seq, in] : a.waiters) {
    std::vector<int> waiting;
    for (int r : in) {
      if (a.why[r].empty()) waiting.push_back(r);
    }
    if (waiting.empty()) continue;
    const RankState& s = a.S(waiting.front());
    os << "; " << Ranks(waiting) << (waiting.size() > 1 ? " wait" : " waits");
    if (s.foreign_call[0] != '\0') os << " inside " << s.foreign_call;
    os << " in " << Where(s) << " for " << Seconds(s.elapsed_ms);
  }
  return os.str();
}

int VerdictPrinterBelow(const std::vector<RankView>& ranks, int rank, int64_t timeout_ms,
                        int64_t margin_ms, int64_t* wait_ms) {
  for (int q = 1; q < rank && q < static_cast<int>(ranks.size()); ++q) {
    const liveness::RankState& st = ranks[q].state;
    if (!ranks[q].answered || (st.flags & liveness::RankState::kBusy) == 0) continue;
    const int64_t elapsed = static_cast<int64_t>(st.elapsed_ms);
    if (elapsed + margin_ms < timeout_ms) continue;
    *wait_ms = std::max<int64_t>(0, timeout_ms - elapsed);
    return q;
  }
  *wait_ms = 0;
  return -1;
}

}  // namespace hang
}  // namespace disco

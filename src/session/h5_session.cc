// The controller side of the HDF5 tensor store (disco/h5.h): plans of disco.h5.load commands and
// atomic sets of saves. The builtins themselves run on the workers, in the io layer (io/h5.h).
#include <disco/h5.h>
#include <disco/log.h>
#include <disco/session.h>
#include <unistd.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "io/h5.h"

namespace disco {

static_assert(h5::kReplicate == io::kReplicateAxis && h5::kAxisFromFile == io::kAxisFromFile,
              "the public and the worker side's shard_axis values must agree");

namespace h5 {

std::map<std::string, DRef> LoadTensors(Session& session, const std::string& path,
                                        const std::vector<LoadEntry>& plan, bool in_group,
                                        DLDevice device) {
  DRef load = session.GetGlobalFunc("disco.h5.load");
  const bool move = !memory::IsHost(device);
  DRef copy_to = move ? session.GetGlobalFunc("disco.copy_to") : DRef();
  std::map<std::string, DRef> out;
  for (const LoadEntry& e : plan) {
    DISCO_CHECK(out.count(e.name) == 0, ValueError)
        << "h5::LoadTensors: '" << e.name << "' appears twice in the plan";
    DRef shard = session.CallPacked(load, path, e.name, e.shard_axis, in_group);
    out[e.name] = move ? session.CallPacked(copy_to, shard, device) : shard;
  }
  if (!plan.empty()) session.CallPacked(session.GetGlobalFunc("disco.h5.load_done"), path);
  return out;
}

void SaveTensors(Session& session, const std::string& path, const std::vector<SaveEntry>& tensors,
                 bool in_group) {
  DRef save = session.GetGlobalFunc("disco.h5.save_in_place");
  DRef finish = session.GetGlobalFunc("disco.h5.finish");
  // A name of this save's own: two jobs saving the same path at once do not share a partial file.
  // Next to the file it replaces: through a symbolic link, in the directory of the link's target
  // (a rename cannot cross file systems).
  std::random_device random;
  const std::string partial = io::ResolveLinks(path, "h5::SaveTensors") + ".partial." +
                              std::to_string(getpid()) + "." + std::to_string(random() % 1000000);
  try {
    for (const SaveEntry& e : tensors) {
      session.CallPacked(save, partial, e.name, e.shard, e.shard_axis, in_group);
    }
    session.SyncAll();
    session.CallPacked(finish, partial, path);
    session.SyncAll();
  } catch (const RemoteError&) {
    // The partial file goes; the error the caller sees is the save's, whatever the clean-up meets.
    try {
      session.CallPacked(finish, partial, "");
      session.SyncAll();
    } catch (const Error& cleanup) {
      DISCO_LOG(WARN) << "h5::SaveTensors: removing '" << partial
                      << "' after a failed save: " << cleanup.what();
    }
    throw;
  }
}

}  // namespace h5

}  // namespace disco

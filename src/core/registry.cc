#include <disco/function.h>

#include "core/registry_errors.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

namespace disco {
namespace {

struct RegistryTable {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Registry>> entries;
  // Entries handed out for refused registrations inside a RegistrationErrors scope: never looked
  // up, kept so that the library's static references to them stay valid.
  std::vector<std::unique_ptr<Registry>> detached;
};

RegistryTable& Table() {
  // Leaked on purpose: registrations run during static initialization of any translation unit,
  // and lookups may run during static destruction of others.
  static RegistryTable* table = new RegistryTable();
  return *table;
}

thread_local core::RegistrationErrors* t_collector = nullptr;

}  // namespace

namespace core {
RegistrationErrors::RegistrationErrors() { t_collector = this; }
RegistrationErrors::~RegistrationErrors() { t_collector = nullptr; }
bool CollectingRegistrationErrors() { return t_collector != nullptr; }
void RecordRegistrationError(const std::string& message) {
  if (t_collector != nullptr) t_collector->errors_.push_back(message);
}
}  // namespace core

namespace detail {

void ThrowArgumentError(const std::string& func, const std::vector<std::string>& names,
                        size_t index, const char* expected, const Any& actual, const char* reason) {
  std::ostringstream os;
  os << (func.empty() ? "<anonymous>" : func) << ": argument " << index;
  if (index < names.size() && !names[index].empty()) os << " (" << names[index] << ")";
  os << ": expected " << expected << ", got " << actual.type_name();
  if (reason != nullptr) os << " " << actual.ToString() << " (" << reason << ")";
  throw TypeError(RankPrefix() + os.str());
}

void ThrowArityError(const std::string& func, size_t expected, size_t got) {
  throw TypeError(RankPrefix() + (func.empty() ? "<anonymous>" : func) + ": expected " +
                  std::to_string(expected) + " argument" + (expected == 1 ? "" : "s") + ", got " +
                  std::to_string(got));
}

}  // namespace detail

Registry& Registry::Register(const std::string& name, bool can_override) {
  DISCO_CHECK(!name.empty(), ValueError) << "a global function needs a non-empty name";
  RegistryTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.entries.find(name);
  if (it != table.entries.end()) {
    if (!can_override && core::CollectingRegistrationErrors()) {
      core::RecordRegistrationError("global function '" + name + "' is already registered");
      table.detached.push_back(std::unique_ptr<Registry>(new Registry(name)));
      return *table.detached.back();
    }
    DISCO_CHECK(can_override, ValueError)
        << "global function '" << name << "' is already registered";
    return *it->second;
  }
  auto entry = std::unique_ptr<Registry>(new Registry(name));
  Registry& ref = *entry;
  table.entries.emplace(name, std::move(entry));
  return ref;
}

Function Registry::Get(const std::string& name) {
  RegistryTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.entries.find(name);
  if (it == table.entries.end()) return Function();
  return it->second->func_;
}

std::vector<std::string> Registry::ListNames() {
  RegistryTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  std::vector<std::string> names;
  for (const auto& kv : table.entries) names.push_back(kv.first);
  return names;
}

bool Registry::Remove(const std::string& name) {
  RegistryTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  return table.entries.erase(name) > 0;
}

Registry& Registry::set_body_packed(PackedBody body) {
  DISCO_CHECK(body != nullptr, ValueError) << "global function '" << name_ << "': empty body";
  Function func = MakeFunction(std::move(body), name_);
  std::lock_guard<std::mutex> lock(Table().mu);
  func_ = std::move(func);
  return *this;
}

Registry& Registry::mark_collective() {
  DISCO_CHECK(func_.defined(), ValueError)
      << "global function '" << name_ << "': mark_collective before set_body";
  func_.get()->collective = true;
  return *this;
}

}  // namespace disco

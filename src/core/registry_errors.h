// Registration errors collected instead of thrown: a plugin's static initializers run inside
// dlopen, where an exception cannot pass (it would end the process). disco.load_library opens a
// library inside a RegistrationErrors scope and reports what was collected as an ordinary error.
#ifndef DISCO_CORE_REGISTRY_ERRORS_H_
#define DISCO_CORE_REGISTRY_ERRORS_H_

#include <string>
#include <vector>

namespace disco {
namespace core {

/// While alive, Registry::Register on this thread records "already registered" instead of
/// throwing, and hands back a detached entry whose body is never called. Not nestable.
class RegistrationErrors {
 public:
  RegistrationErrors();
  ~RegistrationErrors();
  RegistrationErrors(const RegistrationErrors&) = delete;
  RegistrationErrors& operator=(const RegistrationErrors&) = delete;
  /// The messages recorded so far.
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  friend void RecordRegistrationError(const std::string& message);
  std::vector<std::string> errors_;
};

/// True when a RegistrationErrors scope is active on this thread.
bool CollectingRegistrationErrors();
void RecordRegistrationError(const std::string& message);

}  // namespace core
}  // namespace disco

#endif  // DISCO_CORE_REGISTRY_ERRORS_H_

/// \file disco/function.h
/// \brief The packed calling convention, the global function registry and typed wrappers.
///
/// ```cpp
/// DISCO_REGISTER_GLOBAL("my.scale").set_body_typed(
///     [](disco::Tensor t, double factor) { ... }, {"tensor", "factor"});
/// DISCO_REGISTER_GLOBAL("my.sum").set_body_packed(
///     [](disco::Args args, disco::Any* rv) { *rv = args[0].cast<int64_t>() +
///     args[1].cast<int64_t>(); });
/// ```
/// A typed body converts each argument and fails with
/// `my.scale: argument 1 (factor): expected float, got string`.
#ifndef DISCO_FUNCTION_H_
#define DISCO_FUNCTION_H_

#include <disco/any.h>
#include <disco/error.h>

#include <array>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace disco {

/// A read-only view of a call's arguments.
class Args {
 public:
  Args(const Any* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  const Any& operator[](size_t i) const {
    DISCO_CHECK(i < size_, ValueError)
        << "argument " << i << " requested, but only " << size_ << " were passed";
    return data_[i];
  }
  const Any* begin() const { return data_; }
  const Any* end() const { return data_ + size_; }

 private:
  const Any* data_;
  size_t size_;
};

/// The packed body every Function has.
using PackedBody = std::function<void(const Args& args, Any* rv)>;

struct FunctionObj {
  std::string name;
  PackedBody body;
  /// Communicates with the other workers (a collective): worker 0 may run a call of it once the
  /// controller's next frame is out, so back-to-back collectives do not wait for frames.
  bool collective = false;
  /// The body writes *rv on every return that does not throw (set_body_typed's, and the packed
  /// form that returns an Any): a graph replay then writes its result into the register without
  /// clearing it first.
  bool writes_result = false;
};

/// Wraps a packed body into an (anonymous or named) Function.
Function MakeFunction(PackedBody body, std::string name = "");

template <typename... Ts>
Any Function::operator()(Ts&&... args) const {
  std::array<Any, sizeof...(Ts)> packed{Any(std::forward<Ts>(args))...};
  return CallPacked(packed.data(), packed.size());
}

namespace detail {

template <typename F>
struct FunctionTraits : FunctionTraits<decltype(&F::operator())> {};
template <typename R, typename... A>
struct FunctionTraits<R (*)(A...)> {
  using Return = R;
  using ArgTuple = std::tuple<A...>;
  static constexpr size_t kArity = sizeof...(A);
};
template <typename R, typename... A>
struct FunctionTraits<R(A...)> : FunctionTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) const> : FunctionTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...)> : FunctionTraits<R (*)(A...)> {};

/// Throws TypeError "<func>: argument <i> (<name>): expected <T>, got <actual>".
[[noreturn]] void ThrowArgumentError(const std::string& func, const std::vector<std::string>& names,
                                     size_t index, const char* expected, const Any& actual,
                                     const char* reason);
[[noreturn]] void ThrowArityError(const std::string& func, size_t expected, size_t got);

template <typename T>
T ConvertArgument(const std::string& func, const std::vector<std::string>& names, size_t index,
                  const Any& value) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Any>) {
    return value;
  } else {
    std::optional<D> r = value.as<D>();
    if (!r) {
      const char* reason = nullptr;
      if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool>) {
        if (value.type_code() == TypeCode::kInt) reason = "out of range";
      }
      ThrowArgumentError(func, names, index, TypeNameOf<D>::value, value, reason);
    }
    return std::move(*r);
  }
}

template <typename F, typename Tuple, size_t... I>
void InvokeTyped(const F& f, const std::string& name, const std::vector<std::string>& names,
                 const Args& args, Any* rv, std::index_sequence<I...>) {
  using R = typename FunctionTraits<F>::Return;
  if constexpr (std::is_void_v<R>) {
    f(ConvertArgument<std::tuple_element_t<I, Tuple>>(name, names, I, args[I])...);
    *rv = Any();
  } else {
    *rv = Any(f(ConvertArgument<std::tuple_element_t<I, Tuple>>(name, names, I, args[I])...));
  }
}

}  // namespace detail

/// One entry of the global registry. Obtain it with `DISCO_REGISTER_GLOBAL("name")`.
class Registry {
 public:
  /// Creates (or, with `can_override`, replaces) the entry `name`. Registering a name twice
  /// without `can_override` throws ValueError.
  static Registry& Register(const std::string& name, bool can_override = false);
  /// The function registered as `name`, or an undefined Function.
  static Function Get(const std::string& name);
  /// Every registered name, sorted.
  static std::vector<std::string> ListNames();
  /// Removes `name`; true when it existed.
  static bool Remove(const std::string& name);

  Registry& set_body_packed(PackedBody body);
  /// Accepts a body written as `Any(const Args&)` too.
  template <typename F, std::enable_if_t<std::is_invocable_r_v<Any, F, const Args&> &&
                                             !std::is_invocable_v<F, const Args&, Any*>,
                                         int> = 0>
  Registry& set_body_packed(F f) {
    set_body_packed(PackedBody([f](const Args& args, Any* rv) { *rv = f(args); }));
    func_.get()->writes_result = true;
    return *this;
  }
  /// `f` is any callable with a fixed signature; `param_names` (optional) name the parameters in
  /// conversion errors.
  template <typename F>
  Registry& set_body_typed(F f, std::vector<std::string> param_names = {}) {
    using Traits = detail::FunctionTraits<std::decay_t<F>>;
    using Tuple = typename Traits::ArgTuple;
    constexpr size_t kArity = Traits::kArity;
    std::string name = name_;
    set_body_packed(PackedBody(
        [f = std::move(f), name, names = std::move(param_names)](const Args& args, Any* rv) {
          if (args.size() != kArity) detail::ThrowArityError(name, kArity, args.size());
          detail::InvokeTyped<std::decay_t<F>, Tuple>(f, name, names, args, rv,
                                                      std::make_index_sequence<kArity>{});
        }));
    func_.get()->writes_result = true;  // InvokeTyped writes None for a void function
    return *this;
  }
  /// Marks the function as a collective (see FunctionObj::collective); call after set_body_*.
  Registry& mark_collective();
  const std::string& name() const { return name_; }

 private:
  explicit Registry(std::string name) : name_(std::move(name)) {}
  std::string name_;
  Function func_;
};

}  // namespace disco

#define DISCO_DETAIL_CONCAT2_(a, b) a##b
#define DISCO_DETAIL_CONCAT_(a, b) DISCO_DETAIL_CONCAT2_(a, b)

/// Registers a global function at static-initialization time:
/// `DISCO_REGISTER_GLOBAL("name").set_body_typed(f);`
#define DISCO_REGISTER_GLOBAL(Name)                                \
  [[maybe_unused]] static ::disco::Registry& DISCO_DETAIL_CONCAT_( \
      disco_registry_entry_, __COUNTER__) = ::disco::Registry::Register(Name)

#endif  // DISCO_FUNCTION_H_

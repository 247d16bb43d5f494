// The programs' command lines (CLI11): every option declared with a one-line description (--help
// lists them), numbers range-checked as they are parsed, and a bad command line said once.
//
// The programs run under mpirun on every rank with the same arguments: each rank parses them
// before MPI starts and reaches the same verdict, only rank 0 prints it, and every rank returns
// the same exit code (0 after --help, 2 after an error), so the job ends without MPI_Abort.
#ifndef DISCO_TOOLS_CLI_H_
#define DISCO_TOOLS_CLI_H_

// SimGrid's SMPI (bench/sim builds disco-bench with smpicxx) defines exit(x) as a macro in every
// translation unit, and CLI11's App has a member function named exit: the macro is hidden while
// CLI11 is read.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace disco {
namespace cli {

/// Whether this process is rank 0 of its job, or not in a job, by what its launcher set in the
/// environment (Open MPI, PMIx, MPICH's hydra, Slurm): known before MPI starts.
inline bool IsFirstRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v) == 0;
  }
  return true;
}

/// The settings every program's parser shares: an option given twice takes the last value (as
/// before CLI11); `--flag value` and `--flag=value` both work.
inline void Configure(CLI::App* app) {
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->set_help_flag("-h,--help", "print this help and exit");
  app->get_formatter()->column_width(36);
}

/// The sentence of a disco::Error's message, for a command line's error: without the rank prefix
/// ("[rank -/- host] ", before MPI starts) and the check's place (" [file.cc:12: check ...]").
inline std::string Sentence(std::string what) {
  if (what.rfind("[rank ", 0) == 0 && what.find("] ") != std::string::npos) {
    what.erase(0, what.find("] ") + 2);
  }
  // An internal error's " [file.cc:12: ...]" (a user's error has none).
  const size_t place = what.rfind(" [");
  if (place != std::string::npos && what.back() == ']' &&
      what.find(".cc:", place) != std::string::npos) {
    what.erase(place);
  }
  return what;
}

/// Says `message` about a bad command line, one line on stderr (rank 0 only), and returns 2. The
/// line points to the --help of the subcommand given, if any ("disco-bench call --help").
inline int Fail(const CLI::App& app, const std::string& message) {
  if (IsFirstRank()) {
    std::string command = app.get_name();
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    std::fprintf(stderr, "%s: %s (%s --help lists the options)\n", app.get_name().c_str(),
                 message.c_str(), command.c_str());
  }
  return 2;
}

/// Parses argv into `app` (configured with Configure). Returns -1 to go on, 0 after --help (the
/// help on stdout), or 2 after a bad command line (one line on stderr naming the option or value).
/// Only rank 0 prints.
inline int Parse(CLI::App* app, int argc, char** argv) {
  try {
    app->parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    // The help of the subcommand it follows, if any (App::help goes down to it).
    if (IsFirstRank()) std::fputs(app->help().c_str(), stdout);
    return 0;
  } catch (const CLI::ExtrasError&) {
    // The first word no option took, as it was written (CLI11's message lists them backwards).
    const std::vector<std::string> extra = app->remaining(true);
    const std::string word = extra.empty() ? std::string("?") : extra.front();
    return Fail(*app, (word[0] == '-' ? "unknown option '" : "unexpected argument '") + word + "'");
  } catch (const CLI::ParseError& e) {
    return Fail(*app, e.what());
  }
}

/// A check of an integer option's text: a whole decimal number (nothing after it) in [lo, hi];
/// the error names the value and the range. A transform: it rewrites the text in plain decimal, as
/// CLI11 would read "010" as octal.
inline CLI::Validator IntIn(int64_t lo, int64_t hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);  // NOLINT(runtime/int)
        if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || v < lo || v > hi) {
          return "'" + text + "' is not an integer in " + range;
        }
        text = std::to_string(v);
        return "";
      },
      "");
}

/// A check of a number option's text: a finite number in [lo, hi].
inline CLI::Validator NumberIn(double lo, double hi) {
  const std::string range = CLI::detail::to_string(lo) + ".." + CLI::detail::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0' || errno != 0 || !(v >= lo) ||
            !(v <= hi)) {
          return "'" + text + "' is not a number in " + range;
        }
        return "";
      },
      "");
}

/// A check of an output file's path, before the run that writes it: an existing path must be a
/// regular file (not a directory, FIFO or device: a FIFO nobody reads would block the write),
/// and a new one's directory must exist. `suffixes`: more files written beside it (PATH + each).
inline CLI::Validator OutputFile(std::vector<std::string> suffixes = {}) {
  suffixes.insert(suffixes.begin(), "");
  return CLI::Validator(
      [suffixes](std::string& text) -> std::string {
        for (const std::string& suffix : suffixes) {
          const std::string path = text + suffix;
          struct stat st;
          if (stat(path.c_str(), &st) == 0) {
            if (!S_ISREG(st.st_mode)) return "'" + path + "' exists and is not a regular file";
            continue;
          }
          const size_t slash = path.rfind('/');
          const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
          if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
            return "cannot write '" + path + "': no directory '" + dir + "'";
          }
        }
        return "";
      },
      "");
}

/// An integer option in [lo, hi] into `*value` (its initial value the default, shown by --help).
template <typename T>
CLI::Option* AddInt(CLI::App* app, const std::string& name, T* value, int64_t lo, int64_t hi,
                    const std::string& description) {
  return app->add_option(name, *value, description)
      ->transform(IntIn(lo, hi))
      ->type_name("INT")
      ->capture_default_str();
}

/// A number option in [lo, hi] into `*value`.
inline CLI::Option* AddNumber(CLI::App* app, const std::string& name, double* value, double lo,
                              double hi, const std::string& description) {
  return app->add_option(name, *value, description)
      ->check(NumberIn(lo, hi))
      ->type_name("NUMBER")
      ->capture_default_str();
}

/// A text option that is one of `choices` into `*value` (its initial value the default); --help
/// shows them as its type (`type_name`, when given, instead: for a list too long for the column).
inline CLI::Option* AddChoice(CLI::App* app, const std::string& name, std::string* value,
                              const std::vector<std::string>& choices,
                              const std::string& description, std::string type_name = "") {
  if (type_name.empty()) type_name = CLI::detail::join(choices, "|");
  CLI::Option* option = app->add_option(name, *value, description)
                            ->check(CLI::IsMember(choices).description(""))
                            ->type_name(type_name);
  if (!value->empty()) option->capture_default_str();
  return option;
}

}  // namespace cli
}  // namespace disco

#endif  // DISCO_TOOLS_CLI_H_

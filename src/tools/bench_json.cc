// disco-bench --json: a result table as {"metadata": {key: "value", ...}, "rows": [{column: cell,
// ...}, ...]}, written by nlohmann::json. A cell that is a JSON number literal (12, -0.5, 1e-3) is
// a number; a non-finite one (inf, -inf, nan, and a literal past double such as 1e999) is null;
// any other cell ("-", "0x1A", names) is a string. Columns keep their order.
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "tools/bench_common.h"

namespace disco {
namespace bench {
namespace {

// inf, -inf, +infinity, nan, -nan, nan(0x...) in any case: what printf writes for non-finite.
bool NonFinite(const std::string& cell) {
  std::string s = cell.substr(!cell.empty() && (cell[0] == '-' || cell[0] == '+') ? 1 : 0);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "inf" || s == "infinity" || s == "nan" || s.rfind("nan(", 0) == 0;
}

nlohmann::ordered_json Cell(const std::string& cell) {
  static const auto* kNumber = new std::regex(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  if (std::regex_match(cell, *kNumber)) {
    auto n = nlohmann::ordered_json::parse(cell, nullptr, /*allow_exceptions=*/false);
    return n.is_discarded() ? nlohmann::ordered_json() : n;  // past double: null
  }
  if (NonFinite(cell)) return nullptr;
  return cell;
}

}  // namespace

void Table::WriteJson(const std::string& path, const std::vector<std::string>& metadata) const {
  nlohmann::ordered_json doc = {{"metadata", nlohmann::ordered_json::object()},
                                {"rows", nlohmann::ordered_json::array()}};
  for (const std::string& m : metadata) {
    const size_t eq = m.find('=');
    doc["metadata"][m.substr(0, eq)] = eq == std::string::npos ? "" : m.substr(eq + 1);
  }
  for (const auto& r : rows_) {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    for (size_t c = 0; c < columns_.size(); ++c) {
      row[columns_[c]] = c < r.size() ? Cell(r[c]) : nlohmann::ordered_json();
    }
    doc["rows"].push_back(std::move(row));
  }
  std::ofstream f(path);
  DISCO_CHECK(f.good(), ValueError) << "disco-bench: cannot write '" << path << "'";
  // Bytes that are not UTF-8 (from an MPI's version string, say) become U+FFFD.
  f << doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  f.close();
  DISCO_CHECK(!f.fail(), ValueError) << "disco-bench: writing '" << path << "' failed";
}

}  // namespace bench
}  // namespace disco

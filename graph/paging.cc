#include "graph/paging.h"

#include "absl/strings/str_cat.h"

namespace doppler::graph {

std::string ToString(const Paging& p) {
  if (!p.paged()) return "";
  return absl::StrCat("paging page_rows=", p.page_rows, " table_pages=", p.table_pages,
                      " row_per_sequence=", p.row_per_sequence ? 1 : 0,
                      p.rows_share_sequences ? " rows_share_sequences=1" : "");
}

StepRows StepRows::Contiguous(int64_t pos, int64_t tokens) {
  StepRows r;
  r.pos_ = pos;
  r.tokens_ = tokens;
  return r;
}

absl::StatusOr<StepRows> StepRows::Paged(const Paging& paging, std::vector<int32_t> positions,
                                         std::vector<int32_t> tables) {
  if (!paging.paged() || paging.table_pages <= 0) return absl::InvalidArgumentError("step rows: the graph is not paged");
  const size_t tokens = positions.size();
  if (tokens == 0) return absl::InvalidArgumentError("step rows: no rows");
  const size_t want = (paging.row_per_sequence ? tokens : 1) * static_cast<size_t>(paging.table_pages);
  if (tables.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("step rows: ", tables.size(), " page-table entries for ", tokens,
                                                   " rows, want ", want));
  }
  for (size_t t = 0; t < tokens; ++t) {
    if (positions[t] < 0) return absl::InvalidArgumentError(absl::StrCat("step rows: row ", t, " has a negative position"));
    if (!paging.row_per_sequence && positions[t] != positions[0] + static_cast<int32_t>(t)) {
      return absl::InvalidArgumentError("step rows: one sequence's rows must have consecutive positions");
    }
  }
  StepRows r;
  r.paging_ = paging;
  r.pos_ = positions[0];
  r.tokens_ = static_cast<int64_t>(tokens);
  r.positions_ = std::move(positions);
  r.tables_ = std::move(tables);
  return r;
}

int64_t StepRows::cache_row(int64_t t, int64_t p, int64_t capacity) const {
  if (!paged()) return p % capacity;
  const int64_t table = paging_.row_per_sequence ? t : 0;
  const int64_t page = p / paging_.page_rows;
  if (page >= paging_.table_pages) return -1;
  const int64_t entry = tables_[static_cast<size_t>(table * paging_.table_pages + page)];
  if (entry < 0) return -1;
  const int64_t row = entry * paging_.page_rows + p % paging_.page_rows;
  return row < capacity ? row : -1;
}

}  // namespace doppler::graph

// Where a step's rows sit: each row's absolute position, and which cache row holds a position of
// the row's sequence.
//
// Without paging (Paging::page_rows == 0) a step is one sequence: row t is at position pos + t and
// a cache of C rows is a ring, position p in row p % C. With paging, every cache is a pool of pages
// of page_rows rows each, and a sequence's page table lists its pages in order: position p of the
// sequence lives in row table[p / page_rows] * page_rows + p % page_rows. A paged step is either one
// sequence (rows at pos + t, page table 0: a prefill chunk) or a row per sequence (row t at its own
// position, with page table t: a batched decode step). A step with a row per sequence may also let
// rows share a sequence (rows_share_sequences): then some rows are one sequence's consecutive
// positions, each with a copy of its table (a prompt's chunk beside the decode rows: a mixed step),
// and a row's attention reads keys that other rows of the step wrote. The host writes the positions and page
// tables before each step (runtime/page_pool.h decides them); kernels read them from the step
// block (codegen/step_rows.h), the interpreter from a StepRows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::graph {

struct Paging {
  int64_t page_rows = 0;    // rows of a page; 0: no paging
  int64_t table_pages = 0;  // entries of a page table: the most pages one sequence holds
  // Each row is its own sequence (its own position and page table); else the rows are one
  // sequence's consecutive positions.
  bool row_per_sequence = false;
  // With row_per_sequence: rows may be consecutive positions of one sequence (see above).
  bool rows_share_sequences = false;

  bool paged() const { return page_rows > 0; }
  bool operator==(const Paging&) const = default;
};

// "" without paging, else e.g. "paging page_rows=16 table_pages=256 row_per_sequence=1".
std::string ToString(const Paging& p);

// One step's rows, as the interpreter takes them.
class StepRows {
 public:
  // A step of one sequence without pages: `tokens` rows from position `pos`.
  static StepRows Contiguous(int64_t pos, int64_t tokens);
  // A paged step: `positions` (one a row) and `tables` (table_pages entries each: one table, or one
  // a row where paging.row_per_sequence). With one sequence the positions must be consecutive.
  static absl::StatusOr<StepRows> Paged(const Paging& paging, std::vector<int32_t> positions,
                                        std::vector<int32_t> tables);

  int64_t tokens() const { return tokens_; }
  int64_t position(int64_t t) const { return positions_.empty() ? pos_ + t : positions_[static_cast<size_t>(t)]; }
  // The row of a cache of `capacity` rows that holds position `p` of row t's sequence.
  int64_t cache_row(int64_t t, int64_t p, int64_t capacity) const;
  bool one_sequence() const { return !paging_.row_per_sequence; }
  bool paged() const { return paging_.paged(); }
  const Paging& paging() const { return paging_; }

 private:
  Paging paging_;
  int64_t pos_ = 0, tokens_ = 0;
  std::vector<int32_t> positions_, tables_;
};

}  // namespace doppler::graph

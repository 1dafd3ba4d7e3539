#include "codegen/step_rows.h"

#include "absl/strings/str_cat.h"

namespace doppler::codegen {

StepBlockLayout StepBlockLayoutOf(const graph::Paging& paging, int64_t bucket) {
  StepBlockLayout l;
  if (!paging.paged()) return l;
  l.tables = l.positions + static_cast<size_t>(bucket);
  l.table_count = paging.row_per_sequence ? static_cast<size_t>(bucket) : 1;
  l.words = l.tables + l.table_count * static_cast<size_t>(paging.table_pages);
  return l;
}

std::string StepRowsGlsl(const graph::Paging& paging, int64_t bucket) {
  if (!paging.paged()) {
    return "uint row_position(uint t) { return step.pos + t; }\n"
           "uint cache_row(uint t, uint p, uint cap) { return p % cap; }\n";
  }
  const StepBlockLayout l = StepBlockLayoutOf(paging, bucket);
  return absl::StrCat(
      "layout(std430, set = 0, binding = 0) readonly buffer StepRows { uint rows_head[", l.positions,
      "]; uint row_pos[", bucket, "]; uint page_table[]; } rows;\n",
      paging.row_per_sequence ? "uint row_position(uint t) { return rows.row_pos[t]; }\n"
                              : "uint row_position(uint t) { return step.pos + t; }\n",
      "const uint PAGE_ROWS = ", paging.page_rows, "u, TABLE_PAGES = ", paging.table_pages, "u;\n",
      "uint cache_row(uint t, uint p, uint cap) {\n  return rows.page_table[",
      paging.row_per_sequence ? "t * TABLE_PAGES + " : "", "p / PAGE_ROWS] * PAGE_ROWS + p % PAGE_ROWS;\n}\n");
}

}  // namespace doppler::codegen

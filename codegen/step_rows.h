// The step's rows on the GPU: each row's position and the cache row of a position of its sequence
// (graph/paging.h), as GLSL functions every kernel that needs them declares, and the layout of the
// step block the host writes them into.
//
// Without paging, the step block (binding 0) is codegen::StepParams: a row's position is pos + t and
// a cache of C rows is a ring. With paging, the block goes on after StepParams with the rows'
// positions (a word a row of the plan's bucket) and then the page tables (table_pages words each:
// one, or one a row where paging.row_per_sequence); kernels see the whole block a second time at
// binding 0 as `rows`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "graph/paging.h"

namespace doppler::codegen {

// Words of a step block, from its start.
struct StepBlockLayout {
  size_t positions = 2;  // the first row's position word (after n_tokens and pos)
  size_t tables = 2;     // the first page table's first word
  size_t words = 2;      // the block's size
  size_t table_count = 0;
};
StepBlockLayout StepBlockLayoutOf(const graph::Paging& paging, int64_t bucket);

// GLSL: `uint row_position(uint t)` and `uint cache_row(uint t, uint p, uint cap)` (the row of a
// cache of `cap` rows that holds position p of row t's sequence) for the graph's paging and the
// plan's bucket.
std::string StepRowsGlsl(const graph::Paging& paging, int64_t bucket);

}  // namespace doppler::codegen

// faults.h: the deliberate bugs `--inject NAME` switches on, each modelled on a
// real batching bug, and the check each one must trip (docs/DESIGN.md "Faults").
#pragma once
#include <string>
#include <vector>

namespace pb {

enum class Fault {
  kv_lens_max,              // staging: every stream gets the batch's largest kv_len
  staged_bytes_undercount,  // staging: staged_bytes short by 8 bytes per stream
  slot_off_by_one,          // staging: slots shifted by one within each stream
  block_table_swap,         // staging: streams 0 and 1 exchange block-table pointers
  cu_seqlens_off_by_one,    // staging: interior stream boundaries shifted by one token
  causal_off_by_one,        // backend: a token also sees the key after it
  mrope_hw_alias,           // staging: H and W positions alias T even for image tokens
  conv_state_bleed,         // backend: conv1d window reads the previous stream's tokens
  h_state_ptr_swap,         // caller: streams 0 and 1 exchange h_state pointers
  seq_len_ptr_stride,       // staging: seq_len_ptrs advance 4 bytes per stream, the values sit 8 apart
  table_guard_last_block,   // staging: each table's guard entry repeats its last block, not poison
  mrope_section_swap,       // caller: the kernel reads H positions for the W section and W for H
  grid_short_by_one,        // kernel (pb-host): attention and gdn cover batch_size - 1 streams
  gdn_state_race,           // kernel: a gdn work item reads a neighbour's state mid-update
  graph_baked_kv_len,       // kernel (pb-host): attention takes kv_len from the host copy baked in at capture
  batch_dependent_split,    // kernel (pb-host): attention's key tile chosen from the batch's total tokens
  out_row_past_end,         // kernel (pb-host): attention and gdn store one row past the last token's
  inputs_in_place,          // kernel (pb-host): rope writes the roped q into q, conv1d its output into x
};

struct FaultInfo {
  Fault fault;
  const char* name;         // the --inject spelling
  const char* must_trip;    // the check (see checks.h names) that must fire
  const char* description;
};

const std::vector<FaultInfo>& all_faults();
// True for a fault that lives inside our kernels: it reaches a kernel library
// through set_option("fault", name), and a library that refuses the key does not
// have it ("does not apply to library X"). The others are staging or caller faults
// the harness injects whatever the library.
bool fault_in_kernels(Fault f);
const FaultInfo& fault_info(Fault f);
// The fault's check is `graph`: it shows only in graph mode (RunOptions::graph), on the
// replay of a second batch, so a fault matrix must run it there.
bool fault_needs_graph(Fault f);
// Throws InputError naming the known faults when `name` is not one.
Fault parse_fault(const std::string& name);

// A set of faults switched on for one run.
struct FaultSet {
  unsigned bits = 0;
  bool has(Fault f) const { return bits & (1u << static_cast<unsigned>(f)); }
  void add(Fault f) { bits |= 1u << static_cast<unsigned>(f); }
  bool empty() const { return bits == 0; }
};

}  // namespace pb

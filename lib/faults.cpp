// faults.cpp: the table of injectable faults (faults.h): --inject spelling, the check
// each must trip, and the real bug class it models. One entry per Fault, in enum order,
// so all_faults()[int(f)] is f's entry.
#include "faults.h"

#include "check_result.h"
#include "input_error.h"

namespace pb {

const std::vector<FaultInfo>& all_faults() {
  static const std::vector<FaultInfo> faults = {
      {Fault::kv_lens_max, "kv-lens-max", kCheckCausalBound,
       "Stages the batch's largest kv_len for every stream, so a short stream attends past its own end "
       "into poison (one batch-wide causal bound and block count instead of per-stream kv_lens)."},
      {Fault::staged_bytes_undercount, "staged-bytes-undercount", kCheckLayout,
       "Reports staged_bytes 8 bytes per stream short, so the caller places h_state_ptrs over live "
       "kv_lens metadata (an undercounted scratch cursor; scratch_guard trips too)."},
      {Fault::slot_off_by_one, "slot-off-by-one", kCheckKvWrite,
       "Shifts every stream's KV write slots by one position, so each key and value lands in its "
       "neighbour's cache slot (an off-by-one in block_table[p / block_size] * block_size + p % block_size)."},
      {Fault::block_table_swap, "block-table-swap", kCheckCausalBound,
       "Exchanges the block-table pointers of streams 0 and 1, so each stream reads pages it does not "
       "own (a mis-indexed per-stream pointer array)."},
      {Fault::cu_seqlens_off_by_one, "cu-seqlens-off-by-one", kCheckKvWrite,
       "Shifts the interior cu_seqlens boundaries by one token, so a boundary token is written and "
       "attended as part of the neighbouring stream (an inclusive/exclusive prefix-sum mix-up)."},
      {Fault::causal_off_by_one, "causal-off-by-one", kCheckCausalBound,
       "Lets each query also see the key one position after it, the last one reading past kv_len "
       "(a <= written where < belongs in the causal mask)."},
      {Fault::mrope_hw_alias, "mrope-hw-alias", kCheckPositions,
       "Stages the H and W positions as aliases of T even for image tokens, so vision tokens are "
       "rotated with text positions (the text-only aliasing shortcut kept under MRoPE)."},
      {Fault::conv_state_bleed, "conv-state-bleed", kCheckState,
       "Lets the conv1d window at the start of a stream read the previous stream's last tokens "
       "instead of its own conv_state (a varlen causal conv that ignores stream boundaries)."},
      {Fault::h_state_ptr_swap, "h-state-ptr-swap", kCheckState,
       "Exchanges the h_state pointers of streams 0 and 1, so each stream's recurrent state is read "
       "from and written to the other's storage (a mis-ordered per-stream state pointer array)."},
      {Fault::seq_len_ptr_stride, "seq-len-ptr-stride", kCheckMetadata,
       "Stages seq_len_ptrs with a 4-byte stride while the seq_len values sit 8 bytes apart, so every "
       "stream but the first points at the wrong word (sizeof(int32_t) where the slot size belongs). "
       "No kernel reads seq_len_ptrs today: only the metadata check can see it."},
      {Fault::table_guard_last_block, "table-guard-last-block", kCheckMetadata,
       "Pads each block table's guard entry with the stream's last block id instead of the poison "
       "block (repeat-last padding), so a kernel reading one entry past its table reads live KV "
       "instead of poison and the causal bound check goes blind."},
      {Fault::mrope_section_swap, "mrope-section-swap", kCheckPositions,
       "Gives the RoPE kernel the W positions for the H section and the H positions for the W "
       "section (a section table indexing the wrong positions array); the staged arrays are right, "
       "so the positions check must name the section from the roped keys."},
      {Fault::grid_short_by_one, "grid-short-by-one", kCheckNumeric,
       "Runs the attention and gdn kernels over batch_size - 1 streams, so the last stream's output "
       "rows are never written (a grid sized from a count that leaves out the last stream). Host "
       "backend only."},
      {Fault::gdn_state_race, "gdn-state-race", kCheckDeterminism,
       "Lets each gdn work item read its neighbour's state before updating its own, so what it reads "
       "depends on which ran first (a same-launch race between one CTA's state update and another's read)."},
      {Fault::graph_baked_kv_len, "graph-baked-kv-len", kCheckGraph,
       "Lets the attention kernel take each stream's kv_len from the metadata's host copy (kv_lens_host) "
       "instead of the device array: a per-batch value baked into the launch. Eager runs pass (the host copy "
       "is current); under --graph the replay on the bucket's second batch keeps the capture's lengths "
       "(flash-attention's seqlen_k baked into a graph). pb-host and pb-cuda (there a launch carries the "
       "host copy in its parameters); trips only with --graph."},
      {Fault::batch_dependent_split, "batch-dependent-split", kCheckInvariance,
       "Chooses attention's key tile (16 to 64 keys) from the batch's total tokens, so a stream's "
       "softmax is reduced in other pieces when its batch changes: its bits move, within tolerance (a "
       "split-KV heuristic fed a batch-wide size). Host backend only."},
      {Fault::out_row_past_end, "out-row-past-end", kCheckBufferGuard,
       "Lets the attention and gdn kernels store the batch's last output row twice, the second time one "
       "row further, past the end of out (a tile store that assumes out is padded past total_tokens). "
       "Every row the checks read is right. Host backend only."},
      {Fault::inputs_in_place, "inputs-in-place", kCheckBufferGuard,
       "Lets rope write the roped q back into q and conv1d its activations back into x (kernels that work "
       "in place on buffers the engine still needs; the contract makes them read-only). The first run is "
       "right; later runs read the overwritten inputs. Host backend only."},
  };
  return faults;
}

bool fault_in_kernels(Fault f) {
  return f == Fault::causal_off_by_one || f == Fault::conv_state_bleed || f == Fault::gdn_state_race ||
         f == Fault::grid_short_by_one || f == Fault::graph_baked_kv_len || f == Fault::batch_dependent_split ||
         f == Fault::out_row_past_end || f == Fault::inputs_in_place;
}

const FaultInfo& fault_info(Fault f) { return all_faults().at(static_cast<size_t>(f)); }

bool fault_needs_graph(Fault f) { return std::string(fault_info(f).must_trip) == kCheckGraph; }

Fault parse_fault(const std::string& name) {
  std::string known;
  for (const FaultInfo& info : all_faults()) {
    if (name == info.name) return info.fault;
    known += (known.empty() ? "" : ", ") + std::string(info.name);
  }
  throw InputError("unknown fault '" + name + "' (known: " + known + ")");
}

}  // namespace pb

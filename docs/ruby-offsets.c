/* Prints the offsets bpfprofiler's Ruby walker needs (docs/ruby-layouts.md).
   Compiled against a Ruby source tree and its Debian -dev package's arch
   ruby/config.h; -DRUBY_3_3 for 3.3 (see the build line there). */
#include "vm_core.h"
#include "iseq.h"
#include "method.h"
#include "symbol.h"
#include "ractor_core.h"
#include "internal/class.h"
#include "internal/string.h"
#include <stdio.h>
#include <stddef.h>
#define P(name, v) printf("%s=%zu\n", name, (size_t)(v))
#define O(t, f) P(#t "." #f, offsetof(t, f))
#define S(t) P("sizeof(" #t ")", sizeof(t))
int main(void) {
  O(rb_vm_t, ractor.set); O(rb_vm_t, ractor.cnt); O(rb_vm_t, ractor.main_ractor); O(rb_vm_t, ractor.main_thread);
  O(rb_ractor_t, threads.set); O(rb_ractor_t, threads.cnt); O(rb_ractor_t, threads.running_ec); O(rb_ractor_t, threads.main); O(rb_ractor_t, vmlr_node);
  O(rb_thread_t, lt_node); O(rb_thread_t, ractor); O(rb_thread_t, vm); O(rb_thread_t, ec);
#ifdef RUBY_3_3
  O(rb_thread_t, nt); O(struct rb_native_thread, thread_id); O(struct rb_native_thread, tid);
#else
  O(rb_thread_t, thread_id);
#endif
  O(rb_execution_context_t, vm_stack); O(rb_execution_context_t, vm_stack_size); O(rb_execution_context_t, cfp); O(rb_execution_context_t, thread_ptr);
  O(rb_control_frame_t, pc); O(rb_control_frame_t, sp); O(rb_control_frame_t, iseq); O(rb_control_frame_t, self); O(rb_control_frame_t, ep); O(rb_control_frame_t, block_code); O(rb_control_frame_t, jit_return); S(rb_control_frame_t);
  O(rb_iseq_t, flags); O(rb_iseq_t, body);
  O(struct rb_iseq_constant_body, iseq_size); O(struct rb_iseq_constant_body, iseq_encoded);
  O(struct rb_iseq_constant_body, location.pathobj); O(struct rb_iseq_constant_body, location.base_label); O(struct rb_iseq_constant_body, location.label); O(struct rb_iseq_constant_body, location.first_lineno);
  P("sizeof(location.first_lineno)", sizeof(((struct rb_iseq_constant_body*)0)->location.first_lineno));
  O(struct rb_iseq_constant_body, insns_info.body); O(struct rb_iseq_constant_body, insns_info.positions); O(struct rb_iseq_constant_body, insns_info.size); O(struct rb_iseq_constant_body, insns_info.succ_index_table);
  O(struct rb_iseq_constant_body, local_iseq); O(struct rb_iseq_constant_body, parent_iseq);
  S(struct iseq_insn_info_entry); O(struct iseq_insn_info_entry, line_no);
  O(struct RBasic, flags); O(struct RBasic, klass);
#ifdef RUBY_3_3
  O(struct RString, len); O(struct RString, as.heap.ptr); O(struct RString, as.embed.ary);
#else
  O(struct RString, as.heap.len); O(struct RString, as.heap.ptr); O(struct RString, as.embed.ary);
#endif
  P("RSTRING_NOEMBED", RSTRING_NOEMBED); P("RSTRING_EMBED_LEN_MASK(3.1)", 
#ifdef RUBY_3_3
  0
#else
  RSTRING_EMBED_LEN_MASK
#endif
  ); P("RSTRING_EMBED_LEN_SHIFT", 
#ifdef RUBY_3_3
  0
#else
  RSTRING_EMBED_LEN_SHIFT
#endif
  );
  P("T_MASK", RUBY_T_MASK); P("T_STRING", RUBY_T_STRING); P("T_ARRAY", RUBY_T_ARRAY); P("T_IMEMO", RUBY_T_IMEMO); P("T_CLASS", RUBY_T_CLASS); P("T_MODULE", RUBY_T_MODULE);
  O(struct RArray, as.heap.len); O(struct RArray, as.heap.ptr); O(struct RArray, as.ary); P("RARRAY_EMBED_FLAG", RARRAY_EMBED_FLAG); P("RARRAY_EMBED_LEN_MASK", RARRAY_EMBED_LEN_MASK); P("RARRAY_EMBED_LEN_SHIFT", RARRAY_EMBED_LEN_SHIFT);
  O(rb_callable_method_entry_t, flags); O(rb_callable_method_entry_t, defined_class); O(rb_callable_method_entry_t, def); O(rb_callable_method_entry_t, called_id); O(rb_callable_method_entry_t, owner);
  O(rb_method_definition_t, original_id); O(rb_method_definition_t, body);
  O(rb_symbols_t, last_id); O(rb_symbols_t, ids);
  P("RUBY_ID_SCOPE_SHIFT", RUBY_ID_SCOPE_SHIFT); P("tLAST_OP_ID", tLAST_OP_ID);
  P("VM_ENV_DATA_INDEX_ME_CREF", -VM_ENV_DATA_INDEX_ME_CREF); P("VM_ENV_DATA_INDEX_FLAGS", VM_ENV_DATA_INDEX_FLAGS);
  P("VM_FRAME_MAGIC_MASK", VM_FRAME_MAGIC_MASK); P("VM_FRAME_MAGIC_METHOD", VM_FRAME_MAGIC_METHOD); P("VM_FRAME_MAGIC_BLOCK", VM_FRAME_MAGIC_BLOCK); P("VM_FRAME_MAGIC_CLASS", VM_FRAME_MAGIC_CLASS); P("VM_FRAME_MAGIC_TOP", VM_FRAME_MAGIC_TOP); P("VM_FRAME_MAGIC_CFUNC", VM_FRAME_MAGIC_CFUNC); P("VM_FRAME_MAGIC_IFUNC", VM_FRAME_MAGIC_IFUNC); P("VM_FRAME_MAGIC_EVAL", VM_FRAME_MAGIC_EVAL); P("VM_FRAME_MAGIC_RESCUE", VM_FRAME_MAGIC_RESCUE); P("VM_FRAME_MAGIC_DUMMY", VM_FRAME_MAGIC_DUMMY);
  P("VM_FRAME_FLAG_FINISH", VM_FRAME_FLAG_FINISH); P("VM_FRAME_FLAG_CFRAME", VM_FRAME_FLAG_CFRAME); P("VM_FRAME_FLAG_BMETHOD", VM_FRAME_FLAG_BMETHOD);
  P("imemo_shift", RUBY_FL_USHIFT); P("imemo_iseq", imemo_iseq); P("imemo_ment", imemo_ment);
#ifdef RUBY_3_3
  P("RClass_classpath", offsetof(rb_classext_t, classpath) + sizeof(struct RClass));
  S(struct RClass);
#else
  O(struct RClass, ptr); O(rb_classext_t, iv_tbl);
#endif
  O(st_table, num_entries); O(st_table, bins); O(st_table, entries_start); O(st_table, entries_bound); O(st_table, entries);
  /* st_table_entry is st.c's own: {st_hash_t hash; st_data_t key, record;}, 24 bytes (hash 0, key 8, record 16). */
  return 0;
}

package ruby

// Layout are byte offsets and constants of CRuby's structs for one minor
// version (64-bit release builds as Debian builds them). Every number was
// computed with offsetof/sizeof by a C file compiled against the version's
// own vm_core.h, iseq.h, method.h, ractor_core.h (from the orig tarball of
// `apt-get source ruby3.1` 3.1.2-7+deb12u1 and `apt-get source ruby3.3`
// 3.3.8-2.2; no Debian patch touches these headers) and the arch's
// ruby/config.h of the ruby<version>-dev package: docs/ruby-layouts.md.
type Layout struct {
	// From the VM to a thread's execution context.
	VMMainThread uint32 // rb_vm_t.ractor.main_thread (rb_thread_t*)
	ThreadEC     uint32 // rb_thread_t.ec (rb_execution_context_t*)
	ECThread     uint32 // rb_execution_context_t.thread_ptr (rb_thread_t*)
	ThreadVM     uint32 // rb_thread_t.vm (rb_vm_t*)

	// rb_execution_context_t: the VM stack, in VALUEs, and the running
	// frame; control frames grow down from the stack's end.
	ECVMStack     uint32 // vm_stack (VALUE*)
	ECVMStackSize uint32 // vm_stack_size (size_t, in VALUEs)
	ECCFP         uint32 // cfp (rb_control_frame_t*)

	// rb_control_frame_t.
	CFPPC        uint32 // pc (const VALUE*)
	CFPIseq      uint32 // iseq (rb_iseq_t*)
	CFPEP        uint32 // ep (const VALUE*): ep[0] holds the frame's flags
	CFPJITReturn uint32 // jit_return (void*)
	CFPSize      uint32 // sizeof(rb_control_frame_t)

	// rb_iseq_t and rb_iseq_constant_body.
	IseqBody           uint32 // rb_iseq_t.body
	BodyIseqSize       uint32 // iseq_size (unsigned int, in VALUEs)
	BodyIseqEncoded    uint32 // iseq_encoded (VALUE*)
	BodyPath           uint32 // location.pathobj (String, or Array [path, realpath])
	BodyLabel          uint32 // location.label (String)
	BodyFirstLine      uint32 // location.first_lineno
	FirstLineFixnum    bool   // first_lineno is a VALUE holding a Fixnum (3.1), else an int
	BodyInsnsInfo      uint32 // insns_info.body (struct iseq_insn_info_entry*)
	BodyInsnsInfoSize  uint32 // insns_info.size (unsigned int)
	BodyInsnsSuccTable uint32 // insns_info.succ_index_table (struct succ_index_table*)
	BodyLocalIseq      uint32 // local_iseq (rb_iseq_t*): a block's method (or top) iseq
	InsnInfoSize       uint32 // sizeof(struct iseq_insn_info_entry); line_no (int) is its first field

	// Strings: struct RString.
	StringLenInHeader bool   // 3.3: len (long) at StringLen for embedded and heap strings alike
	StringLen         uint32 // RString.len (3.3) or as.heap.len (3.1)
	StringPtr         uint32 // as.heap.ptr (char*), when flags has StringNoEmbed
	StringEmbed       uint32 // as.embed.ary: an embedded string's bytes
	StringEmbedMask   uint64 // 3.1: (flags & mask) >> shift is an embedded string's length
	StringEmbedShift  uint8
	ArrayEmbedMask    uint64 // RARRAY_EMBED_LEN_MASK
	ArrayHeapPtr      uint32 // RArray.as.heap.ptr; an embedded array's elements are at ArrayEmbed

	// Classes: rb_callable_method_entry_t.owner (a class or module),
	// whose path (a String, nil until named) is at ClassPathAt of the
	// RClass: rb_classext_t.classpath, the classext following the RClass
	// (3.3); 0 where the path is the instance variable __classpath__
	// (3.1): in the st_table at ClassExtIvTbl of the rb_classext_t at
	// ClassExt of the RClass.
	MethodEntryOwner uint32
	ClassPathAt      uint32
	ClassExt         uint32 // RClass.ptr (rb_classext_t*), 3.1
	ClassExtIvTbl    uint32 // rb_classext_t.iv_tbl (st_table*: ID -> VALUE), 3.1
	// ClassAttachedAt is where a singleton class (flags FL_SINGLETON)
	// keeps the object it is attached to: rb_classext_t.as.singleton_class
	// .attached_object, RClass+128 in 3.3 (internal/class.h; the `mov
	// 0x80(%rdi)` of rb_class_attached_object in 3.3.8's libruby); 0 where
	// it is the instance variable __attached__ (3.1, class.c).
	ClassAttachedAt uint32

	// A method entry's definition (rb_method_entry_t.def) and, in it, a
	// Ruby method's iseq (rb_method_definition_t.body.iseq.iseqptr).
	MethodEntryDef uint32
	MethodDefIseq  uint32
	// MethodDefOriginalID is rb_method_definition_t.original_id, the ID
	// the method was defined with (a C function's name).
	MethodDefOriginalID uint32

	// Instructions is VM_INSTRUCTION_SIZE (insns.inc), the entries of
	// vm_exec_core's insns_address_table (EntryRange).
	Instructions uint32
}

// Constants that are one across 3.1 to 3.3 (read in each version's
// headers, docs/ruby-layouts.md).
const (
	tMask        = 0x1f    // RUBY_T_MASK of RBasic.flags
	tString      = 0x05    // RUBY_T_STRING
	tArray       = 0x07    // RUBY_T_ARRAY
	tImemo       = 0x1a    // RUBY_T_IMEMO
	imemoShift   = 12      // RUBY_FL_USHIFT: an imemo's type is flags >> 12 & 0xf
	imemoIseq    = 7       // imemo_iseq
	imemoMent    = 6       // imemo_ment: a method entry
	tClass       = 0x02    // RUBY_T_CLASS
	tModule      = 0x03    // RUBY_T_MODULE
	flSingleton  = 1 << 12 // RUBY_FL_SINGLETON = RUBY_FL_USER0 (fl_type.h; rb_class_attached_object's `test $0x10,%ah`)
	flNoEmbed    = 1 << 13 // RSTRING_NOEMBED = FL_USER1; RARRAY_EMBED_FLAG is the same bit, set when embedded
	arrayEmbed   = 16      // RArray.as.ary
	arrayEmbedSh = 15      // RARRAY_EMBED_LEN_SHIFT

	// ep[0] (VM_ENV_DATA_INDEX_FLAGS) of a frame.
	FrameMagicMask   = 0x7fff0001 // VM_FRAME_MAGIC_MASK
	FrameMagicMethod = 0x11110001
	FrameMagicBlock  = 0x22220001
	FrameMagicClass  = 0x33330001
	FrameMagicTop    = 0x44440001
	FrameMagicCFunc  = 0x55550001
	FrameMagicIFunc  = 0x66660001
	FrameMagicEval   = 0x77770001
	FrameMagicRescue = 0x78880001
	FrameMagicDummy  = 0x79990001
	FrameFlagFinish  = 0x0020 // VM_FRAME_FLAG_FINISH: the frame's vm_exec call returns with it
	FrameFlagCFrame  = 0x0080 // VM_FRAME_FLAG_CFRAME: a C frame (no iseq to name)

	// rb_method_definition_t.type: its first 4 bits (VM_METHOD_TYPE_MINIMUM_BITS).
	methodTypeMask = 0xf
	methodTypeIseq = 0 // VM_METHOD_TYPE_ISEQ
)

// layouts are the known versions' layouts by minor version ("3.1").
var layouts = map[string]Layout{
	"3.1": {
		VMMainThread: 40, ThreadEC: 40, ECThread: 48, ThreadVM: 32,
		ECVMStack: 0, ECVMStackSize: 8, ECCFP: 16,
		CFPPC: 0, CFPIseq: 16, CFPEP: 32, CFPJITReturn: 56, CFPSize: 64,
		IseqBody: 16, BodyIseqSize: 4, BodyIseqEncoded: 8,
		BodyPath: 64, BodyLabel: 80, BodyFirstLine: 88, FirstLineFixnum: true,
		BodyInsnsInfo: 120, BodyInsnsInfoSize: 136, BodyInsnsSuccTable: 144, BodyLocalIseq: 176, InsnInfoSize: 12,
		StringLen: 16, StringPtr: 24, StringEmbed: 16, StringEmbedMask: 0x7c000, StringEmbedShift: 14,
		ArrayEmbedMask: 0x18000, ArrayHeapPtr: 32,
		MethodEntryOwner: 32, MethodEntryDef: 16, MethodDefIseq: 8, MethodDefOriginalID: 32, ClassExt: 24, ClassExtIvTbl: 8,
		Instructions: 202,
	},
	"3.3": {
		VMMainThread: 40, ThreadEC: 48, ECThread: 48, ThreadVM: 32,
		ECVMStack: 0, ECVMStackSize: 8, ECCFP: 16,
		CFPPC: 0, CFPIseq: 16, CFPEP: 32, CFPJITReturn: 48, CFPSize: 56,
		IseqBody: 16, BodyIseqSize: 4, BodyIseqEncoded: 8,
		BodyPath: 64, BodyLabel: 80, BodyFirstLine: 88,
		BodyInsnsInfo: 112, BodyInsnsInfoSize: 128, BodyInsnsSuccTable: 136, BodyLocalIseq: 168, InsnInfoSize: 12,
		StringLenInHeader: true, StringLen: 16, StringPtr: 24, StringEmbed: 24,
		ArrayEmbedMask: 0x3f8000, ArrayHeapPtr: 32,
		MethodEntryOwner: 32, MethodEntryDef: 16, MethodDefIseq: 8, MethodDefOriginalID: 32, ClassPathAt: 152, ClassAttachedAt: 128,
		Instructions: 204,
	},
}

// The host emulation's fiber switch on x86-64 (testing/host_emulation.h): the System V
// callee-saved registers pushed on the current stack, its stack pointer stored, the other
// fiber's stack pointer loaded and its registers popped; `ret` resumes it where it called
// weft_emu_switch (or, for a new fiber, enters the function StartFiber laid on its stack).
// The caller-saved registers, the x87 control word and MXCSR are left alone: no fiber
// changes the last two, and the compiler saves the others around the call.
#if defined(__x86_64__)
asm(R"(
  .text
  .p2align 4
  .globl weft_emu_switch
  .type weft_emu_switch, @function
weft_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size weft_emu_switch, .-weft_emu_switch
  .section .note.GNU-stack,"",@progbits
)");
#endif

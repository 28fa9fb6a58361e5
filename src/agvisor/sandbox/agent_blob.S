/* The agent binary as read-only data. AGVISOR_AGENT_BINARY is its path (set by CMake). */
  .section .rodata
  .global agvisor_agent_blob_begin
  .global agvisor_agent_blob_end
  .balign 16
agvisor_agent_blob_begin:
  .incbin AGVISOR_AGENT_BINARY
agvisor_agent_blob_end:
  .byte 0
  .section .note.GNU-stack,"",@progbits

/* The web console's files (console_route.h) as read-only data; their paths are set by CMake. */
  .section .rodata
  .global agvisor_console_html_begin
  .global agvisor_console_html_end
  .global agvisor_console_js_begin
  .global agvisor_console_js_end
  .global agvisor_console_css_begin
  .global agvisor_console_css_end
  .balign 16
agvisor_console_html_begin:
  .incbin AGVISOR_CONSOLE_HTML
agvisor_console_html_end:
  .byte 0
  .balign 16
agvisor_console_js_begin:
  .incbin AGVISOR_CONSOLE_JS
agvisor_console_js_end:
  .byte 0
  .balign 16
agvisor_console_css_begin:
  .incbin AGVISOR_CONSOLE_CSS
agvisor_console_css_end:
  .byte 0
  .section .note.GNU-stack,"",@progbits

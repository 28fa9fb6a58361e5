/* The desktop recipe's configuration files (builder.cc) as read-only data; their paths are set
   by CMake. */
  .section .rodata
  .global agvisor_xfce4_panel_xml_begin
  .global agvisor_xfce4_panel_xml_end
  .global agvisor_xfce4_desktop_xml_begin
  .global agvisor_xfce4_desktop_xml_end
agvisor_xfce4_panel_xml_begin:
  .incbin AGVISOR_XFCE4_PANEL_XML
agvisor_xfce4_panel_xml_end:
agvisor_xfce4_desktop_xml_begin:
  .incbin AGVISOR_XFCE4_DESKTOP_XML
agvisor_xfce4_desktop_xml_end:
  .section .note.GNU-stack,"",@progbits

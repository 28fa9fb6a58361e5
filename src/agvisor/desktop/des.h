// DES and the VNC password pieces built on it, on base/ only, so the in-sandbox agent (which
// writes a desktop's password files) and the host's VNC client (vnc.h) share them.
//
// DES is implemented here (about 100 lines of tables and loops) rather than taken from OpenSSL:
// OpenSSL 3 deprecates its DES API and only offers single DES through the legacy provider, and
// the agent links no third-party code. VNC uses DES with each key byte's bits reversed (the
// reference implementation's bit order); VncKey applies that quirk, DesEncryptBlock is textbook
// DES (FIPS 46-3). Tested in vnc_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace agvisor::vnc {

// VNC passwords are at most 8 bytes (longer ones are cut by every VNC server).
inline constexpr std::size_t kMaxPasswordLength = 8;

// Textbook single DES, one 8-byte block, encryption.
std::array<std::uint8_t, 8> DesEncryptBlock(std::span<const std::uint8_t, 8> key,
                                            std::span<const std::uint8_t, 8> block);

// VNC's DES key for `password`: its first 8 bytes, zero padded, each byte's bits reversed.
std::array<std::uint8_t, 8> VncKey(std::string_view password);

// The contents of a VNC password file (what `vncpasswd -f` writes): the password (zero padded to
// 8 bytes) encrypted with VNC's fixed obfuscation key. 8 bytes.
std::string VncPasswordFile(std::string_view password);

}  // namespace agvisor::vnc

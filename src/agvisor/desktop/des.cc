#include "agvisor/desktop/des.h"

#include <cstring>

namespace agvisor::vnc {
namespace {

// ---- DES (FIPS 46-3). Bit positions in the tables count from 1 at the most significant bit. ----

constexpr std::uint8_t kIp[64] = {58, 50, 42, 34, 26, 18, 10, 2, 60, 52, 44, 36, 28, 20, 12, 4,
                                  62, 54, 46, 38, 30, 22, 14, 6, 64, 56, 48, 40, 32, 24, 16, 8,
                                  57, 49, 41, 33, 25, 17, 9,  1, 59, 51, 43, 35, 27, 19, 11, 3,
                                  61, 53, 45, 37, 29, 21, 13, 5, 63, 55, 47, 39, 31, 23, 15, 7};
constexpr std::uint8_t kFp[64] = {40, 8, 48, 16, 56, 24, 64, 32, 39, 7, 47, 15, 55, 23, 63, 31,
                                  38, 6, 46, 14, 54, 22, 62, 30, 37, 5, 45, 13, 53, 21, 61, 29,
                                  36, 4, 44, 12, 52, 20, 60, 28, 35, 3, 43, 11, 51, 19, 59, 27,
                                  34, 2, 42, 10, 50, 18, 58, 26, 33, 1, 41, 9,  49, 17, 57, 25};
constexpr std::uint8_t kE[48] = {32, 1,  2,  3,  4,  5,  4,  5,  6,  7,  8,  9,  8,  9,  10, 11,
                                 12, 13, 12, 13, 14, 15, 16, 17, 16, 17, 18, 19, 20, 21, 20, 21,
                                 22, 23, 24, 25, 24, 25, 26, 27, 28, 29, 28, 29, 30, 31, 32, 1};
constexpr std::uint8_t kP[32] = {16, 7, 20, 21, 29, 12, 28, 17, 1,  15, 23, 26, 5,  18, 31, 10,
                                 2,  8, 24, 14, 32, 27, 3,  9,  19, 13, 30, 6,  22, 11, 4,  25};
constexpr std::uint8_t kPc1[56] = {57, 49, 41, 33, 25, 17, 9,  1,  58, 50, 42, 34, 26, 18,
                                   10, 2,  59, 51, 43, 35, 27, 19, 11, 3,  60, 52, 44, 36,
                                   63, 55, 47, 39, 31, 23, 15, 7,  62, 54, 46, 38, 30, 22,
                                   14, 6,  61, 53, 45, 37, 29, 21, 13, 5,  28, 20, 12, 4};
constexpr std::uint8_t kPc2[48] = {14, 17, 11, 24, 1,  5,  3,  28, 15, 6,  21, 10, 23, 19, 12, 4,
                                   26, 8,  16, 7,  27, 20, 13, 2,  41, 52, 31, 37, 47, 55, 30, 40,
                                   51, 45, 33, 48, 44, 49, 39, 56, 34, 53, 46, 42, 50, 36, 29, 32};
constexpr std::uint8_t kShifts[16] = {1, 1, 2, 2, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 1};
// The S-boxes, one per line: its four rows of 16 values in turn, each value one hex digit.
constexpr std::string_view kSbox[8] = {
    "e4d12fb83a6c59070f74e2d1a6cb953841e8d62bfc973a50fc8249175b3ea06d",
    "f18e6b34972dc05a3d47f28ec01a69b50e7ba4d158c6932fd8a13f42b67c05e9",
    "a09e63f51dc7b428d709346a285ecbf1d6498f30b12c5ae71ad069874fe3b52c",
    "7de3069a1285bc4fd8b56f03472c1ae9a690cb7df13e52843f06a1d8945bc72e",
    "2c417ab6853fd0e9eb2c47d150fa3986421bad78f9c5630eb8c71e2d6f09a453",
    "c1af92680d34e75baf427c9561de0b389ef528c3704a1db6432c95fabe17608d",
    "4b2ef08d3c975a61d0b7491ae35c2f8614bdc37eaf6805926bd814a7950fe23c",
    "d2846fb1a93e50c71fd8a374c56b0e927b419ce206adf35821e74a8dfc90356b",
};

// Output bit i (from the top of an `out_bits` value) = input bit table[i] of an `in_bits` value.
std::uint64_t Permute(std::uint64_t in, const std::uint8_t* table, int out_bits, int in_bits) {
  std::uint64_t out = 0;
  for (int i = 0; i < out_bits; ++i) {
    out = (out << 1) | ((in >> (in_bits - table[i])) & 1);
  }
  return out;
}

std::uint64_t Load64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

std::uint32_t RotateLeft28(std::uint32_t v, int n) {
  return ((v << n) | (v >> (28 - n))) & 0x0fffffffu;
}

// The Feistel function: expand, mix with the subkey, eight S-boxes, permute.
std::uint32_t Feistel(std::uint32_t r, std::uint64_t subkey) {
  std::uint64_t x = Permute(r, kE, 48, 32) ^ subkey;
  std::uint32_t s = 0;
  for (int box = 0; box < 8; ++box) {
    auto six = static_cast<unsigned>((x >> (42 - 6 * box)) & 0x3f);
    unsigned row = ((six & 0x20) >> 4) | (six & 1);
    unsigned col = (six >> 1) & 0xf;
    const char digit = kSbox[box][row * 16 + col];
    s = (s << 4) | static_cast<std::uint32_t>(digit <= '9' ? digit - '0' : digit - 'a' + 10);
  }
  return static_cast<std::uint32_t>(Permute(s, kP, 32, 32));
}

std::uint8_t ReverseBits(std::uint8_t b) {
  std::uint8_t r = 0;
  for (int i = 0; i < 8; ++i) r = static_cast<std::uint8_t>((r << 1) | ((b >> i) & 1));
  return r;
}

}  // namespace

std::array<std::uint8_t, 8> DesEncryptBlock(std::span<const std::uint8_t, 8> key,
                                            std::span<const std::uint8_t, 8> block) {
  // Key schedule: PC-1 to 56 bits, two 28-bit halves rotated per round, PC-2 to 48 bits.
  std::uint64_t cd = Permute(Load64(key.data()), kPc1, 56, 64);
  auto c = static_cast<std::uint32_t>(cd >> 28);
  auto d = static_cast<std::uint32_t>(cd & 0x0fffffffu);
  std::uint64_t subkeys[16];
  for (int round = 0; round < 16; ++round) {
    c = RotateLeft28(c, kShifts[round]);
    d = RotateLeft28(d, kShifts[round]);
    subkeys[round] = Permute((static_cast<std::uint64_t>(c) << 28) | d, kPc2, 48, 56);
  }
  std::uint64_t x = Permute(Load64(block.data()), kIp, 64, 64);
  auto l = static_cast<std::uint32_t>(x >> 32);
  auto r = static_cast<std::uint32_t>(x);
  for (int round = 0; round < 16; ++round) {
    std::uint32_t next = l ^ Feistel(r, subkeys[round]);
    l = r;
    r = next;
  }
  // The halves are swapped after the last round.
  std::uint64_t out = Permute((static_cast<std::uint64_t>(r) << 32) | l, kFp, 64, 64);
  std::array<std::uint8_t, 8> bytes{};
  for (int i = 7; i >= 0; --i) {
    bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(out & 0xff);
    out >>= 8;
  }
  return bytes;
}

std::array<std::uint8_t, 8> VncKey(std::string_view password) {
  std::array<std::uint8_t, 8> key{};
  for (std::size_t i = 0; i < key.size() && i < password.size(); ++i) {
    key[i] = ReverseBits(static_cast<std::uint8_t>(password[i]));
  }
  return key;
}

std::string VncPasswordFile(std::string_view password) {
  // VNC's fixed obfuscation key, the same in every VNC implementation (not a secret: the file
  // is protected by its permissions, the encryption only hides it from a glance).
  static constexpr std::uint8_t kFixedKey[8] = {23, 82, 107, 6, 35, 78, 88, 7};
  std::array<std::uint8_t, 8> key{};
  for (std::size_t i = 0; i < 8; ++i) key[i] = ReverseBits(kFixedKey[i]);
  std::array<std::uint8_t, 8> plain{};
  for (std::size_t i = 0; i < plain.size() && i < password.size(); ++i) {
    plain[i] = static_cast<std::uint8_t>(password[i]);
  }
  auto enc = DesEncryptBlock(key, plain);
  return std::string(reinterpret_cast<const char*>(enc.data()), enc.size());
}

}  // namespace agvisor::vnc

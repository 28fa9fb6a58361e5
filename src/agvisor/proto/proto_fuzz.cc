// libFuzzer target for the agent channel protocol (docs/protocol.md): the bytes a hostile or
// broken peer could send. Built with -DAGVISOR_FUZZ=ON and clang; `proto_fuzz -max_total_time=N`.
//
// Besides "no crash, no sanitizer report", it checks the properties the decoders promise:
//   - FrameDecoder gives the same frames and the same error however the input is chunked;
//   - re-encoding the decoded frames reproduces the input they came from;
//   - every payload Decode is canonical: Decode(p).Encode() == p whenever Decode succeeds;
//   - CheckPayload accepts exactly what the payload's own Decode accepts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agvisor/proto/messages.h"

namespace agvisor::proto {
namespace {

[[noreturn]] void Violated(const char* what) {
  std::fprintf(stderr, "proto_fuzz: property violated: %s\n", what);
  std::abort();
}

struct Decoded {
  std::vector<Frame> frames;
  bool ok = true;
  std::string error;
};

Decoded DecodeInChunks(std::string_view in, std::size_t chunk) {
  Decoded out;
  FrameDecoder decoder;
  auto sink = [&](Frame&& f) { out.frames.push_back(std::move(f)); };
  for (std::size_t pos = 0; pos < in.size() && out.ok; pos += chunk) {
    auto r = decoder.Feed(in.substr(pos, chunk), sink);
    if (!r.ok()) {
      out.ok = false;
      out.error = r.error().message();
    }
  }
  if (decoder.failed() == out.ok) Violated("failed() disagrees with Feed");
  return out;
}

template <typename T>
bool Canonical(std::string_view payload) {
  auto decoded = T::Decode(payload);
  if (decoded.ok() && decoded->Encode() != payload) Violated("Decode -> Encode changed bytes");
  return decoded.ok();
}

// EXIT has two layouts (docs/protocol.md): 6 bytes up to version 2, 7 with `prestarted` from
// version 3. Each must survive Decode -> Encode of its own version.
bool CanonicalExit(std::string_view payload) {
  auto decoded = Exit::Decode(payload);
  if (!decoded.ok()) return false;
  const std::uint16_t version = payload.size() == 6 ? 2 : 3;
  if (decoded->Encode(version) != payload) Violated("Decode -> Encode changed bytes");
  return true;
}

// Decodes `payload` with the struct of `type`; whether it parsed.
bool DecodeAs(Type type, std::string_view p) {
  auto parsed = VisitPayloadType(type, [&]<typename P>(std::type_identity<P>) {
    if constexpr (std::is_same_v<P, RawPayload>) {
      return true;
    } else if constexpr (std::is_same_v<P, EmptyPayload>) {
      return p.empty();
    } else if constexpr (std::is_same_v<P, Exit>) {
      return CanonicalExit(p);
    } else {
      return Canonical<P>(p);
    }
  });
  return parsed.value_or(false);
}

void FuzzOne(std::string_view in) {
  // 1. Frames: all at once versus in chunks of 1..64 bytes chosen by the input.
  const Decoded whole = DecodeInChunks(in, in.size() + 1);
  const std::size_t chunk = in.empty() ? 1 : static_cast<std::uint8_t>(in[0]) % 64 + 1;
  const Decoded chunked = DecodeInChunks(in, chunk);
  if (whole.frames != chunked.frames || whole.ok != chunked.ok || whole.error != chunked.error) {
    Violated("chunking changed the decoded frames or the error");
  }
  std::string reencoded;
  for (const Frame& f : whole.frames) {
    AppendFrame(reencoded, f.type, f.stream, f.payload);
    if (CheckPayload(f.type, f.payload).ok() != DecodeAs(f.type, f.payload)) {
      Violated("CheckPayload disagrees with Decode");
    }
  }
  if (in.substr(0, reencoded.size()) != reencoded) Violated("re-encoded frames differ");

  // 2. The whole input as every payload layout (shallow inputs reach the decoders directly).
  for (int raw = 0; raw < 256; ++raw) {
    if (!IsKnownType(static_cast<std::uint8_t>(raw))) continue;
    const auto type = static_cast<Type>(raw);
    if (CheckPayload(type, in).ok() != DecodeAs(type, in)) {
      Violated("CheckPayload disagrees with Decode");
    }
  }
  auto view = Output::DecodeOutputView(in);
  if (view.ok() && view->second.data() != in.data() + 1) Violated("OUTPUT view is a copy");
}

}  // namespace
}  // namespace agvisor::proto

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  agvisor::proto::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

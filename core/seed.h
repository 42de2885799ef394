// Deterministic seeds: the splitmix64 finalizer and a mix of several integers into one seed
// (rounds, cells, points; device-side stimuli). constexpr, so device code uses the same function.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace moe {

inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The splitmix64 output function (without the state increment).
[[nodiscard]] constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One splitmix64 step from state z.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t z) {
  return splitmix64_mix(z + kGoldenGamma);
}

// Several integers into one well-mixed seed (order matters).
[[nodiscard]] constexpr std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t h = kGoldenGamma;
  for (auto p : parts) h = splitmix64_mix(h ^ (p + kGoldenGamma + (h << 6) + (h >> 2)));
  return h;
}

}  // namespace moe

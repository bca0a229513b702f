// Sizes and durations as people read them, for progress lines and summaries.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <string>

namespace mpitron {

// "3.2 MiB"
inline std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

// "0.4s", "42s", "3m07s", "2h05m"
inline std::string human_seconds(double s) {
  if (s < 10) return fmt::format("{:.1f}s", s);
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

// "512", "12.3k", "4.10M", "2.05G"
inline std::string human_count(double n) {
  if (n < 1e4) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.1f}k", n / 1e3);
  if (n < 1e9) return fmt::format("{:.2f}M", n / 1e6);
  return fmt::format("{:.2f}G", n / 1e9);
}

}  // namespace mpitron

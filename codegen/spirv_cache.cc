#include "codegen/spirv_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace doppler::codegen {
namespace {

std::atomic<uint64_t> g_hits{0};
std::atomic<uint64_t> g_misses{0};

// Entry layout: a fixed header, then the SPIR-V words. The header repeats the key and carries a
// hash of the payload so a truncated, foreign or bit-flipped file is rejected instead of handed to
// the driver.
constexpr uint32_t kMagic = 0x56535044;  // "DPSV" little-endian
constexpr uint32_t kFormat = 1;
constexpr uint32_t kSpirvMagic = 0x07230203;
constexpr size_t kMaxEntryBytes = 64u << 20;  // no generated shader comes close; guards odd files

struct Header {
  uint32_t magic;
  uint32_t format;
  uint64_t key;
  uint32_t word_count;
  uint32_t reserved;
  uint64_t payload_hash;
};
static_assert(sizeof(Header) == 32);

uint64_t PayloadHash(const uint32_t* words, size_t count) {
  return Fnv1a64(std::string_view(reinterpret_cast<const char*>(words), count * sizeof(uint32_t)));
}

bool EnvIsSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace

ShaderCacheStats GetShaderCacheStats() { return {g_hits.load(), g_misses.load()}; }

void ResetShaderCacheStats() {
  g_hits = 0;
  g_misses = 0;
}

void CountShaderCacheHit() { ++g_hits; }
void CountShaderCacheMiss() { ++g_misses; }

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::optional<std::string> ShaderCacheDir() {
  if (EnvIsSet("DOPPLER_NO_SHADER_CACHE")) return std::nullopt;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/doppler/spirv");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/doppler/spirv");
  return std::nullopt;
}

std::optional<std::string> ShaderCacheEntryPath(uint64_t key) {
  std::optional<std::string> dir = ShaderCacheDir();
  if (!dir) return std::nullopt;
  return absl::StrFormat("%s/%016x.spv", *dir, key);
}

std::optional<std::vector<uint32_t>> LoadCachedSpirv(uint64_t key) {
  std::optional<std::string> path = ShaderCacheEntryPath(key);
  if (!path) return std::nullopt;
  FILE* f = std::fopen(path->c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  std::vector<char> bytes;
  char chunk[65536];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0 && bytes.size() <= kMaxEntryBytes) {
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  if (read_error || bytes.size() < sizeof(Header) || bytes.size() > kMaxEntryBytes)
    return std::nullopt;

  Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  const size_t payload = bytes.size() - sizeof(Header);
  if (h.magic != kMagic || h.format != kFormat || h.key != key || h.word_count == 0 ||
      payload != size_t{h.word_count} * sizeof(uint32_t)) {
    return std::nullopt;
  }
  std::vector<uint32_t> words(h.word_count);
  std::memcpy(words.data(), bytes.data() + sizeof(Header), payload);
  if (words[0] != kSpirvMagic || PayloadHash(words.data(), words.size()) != h.payload_hash) {
    return std::nullopt;
  }
  return words;
}

void StoreCachedSpirv(uint64_t key, const std::vector<uint32_t>& spirv) {
  std::optional<std::string> dir = ShaderCacheDir();
  std::optional<std::string> path = ShaderCacheEntryPath(key);
  if (!dir || !path || spirv.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir, ec);
  if (ec) return;

  // A unique temp name per writer: concurrent processes compiling the same shader each rename a
  // complete file into place, and readers never observe a partial one.
  std::random_device rd;
  const std::string tmp =
      absl::StrFormat("%s.tmp.%d.%08x", *path, static_cast<int>(getpid()), rd());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return;
  Header h{kMagic, kFormat,
           key,    static_cast<uint32_t>(spirv.size()),
           0,      PayloadHash(spirv.data(), spirv.size())};
  bool ok = std::fwrite(&h, sizeof(h), 1, f) == 1 &&
            std::fwrite(spirv.data(), sizeof(uint32_t), spirv.size(), f) == spirv.size();
  ok = (std::fclose(f) == 0) && ok;
  if (ok) {
    std::filesystem::rename(tmp, *path, ec);
    ok = !ec;
  }
  if (!ok) std::filesystem::remove(tmp, ec);
}

}  // namespace doppler::codegen

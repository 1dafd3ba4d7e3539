// On-disk cache of compiled SPIR-V, so a second start does not pay for glslang again.
//
// Entries live under $XDG_CACHE_HOME/doppler/spirv/ (fallback $HOME/.cache/doppler/spirv/), one
// file per key, named by a 64-bit FNV-1a hash. The cache is strictly an accelerator: every failure
// (no directory, unreadable or corrupt file, full disk) is silently treated as a miss, never as an
// error. DOPPLER_NO_SHADER_CACHE=1 turns it off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace doppler::codegen {

// Counters of the current process; tests read them to prove that a second compile hits the cache.
struct ShaderCacheStats {
  uint64_t hits = 0;    // SPIR-V served from disk
  uint64_t misses = 0;  // SPIR-V compiled by glslang (cache off, entry absent, or entry rejected)
};
ShaderCacheStats GetShaderCacheStats();
void ResetShaderCacheStats();

// FNV-1a 64: our own hash because std::hash / absl::Hash are not stable across runs.
uint64_t Fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);

// The cache directory, or nullopt when the cache is disabled or no home/cache directory is known.
// Read from the environment on every call so tests can redirect it.
std::optional<std::string> ShaderCacheDir();

// Full path of the entry for `key` (nullopt when the cache is disabled).
std::optional<std::string> ShaderCacheEntryPath(uint64_t key);

// Returns the cached SPIR-V for `key`, or nullopt (absent, disabled, or failed any integrity
// check).
std::optional<std::vector<uint32_t>> LoadCachedSpirv(uint64_t key);

// Writes atomically (temp file + rename); failures are ignored on purpose.
void StoreCachedSpirv(uint64_t key, const std::vector<uint32_t>& spirv);

// Bookkeeping hooks for the compiler, which alone knows whether it compiled.
void CountShaderCacheHit();
void CountShaderCacheMiss();

}  // namespace doppler::codegen

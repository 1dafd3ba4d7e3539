#include "formats/safetensors.h"

#include <cstdint>
#include <functional>
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/json_file.h"
#include "formats/mapped_file.h"
#include "nlohmann/json.hpp"

namespace doppler::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A header larger than this is not a real checkpoint; refusing it bounds the JSON parse.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

// One tensor's header entry. The dtype stays a string so unsupported dtypes fail only in Get().
struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct ParsedFile {
  MappedFile map;
  std::string path;
  const uint8_t* data = nullptr;  // start of the data section (just after the header)
  uint64_t data_size = 0;
  std::map<std::string, Entry, std::less<>> entries;
};

absl::Status Bad(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

// Element size of every dtype the safetensors format defines; 0 for strings it does not know.
uint64_t ElementSize(std::string_view dtype) {
  static const std::map<std::string_view, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::optional<graph::DType> LoadableDType(std::string_view dtype) {
  if (dtype == "F32") return graph::DType::kF32;
  if (dtype == "F16") return graph::DType::kF16;
  if (dtype == "BF16") return graph::DType::kBF16;
  return std::nullopt;
}

// A JSON integer >= 0 that fits in uint64 (nlohmann stores negatives as number_integer).
std::optional<uint64_t> AsU64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

std::string ShapeStr(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// Two tensors whose data_offsets overlap would alias each other's bytes: refused, as GGUF's are.
absl::Status CheckDisjoint(const std::string& file, const std::map<std::string, Entry, std::less<>>& entries) {
  std::vector<std::pair<const std::string*, const Entry*>> spans;
  for (const auto& [name, e] : entries) {
    if (e.end > e.begin) spans.push_back({&name, &e});
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const Entry& prev = *spans[i - 1].second;
    const Entry& next = *spans[i].second;
    if (next.begin < prev.end) {
      return Bad(file, absl::StrCat("tensors '", *spans[i - 1].first, "' (data_offsets [", prev.begin, ", ", prev.end,
                                    "]) and '", *spans[i].first, "' (data_offsets [", next.begin, ", ", next.end,
                                    "]) overlap"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Entry> ParseEntry(const std::string& file, const std::string& name, const json& v,
                                 uint64_t data_size) {
  const std::string t = absl::StrCat("tensor '", name, "'");
  if (!v.is_object()) return Bad(file, absl::StrCat(t, ": header entry is not a JSON object"));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) return Bad(file, absl::StrCat(t, ": header entry has no '", key, "'"));
  }
  Entry e;
  if (!v["dtype"].is_string()) return Bad(file, absl::StrCat(t, ": 'dtype' is not a string"));
  e.dtype = v["dtype"].get<std::string>();

  const json& shape = v["shape"];
  if (!shape.is_array()) return Bad(file, absl::StrCat(t, ": 'shape' is not an array"));
  uint64_t count = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!shape[i].is_number_integer()) {
      return Bad(file, absl::StrCat(t, ": shape element ", i, " is not an integer: ", shape[i].dump()));
    }
    std::optional<uint64_t> d = AsU64(shape[i]);
    if (!d) return Bad(file, absl::StrCat(t, ": shape element ", i, " is negative (", shape[i].dump(), ")"));
    if (*d > static_cast<uint64_t>(INT64_MAX)) {
      return Bad(file, absl::StrCat(t, ": shape element ", i, " is too large (", *d, ")"));
    }
    e.shape.push_back(static_cast<int64_t>(*d));
    overflow = overflow || __builtin_mul_overflow(count, *d, &count);
  }

  const json& offs = v["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offs.is_array() && offs.size() == 2) {
    begin = AsU64(offs[0]);
    end = AsU64(offs[1]);
  }
  if (!begin || !end) {
    return Bad(file, absl::StrCat(t, ": 'data_offsets' must be two non-negative integers, got ", offs.dump()));
  }
  e.begin = *begin;
  e.end = *end;
  const std::string offs_str = absl::StrCat("data_offsets [", e.begin, ", ", e.end, "]");
  if (e.begin > e.end) return Bad(file, absl::StrCat(t, ": ", offs_str, " end before they begin"));
  if (e.end > data_size) {
    return Bad(file, absl::StrCat(t, ": ", offs_str, " exceed the data section (", data_size,
                                  " bytes): file truncated?"));
  }

  const uint64_t elem = ElementSize(e.dtype);
  uint64_t bytes = 0;
  if (overflow || (elem != 0 && __builtin_mul_overflow(count, elem, &bytes))) {
    return Bad(file, absl::StrCat(t, ": shape ", ShapeStr(e.shape), " has too many elements (the size overflows 64 bits)"));
  }
  // An unknown dtype string cannot be size-checked; Get() reports it if the tensor is used.
  if (elem != 0 && bytes != e.end - e.begin) {
    return Bad(file, absl::StrCat(t, ": shape ", ShapeStr(e.shape), " of ", e.dtype, " needs ", bytes,
                                  " bytes but ", offs_str, " span ", e.end - e.begin, " bytes"));
  }
  return e;
}

absl::StatusOr<std::unique_ptr<ParsedFile>> ParseFile(const fs::path& path) {
  auto pf = std::make_unique<ParsedFile>();
  pf->path = path.string();
  absl::StatusOr<MappedFile> map = MappedFile::Open(path);
  if (!map.ok()) return map.status();
  pf->map = *std::move(map);
  const std::string& file = pf->path;
  const uint64_t size = pf->map.size();
  if (size < 8) {
    return Bad(file, absl::StrCat("file is ", size, " bytes, too short for the 8-byte header length: truncated or not safetensors?"));
  }
  uint64_t n = 0;  // little-endian u64, assembled bytewise so host endianness does not matter
  for (int i = 7; i >= 0; --i) n = (n << 8) | pf->map.data()[i];
  if (n > size - 8) {
    return Bad(file, absl::StrCat("header length ", n, " exceeds the file size (", size,
                                  " bytes): file truncated or not safetensors?"));
  }
  if (n > kMaxHeaderBytes) {
    return Bad(file, absl::StrCat("header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit"));
  }
  const char* hdr = reinterpret_cast<const char*>(pf->map.data() + 8);
  json header;
  // JSON keeps the last of two equal keys; a header naming a tensor twice is refused instead.
  std::set<std::string> names;
  std::optional<std::string> repeated;
  auto note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second &&
        !repeated) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    header = json::parse(hdr, hdr + n, note_keys);
  } catch (const json::exception& ex) {
    return Bad(file, absl::StrCat("header is not valid JSON: ", ex.what()));
  }
  if (!header.is_object()) return Bad(file, "header is not a JSON object");
  if (repeated) return Bad(file, absl::StrCat("the header names tensor '", *repeated, "' twice"));
  pf->data = pf->map.data() + 8 + n;
  pf->data_size = size - 8 - n;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;  // free-form string map, nothing we need
    absl::StatusOr<Entry> e = ParseEntry(file, name, value, pf->data_size);
    if (!e.ok()) return e.status();
    pf->entries.emplace(name, *std::move(e));
  }
  if (absl::Status s = CheckDisjoint(file, pf->entries); !s.ok()) return s;
  return pf;
}

// transformers saves an MXFP4-quantized weight (GPT-OSS's experts, quant_method "mxfp4") as two U8
// tensors: `X_blocks` [..., G, 16], 32 E2M1 codes a block (value 2j in the low nibble of byte j,
// 2j + 1 in the high one), and `X_scales` [..., G], E8M0 exponents (the codes' values times
// 2^(s - 127)). Such a pair is served as one tensor `X`, MXFP4 [..., 32·G] in ggml's blocks: the
// scale byte (the same exponent: ggml's values are the codes' doubled, scaled by 2^(s - 128)), then
// value j in the low nibble of byte j and value j + 16 in the high one.
constexpr char kBlocksSuffix[] = "_blocks", kScalesSuffix[] = "_scales";

struct Mxfp4Pair {
  const ParsedFile *blocks_file, *scales_file;
  const Entry *blocks, *scales;
};

// The pair's ggml blocks, or an error naming both tensors where they do not make one.
absl::StatusOr<std::vector<uint8_t>> RepackMxfp4(const std::string& name, const Mxfp4Pair& p,
                                                 std::vector<int64_t>& shape) {
  const Entry& b = *p.blocks;
  const Entry& sc = *p.scales;
  const std::vector<int64_t> groups(b.shape.begin(), b.shape.end() - (b.shape.empty() ? 0 : 1));
  if (b.dtype != "U8" || sc.dtype != "U8" || b.shape.size() < 2 || b.shape.back() != 16 || sc.shape != groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.blocks_file->path, ": tensors '", name, kBlocksSuffix, "' (", b.dtype, " ", ShapeStr(b.shape), ") and '",
        name, kScalesSuffix, "' (", sc.dtype, " ", ShapeStr(sc.shape),
        ") do not make an MXFP4 tensor (U8 [..., G, 16] blocks and U8 [..., G] scales)"));
  }
  shape.assign(groups.begin(), groups.end());
  shape.back() *= 32;
  const uint64_t count = (sc.end - sc.begin);  // one scale a block (sizes checked against the shapes)
  const uint8_t* codes = p.blocks_file->data + b.begin;
  const uint8_t* scales = p.scales_file->data + sc.begin;
  std::vector<uint8_t> out(count * 17);
  auto code = [](const uint8_t* block, int v) { return (block[v >> 1] >> (4 * (v & 1))) & 15; };
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* from = codes + 16 * i;
    uint8_t* to = out.data() + 17 * i;
    to[0] = scales[i];
    for (int j = 0; j < 16; ++j) to[1 + j] = static_cast<uint8_t>(code(from, j) | (code(from, j + 16) << 4));
  }
  return out;
}

class SafetensorsStore : public WeightStore {
 public:
  SafetensorsStore(std::string describe, std::string searched)
      : describe_(std::move(describe)), searched_(std::move(searched)) {}

  // Takes ownership of a parsed file; returns it for indexing.
  const ParsedFile* Own(std::unique_ptr<ParsedFile> f) {
    files_.push_back(std::move(f));
    return files_.back().get();
  }
  void Add(const std::string& name, const ParsedFile* f, const Entry* e) { tensors_[name] = {f, e}; }
  // After the last Add: every X_blocks with an X_scales beside it is also the tensor X.
  void AddMxfp4Pairs() {
    for (const auto& [name, fe] : tensors_) {
      if (!std::string_view(name).ends_with(kBlocksSuffix)) continue;
      const std::string base = name.substr(0, name.size() - std::string_view(kBlocksSuffix).size());
      auto scales = tensors_.find(base + std::string(kScalesSuffix));
      if (scales == tensors_.end() || tensors_.count(base) > 0) continue;
      pairs_[base] = {fe.first, scales->second.first, fe.second, scales->second.second};
    }
  }

  bool Has(std::string_view name) const override {
    return tensors_.find(name) != tensors_.end() || pairs_.find(name) != pairs_.end();
  }

  absl::StatusOr<TensorView> Get(std::string_view name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      if (auto pair = pairs_.find(name); pair != pairs_.end()) return GetMxfp4(pair->first, pair->second);
      return absl::NotFoundError(absl::StrCat("tensor '", std::string(name), "' not found in ", searched_));
    }
    const auto& [f, e] = it->second;
    std::optional<graph::DType> dt = LoadableDType(e->dtype);
    if (!dt) {
      return absl::InvalidArgumentError(absl::StrCat(f->path, ": tensor '", std::string(name), "' has dtype ", e->dtype,
                                                     ", which doppler cannot load (supported: F32, F16, BF16)"));
    }
    return TensorView{std::string(name), *dt, e->shape, f->data + e->begin, e->end - e->begin, f->path};
  }

  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    names.reserve(tensors_.size() + pairs_.size());
    for (const auto& [name, unused] : tensors_) names.push_back(name);
    for (const auto& [name, unused] : pairs_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string Describe() const override { return describe_; }

 private:
  // A pair's tensor, repacked when first asked for and kept while the store lives.
  absl::StatusOr<TensorView> GetMxfp4(const std::string& name, const Mxfp4Pair& pair) const {
    std::lock_guard<std::mutex> lock(repack_mutex_);
    auto it = repacked_.find(name);
    if (it == repacked_.end()) {
      std::vector<int64_t> shape;
      absl::StatusOr<std::vector<uint8_t>> bytes = RepackMxfp4(name, pair, shape);
      if (!bytes.ok()) return bytes.status();
      it = repacked_.emplace(name, std::pair{std::move(shape), *std::move(bytes)}).first;
    }
    const auto& [shape, bytes] = it->second;
    return TensorView{name, graph::DType::kMXFP4, shape, bytes.data(), bytes.size(), pair.blocks_file->path};
  }

  std::string describe_, searched_;
  std::vector<std::unique_ptr<ParsedFile>> files_;
  std::map<std::string, std::pair<const ParsedFile*, const Entry*>, std::less<>> tensors_;
  std::map<std::string, Mxfp4Pair, std::less<>> pairs_;
  mutable std::mutex repack_mutex_;
  mutable std::map<std::string, std::pair<std::vector<int64_t>, std::vector<uint8_t>>> repacked_;
};

// A shard name from the index must stay inside the model directory.
bool IsSafeShardName(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<WeightStore>> OpenSharded(const fs::path& dir, const fs::path& index_path) {
  const std::string index = index_path.string();
  absl::StatusOr<json> parsed = ReadJsonFile(index_path);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Bad(index, "key 'weight_map' is missing or not an object");
  }
  const json& weight_map = j["weight_map"];
  if (weight_map.empty()) return Bad(index, "'weight_map' lists no tensors");

  std::map<std::string, const ParsedFile*> shards;  // shard file name -> parsed shard
  auto store = std::make_unique<SafetensorsStore>(dir.string(), index);
  for (const auto& [name, value] : weight_map.items()) {
    if (!value.is_string()) {
      return Bad(index, absl::StrCat("weight_map['", name, "'] is not a string (a shard file name)"));
    }
    const std::string shard = value.get<std::string>();
    if (!IsSafeShardName(shard)) {
      return Bad(index, absl::StrCat("weight_map['", name, "'] names shard '", shard, "', which is not a file inside ",
                                     dir.string()));
    }
    auto it = shards.find(shard);
    if (it == shards.end()) {
      absl::StatusOr<std::unique_ptr<ParsedFile>> pf = ParseFile(dir / shard);
      if (!pf.ok()) {
        return absl::Status(pf.status().code(), absl::StrCat(index, ": shard '", shard, "' (holding tensor '", name,
                                                             "') cannot be read: ", pf.status().message()));
      }
      it = shards.emplace(shard, store->Own(*std::move(pf))).first;
    }
    const ParsedFile* f = it->second;
    auto e = f->entries.find(name);
    if (e == f->entries.end()) {
      return Bad(index, absl::StrCat("weight_map puts tensor '", name, "' in shard '", shard,
                                     "', which does not contain it"));
    }
    // Tensors a shard holds but the index does not list are ignored: the index is authoritative.
    store->Add(name, f, &e->second);
  }
  store->AddMxfp4Pairs();
  return store;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightStore>> OpenSafetensorsFile(const fs::path& file) {
  absl::StatusOr<std::unique_ptr<ParsedFile>> pf = ParseFile(file);
  if (!pf.ok()) return pf.status();
  auto store = std::make_unique<SafetensorsStore>(file.string(), file.string());
  const ParsedFile* f = store->Own(*std::move(pf));
  for (const auto& [name, entry] : f->entries) store->Add(name, f, &entry);
  store->AddMxfp4Pairs();
  return store;
}

absl::StatusOr<std::unique_ptr<WeightStore>> OpenSafetensors(const fs::path& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir.string(), ": not a directory"));
  }
  const fs::path index = model_dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) return OpenSharded(model_dir, index);
  const fs::path single = model_dir / "model.safetensors";
  if (fs::exists(single, ec)) return OpenSafetensorsFile(single);
  return absl::NotFoundError(absl::StrCat(model_dir.string(),
                                          ": neither model.safetensors nor model.safetensors.index.json is there"));
}

}  // namespace doppler::formats

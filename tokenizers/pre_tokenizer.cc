#include "tokenizers/pre_tokenizer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/json_fields.h"

namespace doppler::tokenizers {
namespace {

// GPT-2's pre-tokenization pattern, which ByteLevel applies when use_regex is true.
constexpr char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& spec, const std::string& where) {
  PreTokenizer pre_tokenizer;
  if (absl::Status status = pre_tokenizer.Add(spec, where); !status.ok()) return status;
  return pre_tokenizer;
}

absl::Status PreTokenizer::Add(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = StringField(spec, "type", where);
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    const auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) return JsonError(where, "Sequence needs a \"pretokenizers\" array");
    for (size_t i = 0; i < it->size(); ++i) {
      if (absl::Status status = Add((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]")); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  Step step;
  if (*type == "Split") {
    step.kind = Step::Kind::kSplit;
    absl::StatusOr<Regex> pattern = PatternField(spec, where);
    if (!pattern.ok()) return pattern.status();
    step.pattern = *std::move(pattern);
    absl::StatusOr<std::string> behavior = StringField(spec, "behavior", where);
    if (!behavior.ok()) return behavior.status();
    const std::pair<const char*, Behavior> behaviors[] = {{"Isolated", Behavior::kIsolated},
                                                          {"Removed", Behavior::kRemoved},
                                                          {"MergedWithPrevious", Behavior::kMergedWithPrevious},
                                                          {"MergedWithNext", Behavior::kMergedWithNext},
                                                          {"Contiguous", Behavior::kContiguous}};
    const auto* found =
        std::find_if(std::begin(behaviors), std::end(behaviors), [&](const auto& b) { return *behavior == b.first; });
    if (found == std::end(behaviors)) {
      return JsonError(where, absl::StrCat("unknown Split behavior \"", *behavior, "\""));
    }
    step.behavior = found->second;
    absl::StatusOr<bool> invert = BoolField(spec, "invert", false, where);
    if (!invert.ok()) return invert.status();
    step.invert = *invert;
  } else if (*type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    // HF's defaults for fields a file leaves out are true for both.
    absl::StatusOr<bool> add_prefix_space = BoolField(spec, "add_prefix_space", true, where);
    if (!add_prefix_space.ok()) return add_prefix_space.status();
    step.add_prefix_space = *add_prefix_space;
    absl::StatusOr<bool> use_regex = BoolField(spec, "use_regex", true, where);
    if (!use_regex.ok()) return use_regex.status();
    if (*use_regex) {
      absl::StatusOr<Regex> gpt2 = Regex::Compile(kGpt2Pattern);
      if (!gpt2.ok()) return JsonError(where, std::string(gpt2.status().message()));
      step.pattern = *std::move(gpt2);
    }
  } else if (*type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    absl::StatusOr<std::string> replacement = StringField(spec, "replacement", where);
    if (!replacement.ok()) return replacement.status();
    if (replacement->empty()) return JsonError(where, "Metaspace replacement is empty");
    step.replacement = *std::move(replacement);
    if (spec.contains("prepend_scheme")) {
      absl::StatusOr<std::string> scheme = StringField(spec, "prepend_scheme", where);
      if (!scheme.ok()) return scheme.status();
      if (*scheme == "always") {
        step.prepend = Step::Prepend::kAlways;
      } else if (*scheme == "first") {
        step.prepend = Step::Prepend::kFirst;
      } else if (*scheme == "never") {
        step.prepend = Step::Prepend::kNever;
      } else {
        return JsonError(where, absl::StrCat("unknown prepend_scheme \"", *scheme, "\""));
      }
    } else {  // files written before prepend_scheme existed
      absl::StatusOr<bool> add_prefix_space = BoolField(spec, "add_prefix_space", true, where);
      if (!add_prefix_space.ok()) return add_prefix_space.status();
      step.prepend = *add_prefix_space ? Step::Prepend::kAlways : Step::Prepend::kNever;
    }
    absl::StatusOr<bool> split = BoolField(spec, "split", true, where);
    if (!split.ok()) return split.status();
    if (*split) {
      absl::StatusOr<Regex> literal = Regex::Literal(step.replacement);
      if (!literal.ok()) return JsonError(where, std::string(literal.status().message()));
      step.pattern = *std::move(literal);
      step.behavior = Behavior::kMergedWithNext;
    }
  } else {
    return JsonError(where, absl::StrCat("unsupported pre_tokenizer type \"", *type, "\""));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PreTokenizer::Split(std::string_view text, bool at_input_start) const {
  std::vector<Piece> pieces = {{std::string(text), at_input_start}};
  for (const Step& step : steps_) {
    std::vector<Piece> next;
    for (const Piece& piece : pieces) {
      if (absl::Status status = Apply(step, piece, next); !status.ok()) return status;
    }
    pieces = std::move(next);
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    if (!piece.text.empty()) out.push_back(std::move(piece.text));
  }
  return out;
}

absl::Status PreTokenizer::Apply(const Step& step, const Piece& piece, std::vector<Piece>& out) {
  switch (step.kind) {
    case Step::Kind::kSplit:
      return SplitWith(*step.pattern, step.behavior, step.invert, piece, out);
    case Step::Kind::kByteLevel: {
      Piece prefixed = piece;
      if (step.add_prefix_space && !prefixed.text.starts_with(' ')) prefixed.text = " " + prefixed.text;
      std::vector<Piece> parts;
      if (step.pattern) {
        if (absl::Status status = SplitWith(*step.pattern, Behavior::kIsolated, false, prefixed, parts); !status.ok()) {
          return status;
        }
      } else {
        parts.push_back(std::move(prefixed));
      }
      for (Piece& part : parts) {
        Piece mapped{{}, part.at_input_start};
        AppendByteLevel(part.text, mapped.text);
        out.push_back(std::move(mapped));
      }
      return absl::OkStatus();
    }
    case Step::Kind::kMetaspace: {
      Piece replaced{{}, piece.at_input_start};
      for (char c : piece.text) {
        if (c == ' ') {
          replaced.text += step.replacement;
        } else {
          replaced.text += c;
        }
      }
      const bool prepend =
          step.prepend == Step::Prepend::kAlways || (step.prepend == Step::Prepend::kFirst && piece.at_input_start);
      if (prepend && !replaced.text.starts_with(step.replacement)) replaced.text.insert(0, step.replacement);
      if (!step.pattern) {
        out.push_back(std::move(replaced));
        return absl::OkStatus();
      }
      return SplitWith(*step.pattern, step.behavior, false, replaced, out);
    }
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::SplitWith(const Regex& pattern, Behavior behavior, bool invert, const Piece& piece,
                                     std::vector<Piece>& out) {
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> matches = pattern.FindAll(piece.text);
  if (!matches.ok()) return matches.status();
  // The piece as consecutive spans, each a delimiter (a match, or a gap when inverted) or not.
  struct Span {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Span> spans;
  size_t done = 0;
  for (auto [begin, end] : *matches) {
    if (begin > done) spans.push_back({done, begin, invert});
    spans.push_back({begin, end, !invert});
    done = end;
  }
  if (done < piece.text.size()) spans.push_back({done, piece.text.size(), invert});

  // HF's behaviours: for "the-final--countdown" split at '-', Isolated gives the - final - - countdown,
  // Removed the final countdown, MergedWithPrevious the- final- - countdown, MergedWithNext
  // the -final - -countdown, Contiguous the - final -- countdown.
  const size_t first_out = out.size();
  bool previous_delimiter = false;
  for (const Span& span : spans) {
    if (span.delimiter && behavior == Behavior::kRemoved) continue;
    const std::string_view text = std::string_view(piece.text).substr(span.begin, span.end - span.begin);
    const bool have_previous = out.size() > first_out;
    bool merge = false;
    switch (behavior) {
      case Behavior::kIsolated:
      case Behavior::kRemoved:
        break;
      case Behavior::kMergedWithPrevious:
        merge = span.delimiter && have_previous && !previous_delimiter;
        break;
      case Behavior::kMergedWithNext:
        merge = !span.delimiter && have_previous && previous_delimiter;
        break;
      case Behavior::kContiguous:
        merge = span.delimiter && have_previous && previous_delimiter;
        break;
    }
    if (merge) {
      out.back().text += text;
    } else {
      out.push_back({std::string(text), piece.at_input_start && span.begin == 0});
    }
    previous_delimiter = span.delimiter;
  }
  return absl::OkStatus();
}

bool PreTokenizer::byte_level() const {
  return std::any_of(steps_.begin(), steps_.end(), [](const Step& s) { return s.kind == Step::Kind::kByteLevel; });
}

}  // namespace doppler::tokenizers

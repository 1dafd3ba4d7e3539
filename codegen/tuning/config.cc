#include "codegen/tuning/config.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::codegen::tuning {
namespace {

using Fields = std::vector<std::pair<const char*, int64_t>>;

std::string Join(const Fields& fields) {
  return absl::StrJoin(fields, " ", [](std::string* out, const std::pair<const char*, int64_t>& f) {
    absl::StrAppend(out, f.first, "=", f.second);
  });
}

const char* VariantName(AttentionVariant v) {
  switch (v) {
    case AttentionVariant::kCoop:
      return "coop";
    case AttentionVariant::kBlock:
      return "block";
    case AttentionVariant::kSubgroups:
      return "subgroups";
    case AttentionVariant::kKeys:
      return "keys";
    case AttentionVariant::kToken:
      break;
  }
  return "token";
}

struct Text {
  std::string operator()(std::monostate) const { return "-"; }
  std::string operator()(const GemvShape& s) const {
    return Join({{"tm", s.tm}, {"row_blocks", s.row_blocks}, {"rn", s.rn}, {"wg", s.wg}, {"groups", s.groups},
                 {"load_ahead", s.load_ahead}});
  }
  std::string operator()(const GemvQ8Shape& s) const {
    return Join({{"tm", s.tm},
                 {"row_blocks", s.row_blocks},
                 {"rn", s.rn},
                 {"wg", s.wg},
                 {"team", s.team},
                 {"subgroup_teams", s.subgroup_teams},
                 {"subs", s.subs},
                 {"row_groups", s.row_groups},
                 {"rg_per_team", s.rg_per_team},
                 {"workgroups", s.workgroups},
                 {"seg", s.seg},
                 {"segments", s.segments},
                 {"steps", s.steps},
                 {"batch", s.batch},
                 {"iters", s.iters},
                 {"depth", s.depth},
                 {"flat", s.flat},
                 {"flat_iters", s.flat_iters},
                 {"flat_depth", s.flat_depth},
                 {"hold_restated", s.hold_restated}});
  }
  std::string operator()(const GemmConfig& c) const { return Join({{"bn", c.bn}, {"bk", c.bk}}); }
  std::string operator()(const CoopConfig& c) const {
    return Join({{"bm", c.bm}, {"bn", c.bn}, {"bk", c.bk}, {"sm", c.sm}, {"sn", c.sn}, {"prefetch", c.prefetch}});
  }
  std::string operator()(const CoopRowsConfig& c) const {
    return Join({{"subgroups", c.subgroups},
                 {"ksplit", c.ksplit},
                 {"frags", c.frags},
                 {"bk", c.bk},
                 {"prefetch", c.prefetch},
                 {"x_frags", c.x_frags},
                 {"x_direct", c.x_direct},
                 {"x8", c.x8},
                 {"w_direct", c.w_direct},
                 {"run_pairs", c.run_pairs}});
  }
  std::string operator()(const ExpertGemvConfig& c) const { return Join({{"cols", c.cols}}); }
  // The fields of the variant chosen.
  std::string operator()(const AttentionConfig& c) const {
    Fields fields = {{"wg", c.wg}};
    switch (c.variant) {
      case AttentionVariant::kCoop:
        fields.push_back({"coop_subgroups", c.coop_subgroups});
        break;
      case AttentionVariant::kBlock:
        fields.insert(fields.end(), {{"tpq", c.tpq}, {"qb", c.qb}, {"kc", c.kc}});
        break;
      case AttentionVariant::kSubgroups:
        fields.insert(fields.end(), {{"nsg", c.nsg}, {"min_sg", c.min_sg}, {"kpi", c.kpi}, {"consec", c.consec}});
        break;
      case AttentionVariant::kKeys:
        fields.insert(fields.end(),
                      {{"nsg", c.nsg}, {"min_sg", c.min_sg}, {"key_lanes", c.key_lanes}, {"consec", c.consec},
                       {"key_ahead", c.key_ahead}});
        break;
      case AttentionVariant::kToken:
        break;
    }
    return absl::StrCat("variant=", VariantName(c.variant), " ", Join(fields));
  }
};

}  // namespace

std::string ConfigText(const KernelConfig& config) { return std::visit(Text{}, config); }

}  // namespace doppler::codegen::tuning

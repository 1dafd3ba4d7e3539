#include "codegen/device_class.h"

namespace doppler::codegen {

const char* DeviceClassName(DeviceClass c) {
  switch (c) {
    case DeviceClass::kNvidia: return "nvidia";
    case DeviceClass::kAmd: return "amd";
    case DeviceClass::kIntel: return "intel";
    case DeviceClass::kLavapipe: return "lavapipe";
    case DeviceClass::kGeneric: return "generic";
  }
  return "generic";
}

}  // namespace doppler::codegen

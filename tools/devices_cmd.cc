// doppler devices: every Vulkan device and what doppler probed on it.
#include <cstdio>

#include "backend_vk/device_info.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace doppler::cli {

absl::StatusOr<int> DevicesCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec{"devices", "List the Vulkan devices and their probed features, by index: the other commands' --device N picks one.", {}};
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  absl::StatusOr<std::vector<vk::DeviceInfo>> devices = vk::EnumerateDevices();
  if (!devices.ok()) return devices.status();
  if (devices->empty()) {
    std::printf("no Vulkan devices found (install mesa-vulkan-drivers for the CPU driver lavapipe)\n");
    return 1;
  }
  for (const vk::DeviceInfo& d : *devices) std::printf("%s\n", vk::FormatDeviceInfo(d).c_str());
  return 0;
}

}  // namespace doppler::cli

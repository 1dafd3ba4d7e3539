// The web chat page's files (serve/web/), built into the binary: a CMake step (embed_web.cmake)
// writes them into a generated source, so the page needs nothing at run time.
#pragma once

#include <string_view>
#include <vector>

namespace doppler::serve {

struct WebAsset {
  std::string_view path;          // the URL path: "/" for index.html, "/app.js", ...
  std::string_view content_type;
  std::string_view body;
};

const std::vector<WebAsset>& WebAssets();

}  // namespace doppler::serve

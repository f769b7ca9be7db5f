#include "daemon/file_list.h"

#include <glob.h>

#include <algorithm>

namespace ringfeed {

std::vector<std::string> ExpandFiles(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), GLOB_BRACE | GLOB_TILDE, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      throw std::runtime_error("source.files: pattern '" + pattern + "' matches no file");
    }
    if (rc != 0) {
      globfree(&g);
      throw std::runtime_error("source.files: cannot expand '" + pattern + "' (unreadable directory?)");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

}  // namespace ringfeed

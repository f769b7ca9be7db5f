// The files of a job: source.files globs expanded with glob(3), relative to the current
// working directory, sorted by path, duplicates removed. The order is part of the
// determinism contract (docs/config.md), so it never depends on directory listing order.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ringfeed {

// Throws std::runtime_error naming the pattern when one matches nothing or glob fails
// (a pattern without wildcards must name an existing file).
std::vector<std::string> ExpandFiles(const std::vector<std::string>& patterns);

}  // namespace ringfeed

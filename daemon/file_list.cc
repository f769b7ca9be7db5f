#include "daemon/file_list.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

namespace ringfeed {
namespace {

bool HasWildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Shell-style brace expansion: "a{1,2}b{x,y}" -> a1bx a1by a2bx a2by (nested braces work; a
// brace group without a top-level comma is kept literally). Done here rather than with glob's
// GLOB_BRACE, which silently drops an alternative that matches nothing. At most
// kMaxBraceExpansions paths per pattern (each group multiplies them: 26 groups of two made 67 M
// paths and gigabytes before the first was looked at); more throws TooManyExpansions.
constexpr size_t kMaxBraceExpansions = 100000;
struct TooManyExpansions {};
void ExpandBraces(const std::string& pattern, std::vector<std::string>& out) {
  for (size_t open = pattern.find('{'); open != std::string::npos; open = pattern.find('{', open + 1)) {
    std::vector<size_t> commas;
    int depth = 0;
    size_t close = std::string::npos;
    for (size_t i = open; i < pattern.size() && close == std::string::npos; ++i) {
      if (pattern[i] == '{') ++depth;
      else if (pattern[i] == '}' && --depth == 0) close = i;
      else if (pattern[i] == ',' && depth == 1) commas.push_back(i);
    }
    if (close == std::string::npos) break;  // unbalanced: literal
    if (commas.empty()) continue;           // "{x}": literal, look further
    size_t begin = open + 1;
    commas.push_back(close);
    for (size_t end : commas) {
      ExpandBraces(pattern.substr(0, open) + pattern.substr(begin, end - begin) + pattern.substr(close + 1), out);
      begin = end + 1;
    }
    return;
  }
  if (out.size() == kMaxBraceExpansions) throw TooManyExpansions{};
  out.push_back(pattern);
}

// "; it is written '${DATA:-x}/*.gz': DATA is not set" for an entry that used variables
// (config/job_config.cc substitutes them), "" for one without.
std::string Variables(const std::string& written, const std::string& pattern) {
  if (written.empty() || written == pattern) return "";
  std::set<std::string> named;
  std::string out;
  // Only the references themselves: a default is literal text up to the first '}' (a "${B" in
  // "${A:-${B}}" is not a variable), as config/job_config.cc substitutes them.
  for (size_t start = written.find("${"); start != std::string::npos;) {
    const size_t name_end = written.find_first_of(":}", start + 2);
    const size_t end = written.find('}', start + 2);
    if (name_end == std::string::npos || end == std::string::npos) break;
    const std::string name = written.substr(start + 2, name_end - start - 2);
    start = written.find("${", end + 1);
    if (!named.insert(name).second) continue;
    const char* value = std::getenv(name.c_str());
    out += out.empty() ? " " : ", ";
    out += value == nullptr ? name + " is not set" : *value == '\0' ? name + " is empty" : name + "='" + value + "'";
  }
  return out.empty() ? "" : "; it is written '" + written + "':" + out;
}

// The first directory glob(3) could not open or read while expanding one item (its errfunc
// takes no context: one expansion at a time per thread).
struct GlobError {
  std::string path;
  int error = 0;
};
thread_local GlobError t_glob_error;
int OnGlobError(const char* path, int error) {
  if (t_glob_error.error == 0) t_glob_error = {path, error};
  return 0;  // go on: other directories may match
}

// Why a path without wildcards was not found, when it is not simply missing: "Permission
// denied" for a directory on the way that may not be searched, "File name too long", ...
std::string WhyNotFound(const std::string& item) {
  struct stat st {};
  std::string path = item;
  if (!path.empty() && path[0] == '~') {  // as glob's GLOB_TILDE expands it, for the common case
    if (const char* home = std::getenv("HOME"); home != nullptr && (path.size() == 1 || path[1] == '/')) {
      path = home + path.substr(1);
    }
  }
  if (::stat(path.c_str(), &st) == 0 || errno == ENOENT) return "";
  return std::strerror(errno);
}

[[noreturn]] void NoMatch(const std::string& origin, const std::string& pattern, const std::string& item,
                          const std::string& written) {
  std::string message = origin.empty() ? "source.files: " : origin;
  if (HasWildcard(item)) {
    message += "pattern '" + item + "' matches no file";
  } else if (const std::string why = WhyNotFound(item); !why.empty()) {
    message += "cannot open '" + item + "': " + why;
  } else {
    message += "no such file '" + item + "'";
  }
  if (item != pattern) message += " (from '" + pattern + "')";
  if (t_glob_error.error != 0) {
    message += "; directory '" + t_glob_error.path + "' could not be read: " + std::strerror(t_glob_error.error);
  }
  if (!item.empty() && item[0] != '/' && item[0] != '~') {
    std::error_code ec;
    message += "; relative paths are resolved against the current directory " +
               std::filesystem::current_path(ec).string();
  }
  message += Variables(written, pattern);
  throw std::runtime_error(message);
}

}  // namespace

std::vector<std::string> ExpandFiles(const std::vector<std::string>& patterns, const std::vector<std::string>& origins,
                                     const std::vector<std::string>& as_written) {
  std::vector<std::string> files;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& pattern = patterns[i];
    const std::string origin = i < origins.size() ? origins[i] : "";
    const std::string where = origin.empty() ? "source.files: " : origin;
    if (pattern.find('\0') != std::string::npos) {
      throw std::runtime_error(where + "pattern '" + pattern.substr(0, pattern.find('\0')) +
                               "\\0...' holds a NUL byte (\\u0000), which a path cannot contain");
    }
    std::vector<std::string> items;
    try {
      ExpandBraces(pattern, items);
    } catch (const TooManyExpansions&) {
      throw std::runtime_error(where + "pattern '" + pattern + "' expands to more than " +
                               std::to_string(kMaxBraceExpansions) +
                               " paths ({a,b} groups multiply): use a wildcard (*, ?, [...]) or fewer groups");
    }
    for (const std::string& item : items) {
      glob_t g{};
      t_glob_error = {};
      const int rc = ::glob(item.c_str(), GLOB_TILDE, OnGlobError, &g);
      if (rc != 0) {
        globfree(&g);
        NoMatch(origin, pattern, item, i < as_written.size() ? as_written[i] : "");
      }
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        files.emplace_back(g.gl_pathv[k]);
        // A directory would fail only once the daemon reads it ("not a regular file"), after
        // the start-up looked fine: name it now, with the pattern that reads its files.
        struct stat st {};
        if (::stat(g.gl_pathv[k], &st) == 0 && S_ISDIR(st.st_mode)) {
          const std::string dir = g.gl_pathv[k];
          const std::string base = dir.back() == '/' ? dir : dir + "/";
          globfree(&g);
          throw std::runtime_error(
              where + (HasWildcard(item) ? "pattern '" + item + "' matches the directory '" + dir + "'"
                                         : "'" + item + "' is a directory") +
              ": TFRecord files are listed one by one; for the files in it write '" + base + "*' (or a narrower '" +
              base + "*.tfrecord*')" + (HasWildcard(item) ? ", or narrow the pattern to files" : ""));
        }
      }
      globfree(&g);
    }
  }
  std::sort(files.begin(), files.end());
  // One file named twice (a/./b and a/b, two overlapping globs, a symbolic or hard link to it) is
  // read once, under its first path in sorted order: the same device and inode. A path that
  // can't be stat'ed here keeps its own entry (opening it names the error later).
  std::set<std::pair<dev_t, ino_t>> seen_files;
  std::set<std::string> seen_paths;
  std::vector<std::string> unique;
  for (std::string& f : files) {
    struct stat st {};
    const bool first = ::stat(f.c_str(), &st) == 0 ? seen_files.emplace(st.st_dev, st.st_ino).second
                                                   : seen_paths.insert(f).second;
    if (first) unique.push_back(std::move(f));
  }
  return unique;
}

}  // namespace ringfeed

#include "daemon/file_list.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "config/job_config.h"

namespace ringfeed {
namespace {

// The close of the directory error's suggestion after 'DIR/*': "'" when every entry of the
// directory (hidden ones aside) is a file with the same extension, so 'DIR/*' says it all, else
// "' (or a narrower 'DIR/*.gz': 12 of its 14 entries)" for the extension most of its files have.
std::string NarrowerPattern(const std::string& base) {
  std::error_code ec;
  std::map<std::string, size_t> by_extension;
  size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (++entries > 100000) return "'";
    std::error_code type_ec;
    const size_t dot = name.rfind('.');
    if (entry.is_regular_file(type_ec) && dot != std::string::npos) ++by_extension[name.substr(dot)];
  }
  if (ec || by_extension.empty()) return "'";
  const auto most = std::max_element(by_extension.begin(), by_extension.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  if (most->second == entries) return "'";
  return "' (or a narrower '" + base + "*" + most->first + "': " + std::to_string(most->second) + " of its " +
         std::to_string(entries) + " entries)";
}

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

// `path` with glob(3)'s special characters (*, ?, [, \\) escaped: matches itself only.
std::string EscapeGlob(const std::string& path) {
  std::string out;
  for (const char c : path) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// A "**" path component matches any number of directories, none included (Python's glob with
// recursive=True, bash's globstar): "d/**/*.gz" -> "d/*.gz", "d/a/*.gz", "d/a/b/*.gz", ... for
// every directory below d, in sorted order. Directories whose names start with '.' are not
// entered, nor symbolic links to directories (no loops), nor directories this process may not
// read; at most kMaxGlobstarDirs directories. The base before "**" may hold wildcards and '~'.
// Throws std::runtime_error (kept short: the caller names the pattern) for a trailing "**",
// too many directories, and a directory that cannot be read for another reason.
constexpr size_t kMaxGlobstarDirs = 100000;
void ExpandGlobstar(const std::string& item, std::vector<std::string>& out) {
  size_t at = std::string::npos;  // where the "**" component starts
  for (size_t i = item.find("**"); i != std::string::npos; i = item.find("**", i + 1)) {
    if ((i == 0 || item[i - 1] == '/') && (i + 2 == item.size() || item[i + 2] == '/')) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) {
    out.push_back(item);
    return;
  }
  if (at + 2 == item.size()) {
    throw std::runtime_error("a pattern ending in '**' would list directories: end it with the files, "
                             "e.g. '**/*.tfrecord'");
  }
  const std::string base = item.substr(0, at);  // "" or ending in '/'
  const std::string rest = item.substr(at + 3);
  // The directories to walk, as glob patterns again (escaped: a directory named "run[1]" is
  // not a character class): the base itself, or what its wildcards or '~' match.
  std::vector<std::pair<std::filesystem::path, std::string>> bases;  // (directory, its pattern)
  if (base.empty()) {
    bases.emplace_back(".", "");
  } else if (HasWildcard(base) || base[0] == '~') {
    glob_t g{};
    if (::glob(base.c_str(), GLOB_TILDE | GLOB_ONLYDIR | GLOB_MARK, OnGlobError, &g) == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) {
        std::string dir = g.gl_pathv[k];
        while (dir.ends_with("//")) dir.pop_back();  // "~/" gives HOME + "/", and GLOB_MARK one more
        if (dir.ends_with('/')) bases.emplace_back(dir, EscapeGlob(dir));  // GLOB_MARK: directories end in '/'
      }
    }
    globfree(&g);
  } else {
    bases.emplace_back(base, base);
  }
  std::vector<std::string> dirs;
  for (const auto& [root, pattern] : bases) {
    dirs.push_back(pattern);
    std::error_code error;
    // A directory this process may not read is passed over, as by Python's glob and the shell
    // (its files could not be read either); any other error stops the expansion with its name.
    std::filesystem::recursive_directory_iterator it(root, std::filesystem::directory_options::skip_permission_denied,
                                                     error), end;
    std::vector<std::string> found;
    for (; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      std::error_code kind;
      if (!it->is_directory(kind) || it->is_symlink(kind) || name.starts_with(".")) {
        if (it->is_directory(kind)) it.disable_recursion_pending();
        continue;
      }
      if (dirs.size() + found.size() >= kMaxGlobstarDirs) {
        throw std::runtime_error("'**' walks more than " + std::to_string(kMaxGlobstarDirs) + " directories below '" +
                                 root.string() + "': start it deeper");
      }
      found.push_back(pattern + EscapeGlob(std::filesystem::relative(it->path(), root).string()) + "/");
    }
    if (error && error != std::errc::no_such_file_or_directory && error != std::errc::not_a_directory) {
      throw std::runtime_error("'**' could not read below '" + root.string() + "': " + error.message());
    }
    std::sort(found.begin(), found.end());
    dirs.insert(dirs.end(), found.begin(), found.end());
  }
  for (const std::string& d : dirs) ExpandGlobstar(d + rest, out);  // rest may hold another "**"
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
  // A newline or another control character (from a ${VAR}) shown as \xHH: printed raw it split
  // the message over lines.
  if (HasWildcard(item)) {
    message += "pattern '" + Escaped(item) + "' matches no file";
  } else if (const std::string why = WhyNotFound(item); !why.empty()) {
    message += "cannot open '" + Escaped(item) + "': " + why;
  } else {
    message += "no such file '" + Escaped(item) + "'";
  }
  if (item != pattern) message += " (from '" + Escaped(pattern) + "')";
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

// Appends what glob(3) finds for `one` (a pattern without "**") to `files` and returns glob's
// result. A directory among them throws, naming `item` (the pattern as expanded from the config),
// unless `item` holds "**" (which walks into the directories itself): then it is left out.
int GlobInto(const std::string& one, const std::string& item, const std::string& where,
             std::vector<std::string>& files) {
  const bool globstar = one != item;
  glob_t g{};
  const int rc = ::glob(one.c_str(), GLOB_TILDE, OnGlobError, &g);
  for (size_t k = 0; rc == 0 && k < g.gl_pathc; ++k) {
    files.emplace_back(g.gl_pathv[k]);
    // A directory would fail only once the daemon reads it ("not a regular file"), after
    // the start-up looked fine: name it now, with the pattern that reads its files.
    struct stat st {};
    if (::stat(g.gl_pathv[k], &st) == 0 && S_ISDIR(st.st_mode)) {
      if (globstar) {
        files.pop_back();
        continue;
      }
      const std::string dir = g.gl_pathv[k];
      const std::string base = dir.back() == '/' ? dir : dir + "/";
      globfree(&g);
      throw std::runtime_error(
          where + (HasWildcard(item) ? "pattern '" + item + "' matches the directory '" + dir + "'"
                                     : "'" + item + "' is a directory") +
          ": TFRecord files are listed one by one; for the files in it write '" + base + "*" + NarrowerPattern(base) +
          (HasWildcard(item) ? ", or narrow the pattern to files" : ""));
    }
  }
  globfree(&g);
  return rc;
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
      t_glob_error = {};
      std::vector<std::string> globs;
      try {
        ExpandGlobstar(item, globs);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(where + "pattern '" + item + "': " + e.what());
      }
      size_t matched = 0;
      for (const std::string& one : globs) {
        const size_t before = files.size();
        const int rc = GlobInto(one, item, where, files);
        // Under "**" a directory without a match is no error: another one may have one.
        if (rc != 0 && !(rc == GLOB_NOMATCH && globs.size() > 1)) {
          NoMatch(origin, pattern, item, i < as_written.size() ? as_written[i] : "");
        }
        matched += files.size() - before;
      }
      if (matched == 0) NoMatch(origin, pattern, item, i < as_written.size() ? as_written[i] : "");
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
  // Relative paths become absolute (the current directory prefixed, nothing else changed), so a
  // trainer or ringfeedctl in another directory can open what status --files and the client's
  // files() name, and logs say which file. The order stays that of the paths as written.
  for (std::string& f : unique) {
    std::error_code ec;
    if (!f.empty() && f[0] != '/') {
      std::filesystem::path absolute = std::filesystem::absolute(f, ec);
      if (!ec) f = absolute.string();
    }
  }
  return unique;
}

}  // namespace ringfeed

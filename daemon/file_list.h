// The files of a job: source.files entries expanded with glob(3) (wildcards, {a,b} braces, ~),
// relative paths against the current working directory, sorted by path as written, the same
// file named twice (another spelling, a symbolic or hard link: the same device and inode) read
// once, then relative paths made absolute (the directory prefixed, nothing resolved). The order
// is part of the determinism contract, so it never depends on directory listing order or on the
// directory a relative pattern was resolved against.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ringfeed {

// `origins[i]`, when given, names where patterns[i] was written ("job.yaml:7:5:
// source.files[0]: ") and prefixes errors about it; `as_written[i]`, when given, is the entry
// before ${VAR} substitution (SourceConfig::files_as_written). Throws std::runtime_error when a
// pattern (or one alternative of a brace pattern) matches nothing, or names a file that does not
// exist; the message says which, against which directory a relative pattern was resolved, the
// variables the pattern came from with their values, and why a path could not be looked up when
// it is not simply missing (a directory that may not be read or searched, a name too long).
std::vector<std::string> ExpandFiles(const std::vector<std::string>& patterns,
                                     const std::vector<std::string>& origins = {},
                                     const std::vector<std::string>& as_written = {});

}  // namespace ringfeed

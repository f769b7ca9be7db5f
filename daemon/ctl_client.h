// What `ringfeedctl` asks a running ringfeedd: `list` (jobs with a socket in the runtime
// directory or one of its subdirectories), `status JOB` (the daemon's status object as a table or JSON) and `dump JOB`
// (attach as a consumer through the client library and print every batch as one JSON line,
// exactly what a trainer sees). Protocol: daemon/control_server.h.
//
// Errors: std::runtime_error naming the job, the socket and the fix ("is ringfeedd running?").
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/json_values.h"

namespace ringfeed {

// Where `job`'s socket is: `runtime_dir` when a daemon answers there, else the one
// subdirectory of `runtime_dir` where one does (systemd's RuntimeDirectory=ringfeed/%i gives
// each instance of ringfeed@.service its own, /run/ringfeed/<instance>), else where its socket
// file is (a killed daemon's: the caller's error says so), else `runtime_dir` (nothing runs;
// the caller's error names it). Throws std::runtime_error when several subdirectories hold it.
std::string JobRuntimeDir(const std::string& runtime_dir, const std::string& job);

// Sends one control request ({"type":"status"}, ...) to the job's daemon (its socket found by
// JobRuntimeDir) and returns the reply, a JSON object. Throws std::runtime_error when the job is
// not running, the runtime directory cannot be entered, the daemon does not answer or refuses, its welcome names another job, or a
// message is not a JSON object ("ringfeedd at SOCKET sent a reply ringfeedctl cannot read").
nlohmann::json QueryDaemon(const std::string& runtime_dir, const std::string& job, const nlohmann::json& request);

// `ringfeedctl list`: one line per job socket in the runtime directory and in its immediate
// subdirectories (those name their directory); a job whose daemon does not answer is
// "unreachable", one that answers with what ringfeedctl cannot read "bad reply", each with the
// reason. Returns the number of running jobs. Throws std::runtime_error when the runtime
// directory exists but cannot be read ("cannot read the runtime directory DIR: Permission
// denied (owned by uid U, mode M; ...)"); one that does not exist lists no jobs. With `json`,
// one JSON object: {"runtime_dir", "jobs": [{"job", "runtime_dir", "state", and "status" (the
// daemon's status object, as `status --json`) or "error" (the reason)}]}; a subdirectory that
// cannot be read is an entry with "job": null, "state": "unreadable".
int ListJobs(const std::string& runtime_dir, std::ostream& out, bool json = false);

// `ringfeedctl status`: asks the job's daemon for its status (as QueryDaemon) and prints it as a
// human-readable table, or with `json` as the daemon's JSON object. Throws std::runtime_error,
// having printed nothing, when QueryDaemon does or when a field the table reads has another JSON
// type ("ringfeedd at SOCKET sent a reply ringfeedctl cannot read (FIELD: expected TYPE); ...").
void PrintStatus(const std::string& runtime_dir, const std::string& job, bool json, std::ostream& out);

// `ringfeedctl status --files`: the job's sorted file list, all shards' (the file_index of a row's
// source, in dump's "sources" and the client's Batch::source), one "INDEX<TAB>PATH" line per
// file, or with `json` one object {"total":N,"files":[PATH, ...]}. Throws as QueryDaemon.
void PrintFiles(const std::string& runtime_dir, const std::string& job, bool json, std::ostream& out);

struct DumpOptions {
  std::string job;
  std::string runtime_dir;          // where to look (JobRuntimeDir); empty: the client's default
  std::optional<uint64_t> batches;  // stop after this many; nullopt = until end of data
  int rank = -1;                    // ranks mode: attach as this rank
  double timeout_seconds = 60;      // give up waiting for one batch after this long
  BytesFormat bytes = BytesFormat::kBase64;  // how bytes values are printed (BytesJson)
};
// `ringfeedctl dump`: one line per batch:
//   {"epoch":E,"batch":K,"size":B,"features":{NAME:{"dtype":...,"shape":[...],"values":[...],
//    "row_splits":[...] (VarLen only)}},"sources":[[file_index, record_index], ...]}
// values flat and row-major; bytes base64-encoded (RFC 4648), or as `bytes` says (BytesJson);
// NaN and infinities as the strings
// "nan", "inf", "-inf". Returns the number of batches printed and whether it stopped at the
// end of the data (every epoch produced and taken) rather than at `batches` or a closed `out`.
struct DumpResult {
  uint64_t printed = 0;
  bool end_of_data = false;
  std::string end_reason;  // at the end of data: why, when the daemon ended it early (Client::end_reason)
  int write_errno = 0;  // writing `out` failed with this (EPIPE: the reader went away); 0: it did not
  // SIGINT, SIGTERM or SIGHUP ended the dump (its number; 0: none): a batch already taken was
  // printed first, so the job loses none that the dump did not show. A second such signal
  // ends the process at once (the default action).
  int stopped_by = 0;
};
DumpResult DumpBatches(const DumpOptions& options, std::ostream& out);

}  // namespace ringfeed

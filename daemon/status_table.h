// The `ringfeedctl status` table: a daemon's status reply (daemon/status_report.h, StatusJson;
// its fields are described in docs/operations.md) as the lines people read, and the units they
// are written in, which `list` and `dump` use too.
//
// Errors: a field of another JSON type than the status gives it throws BadReplyField
// (daemon/reply_fields.h); a missing one prints as its fallback (an older ringfeedd).
// Thread-safety: plain functions.
#pragma once

#include <ostream>
#include <string>

#include "daemon/reply_fields.h"

namespace ringfeed {

// Seconds for people: "12.3 s" below 2 min, "4.5 min" below 2 h, else "2.0 h".
std::string SecondsText(double s);
// The same with hundredths below 10 s ("0.25 s", and "0.005 s" below 0.01 s): for stretches
// that may be short (a run of the quickstart).
std::string FineSecondsText(double s);
// Bytes in binary units: "512 B", "1.5 KiB", "2.0 MiB", up to TiB.
std::string BytesText(double b);

// Why a status's rates are the trainers' pace and not the loader's speed (production waited for
// them for most of the tuner's last interval: the ring full, or no trainer attached), as a phrase
// ("ring full or prefetch depth reached", "no trainer attached", ...); "" when they are the loader's.
std::string TrainersPace(const ReplyFields& status);

// Writes the status table (job, state, progress, throughput, ring, pipeline, memory, autotune,
// consumers, ranks, errors; one labelled line each, with indented lines that explain) to `out`.
void PrintStatusTable(const ReplyFields& status, std::ostream& out);

}  // namespace ringfeed

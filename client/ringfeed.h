/* ringfeed.h: the client library's C ABI, for trainers in C or behind an FFI (ctypes, cffi,
 * Rust, Go). A thin layer over client/client.h; docs/client.md is the reference.
 *
 *   rf_attach_options opts = {.struct_size = sizeof opts, .job = "train", .rank = -1};
 *   rf_client* client; char err[512];
 *   if (rf_attach(&opts, &client, err, sizeof err) != RF_OK) { fprintf(stderr, "%s\n", err); ... }
 *   rf_batch* batch; int status;
 *   while ((status = rf_next(client, 30000, &batch, err, sizeof err)) != RF_END_OF_DATA) {
 *     if (status == RF_TIMEOUT) continue;           (a status, not an error: rf_timeout_reason)
 *     if (status == RF_ERROR) { fprintf(stderr, "%s\n", err); break; }
 *     rf_tensor t = {.struct_size = sizeof t};
 *     rf_batch_feature(batch, 0, &t);               (t.data, t.bytes, t.shape[0..t.rank-1], ...)
 *     rf_batch_release(batch);                      (hands the slot back; frees the handle)
 *   }
 *   rf_detach(client);
 *
 * Versioned structs: every struct passed in or out starts with `size_t struct_size`, which
 * the caller sets to sizeof(the struct) as it was compiled. The library reads only the fields
 * an input struct's size covers (later fields take their defaults) and writes only the fields
 * an output struct's size covers, so programs built against an older header keep working. A
 * struct_size smaller than the first version's is an error that names the size needed: for
 * output structs (rf_batch_info, rf_tensor, rf_feature, rf_row_source) their whole size in
 * this header, for rf_attach_options the part up to and including `job`.
 *
 * Errors: the functions that return int return RF_OK (0) or another RF_* status; those that
 * return a count, an index or a length return it, or RF_ERROR (-1) where their comment says so
 * (rf_schema_count, rf_schema_batch_size and rf_consumer_id return 0 instead). An error comes
 * with a message: written to `err` (at most err_len bytes, always NUL-terminated; err may be
 * NULL) where the function has that parameter, and always kept for the calling thread by
 * rf_last_error(). Every function but rf_last_error clears it on entry, so after a call it
 * holds that call's error or "". No C++ exception crosses this boundary.
 *
 * Lifetimes: an rf_batch holds its shared-memory slot until rf_batch_release; pointers in an
 * rf_tensor (data, value_offsets, row_splits, name) are valid until then. rf_detach may be
 * called with batches still held: the connection and mapping stay until the last is released.
 * rf_batch_release and rf_detach free their handle, as free() does: a handle must not be used,
 * released or detached again after that (a second call is undefined behaviour, typically a
 * crash; set your pointer to NULL after the call, which both accept).
 * Threads: every function may be called on one client from several threads at once (rf_next
 * too: each call gets a different batch), and on one batch (rf_batch_get_info,
 * rf_batch_feature, rf_batch_source), except the two that free a handle: one rf_batch must not
 * be used from two threads while one of them releases it; rf_detach frees the client, so no
 * other thread may be in (or enter) a call on that client then. Batches may be released after.
 * fork(): a child must not use its parent's client or batches; attach anew in the child.
 */
#ifndef RINGFEED_CLIENT_RINGFEED_H_
#define RINGFEED_CLIENT_RINGFEED_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RF_ABI_VERSION 1

/* Status codes. */
#define RF_OK 0
#define RF_TIMEOUT 1         /* rf_next: nothing arrived within the timeout */
#define RF_END_OF_DATA 2     /* rf_next: the job's data has ended (every later call too) */
#define RF_ERROR (-1)        /* see the message */

/* dtype (the ring's numbering, shm/dtype.h's; source: format/feature_spec.h). */
#define RF_INT64 0
#define RF_FLOAT32 1
#define RF_BYTES 2
#define RF_UINT8 3
#define RF_INT8 4
#define RF_UINT16 5
#define RF_INT16 6
#define RF_INT32 7
#define RF_UINT32 8
#define RF_FLOAT64 9

/* Feature type. */
#define RF_FIXED_LEN 0
#define RF_VAR_LEN 1

/* rf_batch_info.flags */
#define RF_BATCH_END_OF_EPOCH 1u
#define RF_BATCH_END_OF_DATA 2u

#define RF_MAX_SHAPE 9 /* rows + up to 8 per-row dimensions */

typedef struct rf_client rf_client;
typedef struct rf_batch rf_batch;

typedef struct rf_attach_options {
  size_t struct_size;          /* sizeof(rf_attach_options) */
  const char* job;             /* required */
  int32_t rank;                /* consumers.mode ranks: 0..ranks-1; else -1 */
  const char* runtime_dir;     /* NULL or "" = default (RINGFEED_RUNTIME_DIR, ...) */
  int64_t liveness_timeout_ms; /* <= 0 = default (10000); above 2^31 - 1 taken as that */
  int64_t attach_timeout_ms;   /* wait this long for a daemon not listening yet (retried every
                                  100 ms); <= 0 = one try (ClientOptions::attach_timeout) */
} rf_attach_options;

typedef struct rf_batch_info {
  size_t struct_size; /* sizeof(rf_batch_info) */
  uint64_t epoch;     /* 0-based */
  uint64_t index;     /* batch index within the epoch */
  uint32_t rows;      /* records in the batch */
  uint32_t flags;     /* RF_BATCH_END_OF_EPOCH | RF_BATCH_END_OF_DATA */
} rf_batch_info;

/* One feature's column (see client/tensor_view.h for the layouts). */
typedef struct rf_tensor {
  size_t struct_size;             /* sizeof(rf_tensor) */
  const char* name;               /* NUL-terminated */
  int32_t dtype;                  /* RF_INT64, ... */
  int32_t type;                   /* RF_FIXED_LEN or RF_VAR_LEN */
  uint32_t rank;                  /* entries used in shape */
  int64_t shape[RF_MAX_SHAPE];    /* fixed: {rows, dims...}; varlen: {values or strings} */
  void* data;                     /* values (numbers, or the strings' bytes); writable */
  uint64_t bytes;                 /* size of data in bytes */
  const int64_t* value_offsets;   /* bytes dtype: strings + 1 entries; else NULL */
  uint64_t value_offsets_count;
  const int64_t* row_splits;      /* varlen: rows + 1 entries; else NULL */
  uint64_t row_splits_count;
} rf_tensor;

/* A feature of the schema (no batch needed). */
typedef struct rf_feature {
  size_t struct_size;          /* sizeof(rf_feature) */
  const char* name;            /* valid until rf_detach (and all its batches released) */
  int32_t dtype;
  int32_t type;
  uint32_t rank;               /* per-row dims (fixed only) */
  int64_t shape[RF_MAX_SHAPE - 1];
} rf_feature;

typedef struct rf_row_source {
  size_t struct_size;    /* sizeof(rf_row_source) */
  uint32_t file_index;   /* in the job's file list */
  uint64_t record_index; /* 0-based, in that file */
} rf_row_source;

/* Attaches to ringfeedd for options->job. On RF_OK, *client must be rf_detach'ed; on RF_ERROR
 * *client is NULL (client itself must not be NULL) and err says why. */
int rf_attach(const rf_attach_options* options, rf_client** client, char* err, size_t err_len);
/* Detaches (NULL is fine) and frees the handle: never call it twice on one client. Batches
 * still held stay valid until released. */
void rf_detach(rf_client* client);

/* Waits at most timeout_ms (0 = just look, < 0 = no limit) for the next batch. RF_OK: *batch
 * is set and must be rf_batch_release'd. RF_TIMEOUT / RF_END_OF_DATA: *batch is NULL. RF_ERROR:
 * daemon exited, failed, stopped, froze, or wrote an invalid batch (see err). err is "" after
 * anything but RF_ERROR. */
int rf_next(rf_client* client, int64_t timeout_ms, rf_batch** batch, char* err, size_t err_len);

/* The batch's epoch, index, rows and flags into *info (as far as info->struct_size reaches).
 * RF_ERROR for a NULL argument or a struct_size below this version's. */
int rf_batch_get_info(const rf_batch* batch, rf_batch_info* info);
/* Feature `index` (schema order) of the batch. The first call for a column checks its row_splits /
 * value_offsets entries against the slot. RF_ERROR when index >= rf_schema_count, or when an entry
 * is invalid (rf_last_error names the feature, entry and value; release that batch). */
int rf_batch_feature(const rf_batch* batch, size_t index, rf_tensor* tensor);
/* Index of the feature called `name`, or -1 with rf_last_error set (no such feature, a NULL
 * argument). Check it before passing it as rf_batch_feature's size_t index: -1 converts to
 * SIZE_MAX, which rf_batch_feature refuses with RF_ERROR. */
int64_t rf_feature_index(const rf_client* client, const char* name);
/* Where row `row` (0-based, < rf_batch_info.rows) came from: its file (an index into the
 * job's file list: rf_file_path) and its record index in that file. RF_ERROR for a row out of
 * range ("row R out of range: the batch has N rows"), a NULL argument or a struct_size below
 * this version's. */
int rf_batch_source(const rf_batch* batch, size_t row, rf_row_source* source);
/* The job's file list, which rf_row_source.file_index indexes: fetched from the daemon on
 * the first call of either function (one round trip per ~60 KiB of paths), then kept.
 * rf_file_count: how many files, or RF_ERROR (-1; rf_last_error says why: the daemon gone or
 * restarted since rf_attach). rf_file_path: copies file `index`'s path into buf (at most
 * buf_len - 1 bytes, NUL-terminated; buf may be NULL with buf_len 0) and returns the path's
 * full length in bytes (a result >= buf_len means it was cut), or RF_ERROR (an index out of
 * range too). Thread-safe. */
int64_t rf_file_count(rf_client* client);
int64_t rf_file_path(rf_client* client, size_t index, char* buf, size_t buf_len);
/* Why the data ended, once rf_next has returned RF_END_OF_DATA (Client::end_reason): copies it
 * into buf as rf_file_path does and returns its full length in bytes; 0 after an ordinary end
 * (every epoch served) and while the data has not ended; RF_ERROR for a NULL argument.
 * Thread-safe. */
int64_t rf_end_reason(const rf_client* client, char* buf, size_t buf_len);
/* Why rf_next may have timed out, from the ring as it is now (Client::timeout_reason): every
 * slot held (by whom, and what to do), or in consumers.mode ranks the ranks that hold this one
 * up (a rank without a consumer, or one whose trainer does not take its batches). Copies it into
 * buf as rf_file_path does and returns its full length in bytes; 0 when nothing of that applies
 * (slow data, or a daemon that stopped producing: ringfeedctl status JOB says which);
 * RF_ERROR for a NULL argument. Call it after RF_TIMEOUT; a timeout sets no rf_last_error.
 * Thread-safe. */
int64_t rf_timeout_reason(const rf_client* client, char* buf, size_t buf_len);
/* Hands the slot back to the daemon and frees the handle (NULL is fine): never call it twice
 * on one batch. */
void rf_batch_release(rf_batch* batch);

/* rf_schema_count, rf_schema_batch_size, rf_consumer_id: 0 for a NULL client, with
 * rf_last_error "FN: NULL argument" (cleared on success, as every function here does). */
size_t rf_schema_count(const rf_client* client);
/* Feature `index` (schema order, < rf_schema_count) into *feature; RF_ERROR for an index out of
 * range, a NULL argument or a struct_size below this version's. */
int rf_schema_feature(const rf_client* client, size_t index, rf_feature* feature);
uint32_t rf_schema_batch_size(const rf_client* client);
uint32_t rf_consumer_id(const rf_client* client);

/* "int64", "float32", "bytes", ...; "unknown" for other values. Static storage. */
const char* rf_dtype_name(int32_t dtype);
/* The calling thread's last error message ("" if none). Valid until its next rf_ call. */
const char* rf_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* RINGFEED_CLIENT_RINGFEED_H_ */

// The C ABI (client/ringfeed.h) over the C++ client. Every entry point catches everything:
// no exception crosses into C.
#include "client/ringfeed.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "client/client.h"
#include "shm/names.h"

struct rf_client {
  std::unique_ptr<ringfeed::Client> client;
};

struct rf_batch {
  ringfeed::Batch batch;
};

namespace {

// Sizes of the first ABI version: the smallest struct_size accepted for output structs.
// Freeze these when a struct grows (new fields go at the end). Input structs (options) only
// need to cover `job`.
constexpr size_t kBatchInfoV1 = sizeof(rf_batch_info);
constexpr size_t kTensorV1 = sizeof(rf_tensor);
constexpr size_t kFeatureV1 = sizeof(rf_feature);
constexpr size_t kRowSourceV1 = sizeof(rf_row_source);

thread_local std::string last_error;

// Copies `text` into buf (at most buf_len - 1 bytes, NUL-terminated; nothing when buf_len is 0)
// and returns its full length in bytes: a result >= buf_len means it was cut.
int64_t CopyOutText(const std::string& text, char* buf, size_t buf_len) {
  if (buf_len > 0) {
    const size_t n = std::min(text.size(), buf_len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int64_t>(text.size());
}

int Fail(const std::string& message, char* err, size_t err_len) {
  try {
    last_error = message;
  } catch (...) {
  }
  if (err != nullptr) CopyOutText(message, err, err_len);
  return RF_ERROR;
}

int Fail(const std::string& message) { return Fail(message, nullptr, 0); }

void ClearError(char* err, size_t err_len) {
  last_error.clear();
  if (err != nullptr && err_len > 0) err[0] = '\0';
}

// Copies `full` into the caller's struct, as far as its struct_size reaches.
template <typename T>
void CopyOut(const T& full, T* out) {
  const size_t size = out->struct_size;
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              std::min(size, sizeof(T)) - sizeof(size_t));
}

// "FN: ARG->struct_size N is too small: set it to sizeof(TYPE) (M in this version)".
std::string TooSmall(const char* fn, const char* arg, size_t given, size_t needed, const char* type) {
  return std::string(fn) + ": " + arg + "->struct_size " + std::to_string(given) + " is too small: set it to sizeof(" +
         type + ") (" + std::to_string(needed) + " in this version)";
}

template <typename T>
bool Covers(const T* in, size_t field_offset, size_t field_size) {
  return in->struct_size >= field_offset + field_size;
}

// "rf_FUNCTION: " before a message from the C++ layer, as every message of this file has.
std::string Prefixed(const char* what, const char* message) {
  const size_t n = std::strlen(what);
  if (std::strncmp(message, what, n) == 0 && message[n] == ':') return message;
  return std::string(what) + ": " + message;
}

int Guard(const char* what, char* err, size_t err_len, auto&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(std::string(what) + ": out of memory", err, err_len);
  } catch (const std::exception& e) {
    return Fail(Prefixed(what, e.what()), err, err_len);
  } catch (...) {
    return Fail(std::string(what) + ": unknown error", err, err_len);
  }
}

// rf_end_reason, rf_timeout_reason: the client's `text` copied out as CopyOutText does (its full
// length), or RF_ERROR for a NULL argument (`what` names the function).
int64_t CopyOutClientText(const char* what, const rf_client* client, std::string (ringfeed::Client::*text)() const,
                          char* buf, size_t buf_len) {
  ClearError(nullptr, 0);
  if (client == nullptr || (buf == nullptr && buf_len != 0)) return Fail(std::string(what) + ": NULL argument");
  int64_t length = RF_ERROR;
  const int rc = Guard(what, nullptr, 0, [&] {
    length = CopyOutText((*client->client.*text)(), buf, buf_len);
    return RF_OK;
  });
  return rc == RF_OK ? length : RF_ERROR;
}

}  // namespace

extern "C" {

int rf_attach(const rf_attach_options* options, rf_client** client, char* err, size_t err_len) {
  ClearError(err, err_len);
  if (client == nullptr) return Fail("rf_attach: client is NULL", err, err_len);
  *client = nullptr;
  if (options == nullptr) return Fail("rf_attach: options is NULL", err, err_len);
  if (options->struct_size < offsetof(rf_attach_options, job) + sizeof(options->job)) {
    return Fail("rf_attach: options->struct_size " + std::to_string(options->struct_size) +
                    " is too small; set it to sizeof(rf_attach_options) (at least " +
                    std::to_string(offsetof(rf_attach_options, job) + sizeof(options->job)) + ": up to `job`)",
                err, err_len);
  }
  return Guard("rf_attach", err, err_len, [&] {
    ringfeed::ClientOptions o;
    if (options->job == nullptr || options->job[0] == '\0') {
      return Fail(std::string("rf_attach: options->job is ") + (options->job == nullptr ? "NULL" : "empty") +
                      ": set it to the job's name",
                  err, err_len);
    }
    o.job = options->job;
    if (!ringfeed::shm::IsValidJobName(o.job)) {
      return Fail("rf_attach: options->job '" + o.job + "' is not a job name: " +
                  ringfeed::shm::kJobNameRule + " (the job: key of its config)", err, err_len);
    }
    if (Covers(options, offsetof(rf_attach_options, rank), sizeof options->rank)) o.rank = options->rank;
    if (o.rank < -1) {
      return Fail("rf_attach: options->rank " + std::to_string(o.rank) +
                  ": a rank is 0 or more (consumers.mode: ranks), or -1 for shared mode", err, err_len);
    }
    if (Covers(options, offsetof(rf_attach_options, runtime_dir), sizeof options->runtime_dir) &&
        options->runtime_dir != nullptr) {
      o.runtime_dir = options->runtime_dir;
    }
    if (Covers(options, offsetof(rf_attach_options, liveness_timeout_ms), sizeof options->liveness_timeout_ms) &&
        options->liveness_timeout_ms > 0) {
      o.liveness_timeout = std::chrono::milliseconds(options->liveness_timeout_ms);
    }
    if (Covers(options, offsetof(rf_attach_options, attach_timeout_ms), sizeof options->attach_timeout_ms) &&
        options->attach_timeout_ms > 0) {
      o.attach_timeout = std::chrono::milliseconds(options->attach_timeout_ms);
    }
    auto handle = std::make_unique<rf_client>();
    handle->client = ringfeed::Client::Attach(o);
    *client = handle.release();
    return RF_OK;
  });
}

void rf_detach(rf_client* client) {
  ClearError(nullptr, 0);
  try {
    delete client;
  } catch (...) {
  }
}

int rf_next(rf_client* client, int64_t timeout_ms, rf_batch** batch, char* err, size_t err_len) {
  ClearError(err, err_len);
  if (batch == nullptr) return Fail("rf_next: batch is NULL", err, err_len);
  *batch = nullptr;
  if (client == nullptr) return Fail("rf_next: client is NULL", err, err_len);
  return Guard("rf_next", err, err_len, [&] {
    // new rf_batch, not make_unique<rf_batch>(): value-initialization would zero the
    // Batch's 12 KiB inline column table on every call.
    std::unique_ptr<rf_batch> handle(new rf_batch);
    const auto timeout = timeout_ms < 0 ? std::chrono::milliseconds::max() : std::chrono::milliseconds(timeout_ms);
    const auto status = client->client->Next(timeout, &handle->batch);
    switch (status) {
      case ringfeed::Client::Status::kBatch:
        *batch = handle.release();
        return RF_OK;
      case ringfeed::Client::Status::kTimeout:
        return RF_TIMEOUT;
      case ringfeed::Client::Status::kEndOfData:
        return RF_END_OF_DATA;
    }
    return Fail("rf_next: unknown status", err, err_len);
  });
}

int rf_batch_get_info(const rf_batch* batch, rf_batch_info* info) {
  ClearError(nullptr, 0);
  if (batch == nullptr || info == nullptr) return Fail("rf_batch_get_info: NULL argument");
  if (info->struct_size < kBatchInfoV1) {
    return Fail(TooSmall("rf_batch_get_info", "info", info->struct_size, kBatchInfoV1, "rf_batch_info"));
  }
  return Guard("rf_batch_get_info", nullptr, 0, [&] {
    rf_batch_info full{};
    full.epoch = batch->batch.epoch();
    full.index = batch->batch.index();
    full.rows = batch->batch.rows();
    full.flags = (batch->batch.end_of_epoch() ? RF_BATCH_END_OF_EPOCH : 0u) |
                 (batch->batch.end_of_data() ? RF_BATCH_END_OF_DATA : 0u);
    CopyOut(full, info);
    return RF_OK;
  });
}

int rf_batch_feature(const rf_batch* batch, size_t index, rf_tensor* tensor) {
  ClearError(nullptr, 0);
  if (batch == nullptr || tensor == nullptr) return Fail("rf_batch_feature: NULL argument");
  if (tensor->struct_size < kTensorV1) {
    return Fail(TooSmall("rf_batch_feature", "tensor", tensor->struct_size, kTensorV1, "rf_tensor"));
  }
  return Guard("rf_batch_feature", nullptr, 0, [&] {
    const ringfeed::TensorView v = batch->batch.feature(index);
    rf_tensor full{};
    full.name = v.name().data();  // a std::string's buffer: NUL-terminated
    full.dtype = static_cast<int32_t>(v.dtype());
    full.type = static_cast<int32_t>(v.type());
    const auto shape = v.shape();
    full.rank = static_cast<uint32_t>(std::min<size_t>(shape.size(), RF_MAX_SHAPE));
    std::copy_n(shape.begin(), full.rank, full.shape);
    full.data = v.mutable_data();
    full.bytes = v.bytes();
    if (!v.value_offsets().empty()) {
      full.value_offsets = v.value_offsets().data();
      full.value_offsets_count = v.value_offsets().size();
    }
    if (!v.row_splits().empty()) {
      full.row_splits = v.row_splits().data();
      full.row_splits_count = v.row_splits().size();
    }
    CopyOut(full, tensor);
    return RF_OK;
  });
}

int64_t rf_feature_index(const rf_client* client, const char* name) {
  ClearError(nullptr, 0);
  if (client == nullptr || name == nullptr) return Fail("rf_feature_index: NULL argument");
  int64_t index = RF_ERROR;
  const int rc = Guard("rf_feature_index", nullptr, 0, [&] {
    const auto found = client->client->schema().IndexOf(name);
    if (!found) return Fail("rf_feature_index: the job has no feature '" + std::string(name) + "'");
    index = static_cast<int64_t>(*found);
    return RF_OK;
  });
  return rc == RF_OK ? index : RF_ERROR;
}

int64_t rf_file_count(rf_client* client) {
  ClearError(nullptr, 0);
  if (client == nullptr) return Fail("rf_file_count: NULL client");
  int64_t count = RF_ERROR;
  const int rc = Guard("rf_file_count", nullptr, 0, [&] {
    count = static_cast<int64_t>(client->client->files().size());
    return RF_OK;
  });
  return rc == RF_OK ? count : RF_ERROR;
}

int64_t rf_file_path(rf_client* client, size_t index, char* buf, size_t buf_len) {
  ClearError(nullptr, 0);
  if (client == nullptr || (buf == nullptr && buf_len != 0)) return Fail("rf_file_path: NULL argument");
  int64_t length = RF_ERROR;
  const int rc = Guard("rf_file_path", nullptr, 0, [&] {
    const std::vector<std::string>& files = client->client->files();
    if (index >= files.size()) {
      return Fail("rf_file_path: file " + std::to_string(index) + " out of range: the job has " +
                  std::to_string(files.size()) + " files");
    }
    length = CopyOutText(files[index], buf, buf_len);
    return RF_OK;
  });
  return rc == RF_OK ? length : RF_ERROR;
}

int64_t rf_end_reason(const rf_client* client, char* buf, size_t buf_len) {
  return CopyOutClientText("rf_end_reason", client, &ringfeed::Client::end_reason, buf, buf_len);
}

int64_t rf_timeout_reason(const rf_client* client, char* buf, size_t buf_len) {
  return CopyOutClientText("rf_timeout_reason", client, &ringfeed::Client::timeout_reason, buf, buf_len);
}

int rf_batch_source(const rf_batch* batch, size_t row, rf_row_source* source) {
  ClearError(nullptr, 0);
  if (batch == nullptr || source == nullptr) return Fail("rf_batch_source: NULL argument");
  if (source->struct_size < kRowSourceV1) {
    return Fail(TooSmall("rf_batch_source", "source", source->struct_size, kRowSourceV1, "rf_row_source"));
  }
  return Guard("rf_batch_source", nullptr, 0, [&] {
    const ringfeed::shm::RowSource s = batch->batch.source(row);
    rf_row_source full{};
    full.file_index = s.file_index;
    full.record_index = s.record_index;
    CopyOut(full, source);
    return RF_OK;
  });
}

void rf_batch_release(rf_batch* batch) {
  ClearError(nullptr, 0);
  try {
    delete batch;
  } catch (...) {
  }
}

size_t rf_schema_count(const rf_client* client) {
  ClearError(nullptr, 0);
  if (client == nullptr) {
    Fail("rf_schema_count: NULL argument");
    return 0;
  }
  return client->client->schema().features.size();
}

int rf_schema_feature(const rf_client* client, size_t index, rf_feature* feature) {
  ClearError(nullptr, 0);
  if (client == nullptr || feature == nullptr) return Fail("rf_schema_feature: NULL argument");
  if (feature->struct_size < kFeatureV1) {
    return Fail(TooSmall("rf_schema_feature", "feature", feature->struct_size, kFeatureV1, "rf_feature"));
  }
  const auto& features = client->client->schema().features;
  if (index >= features.size()) {
    return Fail("rf_schema_feature: index " + std::to_string(index) + " out of range (" +
                std::to_string(features.size()) + " features)");
  }
  const ringfeed::FeatureInfo& f = features[index];
  rf_feature full{};
  full.name = f.name.c_str();
  full.dtype = static_cast<int32_t>(f.dtype);
  full.type = static_cast<int32_t>(f.type);
  full.rank = static_cast<uint32_t>(std::min<size_t>(f.shape.size(), RF_MAX_SHAPE - 1));
  std::copy_n(f.shape.begin(), full.rank, full.shape);
  CopyOut(full, feature);
  return RF_OK;
}

uint32_t rf_schema_batch_size(const rf_client* client) {
  ClearError(nullptr, 0);
  if (client == nullptr) {
    Fail("rf_schema_batch_size: NULL argument");
    return 0;
  }
  return client->client->schema().batch_size;
}

uint32_t rf_consumer_id(const rf_client* client) {
  ClearError(nullptr, 0);
  if (client == nullptr) {
    Fail("rf_consumer_id: NULL argument");
    return 0;
  }
  return client->client->consumer_id();
}

const char* rf_dtype_name(int32_t dtype) {
  ClearError(nullptr, 0);
  if (dtype < 0 || dtype >= ringfeed::shm::kDTypeCount) return "unknown";
  return ringfeed::shm::DTypeName(static_cast<ringfeed::shm::DType>(dtype)).data();
}

const char* rf_last_error(void) { return last_error.c_str(); }

}  // extern "C"

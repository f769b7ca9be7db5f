/* The client's C ABI used from C (this file is compiled as C11): attach, schema, every batch's
 * columns, row sources, end of data, versioned structs and errors. Called by
 * client_c_abi_test.cc, which runs the test producer. Returns 0, or writes what went wrong. */
#include <stdio.h>
#include <string.h>

#include "client/ringfeed.h"

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      snprintf(report, report_len, "%s:%d: %s (last error: %s)", __FILE__, __LINE__, #cond, \
               rf_last_error());                                                         \
      goto fail;                                                                         \
    }                                                                                    \
  } while (0)

int rf_c_abi_roundtrip(const char* runtime_dir, int expected_batches, char* report, size_t report_len) {
  rf_client* client = NULL;
  rf_batch* batch = NULL;
  char err[512];
  int batches = 0;

  /* Errors come back as RF_ERROR with a message, never as a crash. */
  rf_attach_options bad = {.struct_size = 4};
  EXPECT(rf_attach(&bad, &client, err, sizeof err) == RF_ERROR);
  EXPECT(strstr(err, "struct_size") != NULL);
  EXPECT(client == NULL);
  EXPECT(rf_attach(NULL, &client, err, sizeof err) == RF_ERROR);
  EXPECT(rf_next(NULL, 0, &batch, err, sizeof err) == RF_ERROR);
  {
    rf_attach_options nodaemon = {.struct_size = sizeof nodaemon};
    nodaemon.job = "nojob";
    nodaemon.rank = -1;
    nodaemon.runtime_dir = runtime_dir;
    EXPECT(rf_attach(&nodaemon, &client, err, 16) == RF_ERROR);
    EXPECT(strlen(err) == 15); /* truncated to err_len, NUL-terminated */
    EXPECT(strstr(rf_last_error(), "is ringfeedd running for job nojob") != NULL);
    nodaemon.rank = -5; /* the C names in the message */
    EXPECT(rf_attach(&nodaemon, &client, err, sizeof err) == RF_ERROR);
    EXPECT(strstr(err, "rf_attach: options->rank -5: a rank is 0 or more") != NULL);
    nodaemon.rank = -1;
    nodaemon.job = NULL;
    EXPECT(rf_attach(&nodaemon, &client, err, sizeof err) == RF_ERROR);
    EXPECT(strcmp(err, "rf_attach: options->job is NULL: set it to the job's name") == 0);
    nodaemon.job = "../../etc/passwd"; /* a job name becomes a path: never one outside the runtime directory */
    EXPECT(rf_attach(&nodaemon, &client, err, sizeof err) == RF_ERROR);
    EXPECT(strstr(err, "rf_attach: options->job '../../etc/passwd' is not a job name") != NULL);
    nodaemon.job = "nojob";
    nodaemon.attach_timeout_ms = 300; /* waits, then names the wait */
    EXPECT(rf_attach(&nodaemon, &client, err, sizeof err) == RF_ERROR);
    EXPECT(strstr(err, "(tried for 0.3 s: attach_timeout)") != NULL);
  }

  /* An options struct from an "older" program: no liveness_timeout_ms field. */
  rf_attach_options options = {.struct_size = offsetof(rf_attach_options, liveness_timeout_ms)};
  options.job = "cjob";
  options.rank = -1;
  options.runtime_dir = runtime_dir;
  EXPECT(rf_attach(&options, &client, err, sizeof err) == RF_OK);
  EXPECT(err[0] == '\0');
  EXPECT(rf_consumer_id(client) >= 1);
  EXPECT(rf_schema_batch_size(client) == 4);
  EXPECT(rf_schema_count(client) == 4);
  {
    rf_feature f = {.struct_size = sizeof f};
    EXPECT(rf_schema_feature(client, 2, &f) == RF_OK);
    EXPECT(strcmp(f.name, "key") == 0);
    EXPECT(f.dtype == RF_BYTES && f.type == RF_FIXED_LEN && f.rank == 1 && f.shape[0] == 2);
    EXPECT(rf_schema_feature(client, 4, &f) == RF_ERROR);
    EXPECT(strcmp(rf_dtype_name(f.dtype), "bytes") == 0);
    EXPECT(rf_last_error()[0] == '\0'); /* every function clears it (here: rf_schema_feature's error) */
    EXPECT(rf_feature_index(client, "pixels") == 3);
    EXPECT(rf_last_error()[0] == '\0');
    EXPECT(rf_feature_index(client, "nope") == -1);
    EXPECT(strcmp(rf_last_error(), "rf_feature_index: the job has no feature 'nope'") == 0);
    EXPECT(rf_feature_index(client, NULL) == -1);
    EXPECT(strcmp(rf_last_error(), "rf_feature_index: NULL argument") == 0);
    /* The schema's getters clear the last error on success and set it for a NULL client. */
    EXPECT(rf_schema_count(client) == 4 && rf_last_error()[0] == '\0');
    EXPECT(rf_schema_count(NULL) == 0);
    EXPECT(strcmp(rf_last_error(), "rf_schema_count: NULL argument") == 0);
    EXPECT(rf_schema_batch_size(NULL) == 0);
    EXPECT(strcmp(rf_last_error(), "rf_schema_batch_size: NULL argument") == 0);
    EXPECT(rf_consumer_id(NULL) == 0);
    EXPECT(strcmp(rf_last_error(), "rf_consumer_id: NULL argument") == 0);
    EXPECT(rf_consumer_id(client) >= 1 && rf_last_error()[0] == '\0');
  }

  for (;;) {
    int status = rf_next(client, 10000, &batch, err, sizeof err);
    if (status == RF_END_OF_DATA) break;
    EXPECT(status == RF_OK);
    rf_batch_info info = {.struct_size = sizeof info};
    EXPECT(rf_batch_get_info(batch, &info) == RF_OK);
    EXPECT(info.index == (uint64_t)batches);
    uint64_t first = info.index * 4;

    rf_tensor label = {.struct_size = sizeof label};
    EXPECT(rf_batch_feature(batch, 0, &label) == RF_OK);
    EXPECT(strcmp(label.name, "label") == 0);
    EXPECT(label.dtype == RF_INT64 && label.rank == 1 && label.shape[0] == info.rows);
    EXPECT(label.bytes == 8u * info.rows);
    EXPECT(label.value_offsets == NULL && label.row_splits == NULL);
    for (uint32_t r = 0; r < info.rows; ++r) EXPECT(((const int64_t*)label.data)[r] == (int64_t)(first + r));

    rf_tensor weights = {.struct_size = sizeof weights};
    EXPECT(rf_batch_feature(batch, 1, &weights) == RF_OK);
    EXPECT(weights.type == RF_VAR_LEN && weights.row_splits_count == info.rows + 1u);
    for (uint32_t r = 0; r < info.rows; ++r) {
      EXPECT(weights.row_splits[r + 1] - weights.row_splits[r] == (int64_t)((first + r) % 4));
    }
    EXPECT(weights.bytes == 4u * (uint64_t)weights.row_splits[info.rows]);

    rf_tensor key = {.struct_size = sizeof key};
    EXPECT(rf_batch_feature(batch, 2, &key) == RF_OK);
    EXPECT(key.rank == 2 && key.shape[1] == 2 && key.value_offsets_count == 2u * info.rows + 1u);
    {
      char expected[32];
      snprintf(expected, sizeof expected, "k%llua", (unsigned long long)first);
      const char* chars = (const char*)key.data;
      EXPECT((size_t)(key.value_offsets[1] - key.value_offsets[0]) == strlen(expected));
      EXPECT(memcmp(chars + key.value_offsets[0], expected, strlen(expected)) == 0);
    }
    EXPECT(rf_batch_feature(batch, 9, &key) == RF_ERROR);
    EXPECT(strncmp(rf_last_error(), "rf_batch_feature: feature index 9 out of range", 46) == 0);

    rf_row_source source = {.struct_size = sizeof source};
    EXPECT(rf_batch_source(batch, info.rows - 1, &source) == RF_OK);
    EXPECT(source.record_index == first + info.rows - 1);
    EXPECT(rf_batch_source(batch, info.rows, &source) == RF_ERROR);

    rf_tensor small = {.struct_size = 8};
    EXPECT(rf_batch_feature(batch, 0, &small) == RF_ERROR);
    {
      char needed[160];
      snprintf(needed, sizeof needed,
               "rf_batch_feature: tensor->struct_size 8 is too small: set it to sizeof(rf_tensor) (%zu in this "
               "version)",
               sizeof(rf_tensor));
      EXPECT(strcmp(rf_last_error(), needed) == 0);
    }
    if (batches == expected_batches - 1) EXPECT(info.flags == (RF_BATCH_END_OF_EPOCH | RF_BATCH_END_OF_DATA));
    rf_batch_release(batch);
    batch = NULL;
    ++batches;
  }
  EXPECT(batches == expected_batches);
  EXPECT(batch == NULL);
  EXPECT(rf_next(client, -1, &batch, err, sizeof err) == RF_END_OF_DATA); /* no limit */
  (void)rf_schema_count(NULL);
  rf_batch_release(NULL);
  EXPECT(rf_last_error()[0] == '\0');
  (void)rf_schema_count(NULL);
  rf_detach(client);
  EXPECT(rf_last_error()[0] == '\0');
  rf_detach(NULL);
  return 0;

fail:
  rf_batch_release(batch);
  rf_detach(client);
  return 1;
}

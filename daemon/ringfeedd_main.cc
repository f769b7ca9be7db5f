// ringfeedd: the ringfeed loader daemon, one per job. See daemon/ringfeedd.h and
// docs/operations.md.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "daemon/ringfeedd.h"
#include "daemon/standard_fds.h"

int main(int argc, char** argv) {
  ringfeed::OccupyClosedStandardFds();  // the log to /dev/null rather than into the socket or segment
  ringfeed::ArmStartupStop();           // a stop from here on is a clean exit (status 0)
  ringfeed::DaemonOptions options;
  // CLI11 (2.3) does not wrap text: the lines are broken here, at most 95 columns as ringfeedctl's.
  CLI::App app(
      "ringfeedd: reads the TFRecord files of one job, parses tf.train.Example records, shuffles and\n"
      "batches them, and serves ready batches to trainer processes through a shared-memory ring.",
      "ringfeedd");
  app.footer(
      "Trainers attach with the client library (client/client.h, client/ringfeed.h, Python's\n"
      "ringfeed package); watch it with `ringfeedctl status JOB`. Stop it with SIGTERM, SIGINT\n"
      "(Ctrl-C) or SIGHUP. Under systemd: the ringfeed@.service unit (docs/operations.md).\n"
      "\n"
      "Exit status:\n"
      "  0  stopped cleanly (or done, with --exit-when-done)\n"
      "  1  runtime failure: stopped (or done, with --exit-when-done) after an on_error: fail\n"
      "     failure; also: a ringfeedd already running for the job, too little free /dev/shm, a\n"
      "     stop blocked on storage\n"
      "  2  usage or config error, or a start-up error a restart would not fix: --start-epoch not\n"
      "     below epochs, --start-batch no multiple of the ranks, no sampled record parsing with\n"
      "     the features (on_error: fail), a ring larger than /dev/shm, a\n"
      "     permissions.group that does not exist or the user is not in, the memory budget, the\n"
      "     open-file limit, a runtime directory that cannot be made or used, a lock file, socket\n"
      "     path or segment name held by what ringfeedd does not remove");
  app.add_option("-c,--config", options.config_path, "Job config (YAML; docs/config.md)")
      ->required()
      // Not CLI::ExistingFile, which says "File does not exist" for a file this user may not
      // read (a 0600 config of another user): the system's reason, as for any open.
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            struct stat st {};
            if (path.empty()) return "the path is empty";
            if (path == "=") return "'=': -c takes no '=': write -c FILE or --config=FILE";
            if (::stat(path.c_str(), &st) != 0) {
              // `-c=job.yaml`: the short option takes no '=' (CLI11 keeps it in the value).
              if (path.starts_with("=") && path.size() > 1 && ::stat(path.c_str() + 1, &st) == 0) {
                return "cannot read " + path + ": -c takes no '=': write -c " + path.substr(1) + " or --config=" +
                       path.substr(1);
              }
              return "cannot read " + path + ": " + std::strerror(errno);
            }
            if (S_ISDIR(st.st_mode)) return path + " is a directory, not a config file";
            return "";
          },
          "FILE"))
      ->option_text("FILE REQUIRED");
  app.add_option("--log-level", options.log_level, "Overrides the config's log_level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->option_text("trace|debug|info|warn|error|off");
  app.add_option("--runtime-dir", options.runtime_dir,
                 "Runtime directory (created if missing): the control socket and lock file; it also names the "
                 "/dev/shm segment, so daemons with different ones never collide (default: $RINGFEED_RUNTIME_DIR, "
                 "else $RUNTIME_DIRECTORY, else /run/ringfeed for root, else $XDG_RUNTIME_DIR/ringfeed, else "
                 "/tmp/ringfeed-<uid>)")
      ->type_name("DIR")
      ->check(CLI::Validator(
          [](const std::string& dir) {
            return dir.empty() ? std::string("an empty directory; leave --runtime-dir out for the default") : "";
          },
          ""));
  app.add_flag("--exit-when-done", options.exit_when_done,
               "Exit once every epoch is produced and every batch has been released by a consumer; "
               "after a failure (on_error: fail), once every batch before it was taken and a "
               "consumer was attached at the failure or since (in ranks mode, one of every rank), so that "
               "it got the error; likewise after data that gave no batch at all, so that a trainer got why "
               "(default: keep serving until stopped)");
  // Decimal only: CLI11 would read "010" (a zero-padded checkpoint name) as octal 8.
  const auto decimal = [](const char* what, const char* name) {
    return CLI::Validator(
        [what](std::string& text) {
          const size_t digits = text.find_first_not_of('0');
          const std::string value = digits == std::string::npos ? "0" : text.substr(digits);
          // At most 18 digits: kMaxStartBatch.
          if (text.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos) {
            return std::string("expected a whole number of ") + what + " from 0 to 10^18 - 1, got '" + text + "'";
          }
          text = value;
          return std::string();
        },
        name);
  };
  app.add_option("--start-epoch", options.start_epoch,
                 "Start at this epoch (0-based, as the batches' epoch field) instead of 0, e.g. to resume training "
                 "from a checkpoint: its batches are the same as when the epochs before it ran (each epoch's order "
                 "comes from the seed and the epoch number only); less than the config's epochs unless epochs is 0 (else exit "
                 "status 2; default: 0)")
      ->transform(decimal("epochs", "EPOCH"))
      ->option_text("EPOCH");
  app.add_option("--start-batch", options.start_batch,
                 "Resume mid-epoch: the first batch produced is this batch of the start epoch (--start-epoch, else "
                 "0; 0-based: the client's Batch::index(), dump's \"batch\"); the batches before it are read and dropped, the ones after "
                 "it are those of an uninterrupted run (deterministic: true). In ranks mode it must be a multiple of "
                 "consumers.count, the steps every rank took times the ranks (else exit status 2); past the epoch's last batch the job fails at that epoch's end "
                 "(default: 0)")
      ->transform(decimal("batches", "BATCH"))
      ->option_text("BATCH");
  app.set_version_flag("--version", std::string("ringfeedd ") + RINGFEED_VERSION);
  // Usage errors name the program, as its other messages do (journald shows them beside
  // others'), and under systemd start with error's priority, as its log lines do (log_format.h).
  static const std::string error_prefix =
      std::string(std::getenv("JOURNAL_STREAM") != nullptr ? "<3>" : "") + "ringfeedd: ";
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return error_prefix + e.what() + "\nRun 'ringfeedd --help' for more information.\n";
  });
  // --help wins over the other arguments, as it does in most programs: `ringfeedd -h --config
  // x` printed x's error, not the help asked for.
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    if (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help") {
      std::cout << app.help();
      return 0;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A config file given without --config (`ringfeedd job.yaml`): said with the fix.
    if (options.config_path.empty() && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (!arg.starts_with("-") && (arg.ends_with(".yaml") || arg.ends_with(".yml"))) {
          std::cerr << error_prefix << "the job config is given with --config: ringfeedd --config " << arg << "\n";
          return 2;
        }
      }
    }
    // CLI11 checks required options before unknown ones: `ringfeedd -x` would say "--config is
    // required". An unknown option is the error to name.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      for (const std::string& extra : app.remaining()) {
        if (extra.starts_with("-") && extra != "--") return app.exit(CLI::ExtrasError({extra})) == 0 ? 0 : 2;
      }
    }
    // A usage error is a configuration error: exit 2, which the systemd unit does not retry.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ringfeed::RunDaemon(options);
}

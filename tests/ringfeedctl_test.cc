// ringfeedctl list / status / dump, run as the real binary:
//   * against a fake ringfeedd (a forked child answering on a Unix socket in a temporary runtime
//     directory) that sends well-formed JSON of other types, or a welcome naming another job:
//     one clear error naming the field (or the job), no nlohmann text, no half-printed table;
//   * dump's timeout in consumers.mode ranks names the ranks without a consumer, or those whose
//     batches wait untaken (a real daemon);
//   * status names the rank that holds the others up from the daemon's `holds_up`;
//   * the --help texts say what the code does (docs/ringfeedctl.md, Exit status).
// The happy paths against a real daemon are in tests/daemon_e2e_test.cc.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;

namespace {

// One line from `fd` (without its '\n'); false at EOF before a whole line.
bool ReadLineFrom(int fd, std::string* line) {
  line->clear();
  char c = 0;
  while (::read(fd, &c, 1) == 1) {
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

void WriteAll(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// A fake ringfeedd listening on `socket` (in a forked child, until killed): to every connection
// it answers the hello with `welcome` and the request after it with `reply`, then closes. Says
// "listening" once connections can come.
int FakeDaemon(const std::string& socket, const std::string& welcome, const std::string& reply, ChildIo& io) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 8) != 0) {
    io.WriteLine(std::string("error ") + std::strerror(errno));
    return 1;
  }
  io.WriteLine("listening");
  for (;;) {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) continue;
    std::string line;
    if (ReadLineFrom(c, &line)) {
      WriteAll(c, welcome + "\n");
      if (ReadLineFrom(c, &line)) WriteAll(c, reply + "\n");
    }
    ::close(c);
  }
}

const std::string kJob = "fake";

std::string Welcome(const std::string& job) {
  return R"({"type":"welcome","protocol":1,"job":")" + job +
         R"(","segment":"/ringfeed.fake","instance_id":"00000000000000ab","daemon_pid":1,"consumer_id":1})";
}

// The fake daemon of job kJob in its own runtime directory <dir>/run.
struct Fake {
  Fake(const TempDir& dir, const std::string& welcome, const std::string& reply)
      : runtime_dir(dir.file("run")), socket(runtime_dir + "/" + kJob + ".sock") {
    std::filesystem::create_directories(runtime_dir);
    const std::string path = socket;
    child = std::make_unique<ChildProcess>(
        [path, welcome, reply](ChildIo& io) { return FakeDaemon(path, welcome, reply, io); });
    const auto line = child->ReadLine();
    REQUIRE(line);
    REQUIRE(*line == "listening");
  }
  CommandResult Ctl(std::vector<std::string> args) const {
    args.insert(args.begin(), CtlBinary());
    args.insert(args.end(), {"--runtime-dir", runtime_dir});
    return RunCommand(args);
  }

  std::string runtime_dir, socket;
  std::unique_ptr<ChildProcess> child;
};

// `ringfeedctl status`'s table for a daemon whose status reply is `reply` (it must succeed).
std::string StatusTable(const std::string& reply) {
  TempDir dir;
  Fake fake(dir, Welcome(kJob), reply);
  const CommandResult r = fake.Ctl({"status", kJob});
  INFO(r.out << r.err);
  CHECK(r.status.ToString() == "exit 0");
  return r.out;
}

// The start of `list`'s line for `job` in `state`, columns as ListJobs pads them.
std::string ListLine(const std::string& job, const std::string& state) {
  return job + std::string(24 - job.size(), ' ') + " " + state + std::string(12 - state.size(), ' ') + " ";
}

// A `list` row of a job without a status: "-" in the other columns, then "   (" and the reason.
std::string ListErrorLine(const std::string& job, const std::string& state) {
  return ListLine(job, state) + "       -          -            -          -   (";
}

std::string Unreadable(const std::string& socket, const std::string& what) {
  return "ringfeedd at " + socket + " sent a reply ringfeedctl cannot read (" + what + "); is it the same version?";
}

// A process whose executable is named ringfeedd (a copy of sleep, in `dir`), standing in for a
// daemon that holds the job's lock without answering (starting, stopping): a real one is over
// too soon to be caught there. Killed and reaped on destruction.
class FakeRingfeedd {
 public:
  explicit FakeRingfeedd(const TempDir& dir) {
    const std::string fake = dir.file("ringfeedd");
    std::filesystem::copy_file("/bin/sleep", fake, std::filesystem::copy_options::overwrite_existing);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::execl(fake.c_str(), "ringfeedd", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Its exec done: /proc/PID/exe names the copy.
    for (int i = 0; i < 500 && std::filesystem::read_symlink("/proc/" + std::to_string(pid_) + "/exe").filename() !=
                                    "ringfeedd";
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  FakeRingfeedd(const FakeRingfeedd&) = delete;
  FakeRingfeedd& operator=(const FakeRingfeedd&) = delete;
  ~FakeRingfeedd() { Kill(); }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;  // never kill(-1): every process this user may signal
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
};


}  // namespace

TEST_CASE("status and list: a reply of other JSON types is one clear error naming the field, with no partial table") {
  struct Case {
    std::string reply;
    std::string status_error;  // after "(" in the status message
    std::string list_error;    // the same for list; empty: list reads none of the bad fields
  };
  const std::vector<Case> cases = {
      // What a tester saw: "[json.exception.type_error.305] cannot use operator[] with a string
      // argument with number", after the first lines of the table.
      {R"({"type":"status","job":"fake","state":"running","pid":7,"throughput":3})",
       "throughput: expected an object", "throughput: expected an object"},
      {R"({"type":"status","job":"fake","state":5})", "state: expected a string", "state: expected a string"},
      {R"({"type":"status","job":"fake","state":"running","throughput":{"records_per_second":{"last_10s":"fast"}}})",
       "throughput.records_per_second.last_10s: expected a number",
       "throughput.records_per_second.last_10s: expected a number"},
      {R"({"type":"status","job":"fake","state":"running","pid":"7"})", "pid: expected an integer",
       "pid: expected an integer"},
      {R"({"type":"status","job":"fake","state":"running","consumers":{"id":1}})", "consumers: expected an array",
       "consumers: expected an array"},
      {R"({"type":"status","job":"fake","state":"running","consumers":[{"id":1,"pid":2,"rank":"zero"}]})",
       "consumers[0].rank: expected an integer", ""},
      {R"({"type":"status","job":"fake","state":"running","consumers":[3]})", "consumers[0]: expected an object",
       "consumers[0]: expected an object"},
      {R"({"type":"status","job":"fake","state":"running","records":-1})", "records: expected an integer >= 0", ""},
      {R"({"type":"status","job":"fake","state":"running","autotune":{"fixed":[1]}})",
       "autotune.fixed[0]: expected a string", ""},
      {R"({"type":"status","job":"fake","state":"running","ranks_without_consumer":["1"]})",
       "ranks_without_consumer[0]: expected an integer", ""},
      {R"({"type":"status","job":"fake","state":"running","ranks":[{"rank":1,"ready":2,"holds_up":1}]})",
       "ranks[0].holds_up: expected true or false", "ranks[0].holds_up: expected true or false"},
      {R"({"type":5})", "type: expected a string", "type: expected a string"},
      {R"(["status"])", R"(not a JSON object: "[\"status\"]")", R"(not a JSON object: "[\"status\"]")"},
      {"HTTP/1.0 400 Bad Request", R"(not a JSON object: "HTTP/1.0 400 Bad Request")",
       R"(not a JSON object: "HTTP/1.0 400 Bad Request")"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    Fake fake(dir, Welcome(kJob), c.reply);
    INFO("reply: " << c.reply);

    const CommandResult status = fake.Ctl({"status", kJob});
    INFO("status:\n" << status.out << status.err);
    CHECK(status.status.ToString() == "exit 1");
    CHECK(status.out.empty());  // no half table
    CHECK(status.err == "ringfeedctl status: " + Unreadable(fake.socket, c.status_error) + "\n");
    CHECK_THAT(status.err, !Catch::Contains("json.exception"));

    const CommandResult list = fake.Ctl({"list"});
    INFO("list:\n" << list.out << list.err);
    CHECK(list.status.ToString() == "exit 0");
    CHECK(list.err.empty());
    if (c.list_error.empty()) {
      CHECK_THAT(list.out, Catch::Contains(ListLine(kJob, "running")));
    } else {
      CHECK_THAT(list.out, Catch::Contains(ListErrorLine(kJob, "bad reply") + Unreadable(fake.socket, c.list_error) + ")\n"));
    }
    CHECK_THAT(list.out, !Catch::Contains("json.exception"));

    // --json reads the state alone (the status object goes out as it came): a reply without a
    // string state, or no status reply at all, is a bad reply there, not "unreachable".
    const CommandResult listed = fake.Ctl({"list", "--json"});
    INFO("list --json:\n" << listed.out << listed.err);
    CHECK(listed.status.ToString() == "exit 0");
    const json entry = json::parse(listed.out)["jobs"][0];
    const bool readable_state = c.reply.find(R"("state":"running")") != std::string::npos;
    CHECK(entry["state"] == (readable_state ? "running" : "bad reply"));
    if (!readable_state) CHECK_THAT(entry["error"].get<std::string>(), !Catch::Contains("json.exception"));
  }
}

TEST_CASE("status --json prints the daemon's object as it came; the table reads fields that are missing or null as 0") {
  TempDir dir;
  Fake fake(dir, Welcome(kJob),
            R"({"type":"status","job":"fake","state":"running","pid":7,"throughput":null,)"
            R"("memory":{"budget_bytes":null}})");
  const CommandResult json = fake.Ctl({"status", kJob, "--json"});
  INFO(json.out << json.err);
  CHECK(json.status.ToString() == "exit 0");
  CHECK(nlohmann::json::parse(json.out)["throughput"].is_null());

  const CommandResult table = fake.Ctl({"status", kJob});
  INFO(table.out << table.err);
  CHECK(table.status.ToString() == "exit 0");
  CHECK_THAT(table.out, Catch::StartsWith("job        fake   (pid 7, config )\nstate      running, up 0.0 s\n"));
  // Up 0 s (missing): the window is the uptime, not 10 s.
  CHECK_THAT(table.out, Catch::Contains("throughput 0 records/s, 0.0 MB/s (last 0.0 s)") &&
                            Catch::Contains("(no budget set)") && Catch::Contains("consumers  0 attached\n"));
  for (const auto& [uptime, window] : {std::pair{"3.25", "(last 3.2 s)"}, std::pair{"25", "(last 10.0 s)"}}) {
    TempDir other;
    Fake up(other, Welcome(kJob), std::string(R"({"type":"status","job":"fake","uptime_seconds":)") + uptime + "}");
    CHECK_THAT(up.Ctl({"status", kJob}).out, Catch::Contains(window));
  }
}

TEST_CASE("status after production ended: the whole run's rates, and the tuner's last stretch of production") {
  const auto table = [](const std::string& state) {
    return StatusTable(R"({"type":"status","job":"fake","state":")" + state +
                       R"(","uptime_seconds":10.0,"throughput":{"records_per_second":{"last_10s":5.0,"overall":400.0},)"
                       R"("mb_per_second":{"last_10s":0.1,"overall":2.5},"production_seconds":2.5},)"
                       R"("autotune":{"cpu_cores":0.5,"measured":{"interval_seconds":0.25,"records_per_second":800.0}}})");
  };
  const std::string ended = table("end_of_data");
  CHECK_THAT(ended, Catch::Contains("\nthroughput 400 records/s, 2.5 MB/s over the 2.50 s from start to the end of data "
                                    "(7.5 s ago)\n") &&
                        Catch::Contains("           CPU (the last 0.25 s of production): 0.50 of") &&
                        Catch::Contains("\n           the last 0.25 s of production: 800 records/s, "));
  CHECK_THAT(table("failed"), Catch::Contains(" from start to the failure (7.5 s ago)\n"));
  // The end of production is not the trainers': the state line says what is left in the ring.
  CHECK_THAT(ended, Catch::Contains("\nstate      end_of_data, up 10.0 s (no batch was made)\n"));
  CHECK_THAT(StatusTable(R"({"type":"status","job":"fake","state":"end_of_data","uptime_seconds":2.0,"batches":5,)"
                         R"("ring":{"slots":8,"free":8,"ready":0,"held":0}})"),
             Catch::Contains("\nstate      end_of_data, up 2.0 s (every batch is made and was taken)\n"));
  CHECK_THAT(StatusTable(R"({"type":"status","job":"fake","state":"end_of_data","uptime_seconds":2.0,"batches":9,)"
                         R"("ring":{"slots":8,"free":3,"ready":4,"held":1}})"),
             Catch::Contains("\nstate      end_of_data, up 2.0 s (every batch is made; 4 ready for trainers to take, "
                             "1 held by them)\n"));
  CHECK_THAT(table("failed"), Catch::Contains("\nstate      failed, up 10.0 s\n"));
  // A stretch that waited for the trainers says so after the end too; under 0.01 s in ms.
  const std::string waited = StatusTable(
      R"({"type":"status","job":"fake","state":"end_of_data","uptime_seconds":1.0,"throughput":{"production_seconds":)"
      R"(0.004},"autotune":{"measured":{"interval_seconds":0.5,"sequencer_slot_wait_fraction":0.94,"consumers":0}}})");
  CHECK_THAT(waited, Catch::Contains("over the 0.004 s from start to the end of data") &&
                         Catch::Contains("\n           production waited 94% of the last 0.50 s of production for the "
                                         "trainers to take batches (no trainer attached at its end, or none for "
                                         "much of it): these rates do not show the loader's speed\n"));
  // While it runs: the last 10 s and overall, as before.
  CHECK_THAT(StatusTable(R"({"type":"status","job":"fake","state":"running","uptime_seconds":10.0,)"
                         R"("throughput":{"records_per_second":{"last_10s":5.0,"overall":400.0}}})"),
             Catch::Contains("throughput 5 records/s, 0.0 MB/s (last 10.0 s); 400 records/s, 0.0 MB/s overall\n"));
}

TEST_CASE("status: the readers' CPU in cores, as measured (their threads' CPU time), not rounded to readers") {
  const auto table = [](int readers, double cores) {
    return StatusTable(R"({"type":"status","job":"fake","state":"running","autotune":{"cpu_cores":0.9,)"
                       R"("knobs":{"readers":)" + std::to_string(readers) + R"(},"limits":{"cpu_budget_cores":2},)"
                       R"("measured":{"interval_seconds":0.5,"read_busy_fraction":0.9,"read_cpu_fraction":1,)"
                       R"("read_cpu_cores":)" + std::to_string(cores) + "}}}");
  };
  // It said "1 on the CPU" (a rounded share), then readers x busy x CPU share, which counts a
  // reader's wait for a core as CPU (helper-108: 0.56 of 0.44 cores used in all).
  CHECK_THAT(table(1, 0.3), Catch::Contains("); the reader uses 0.30 cores of that, waiting the rest of its time "
                                            "(for storage or for room to read ahead)\n"));
  CHECK_THAT(table(4, 0.1), Catch::Contains("); the 4 readers use 0.10 cores of that, waiting the rest"));
}

TEST_CASE("status says when its rates are the trainers' pace: production waited for a slot most of the interval") {
  const auto table = [](double slot_wait, double consumer_wait, int consumers) {
    return StatusTable(
        R"({"type":"status","job":"fake","state":"running","autotune":{"measured":{"interval_seconds":1.0,)"
        R"("sequencer_slot_wait_fraction":)" + std::to_string(slot_wait) +
        R"(,"consumer_wait_fraction":)" + std::to_string(consumer_wait) + R"(,"consumers":)" +
        std::to_string(consumers) + "}}}");
  };
  CHECK_THAT(table(0.9, 0.0, 0),
             Catch::Contains("\n           production waited 90% of the last 1.00 s for the trainers to take batches "
                             "(no trainer attached): these rates do not show the loader's speed\n"));
  CHECK_THAT(table(0.9, 0.0, 2), Catch::Contains("(ring full or prefetch depth reached)"));
  CHECK_THAT(table(0.2, 0.0, 2), !Catch::Contains("production waited"));
  CHECK_THAT(table(0.9, 0.8, 2), !Catch::Contains("production waited"));  // trainers wait too: not their pace

  // `list` says it after the job's line, the same rule.
  const auto list = [](double slot_wait, double consumer_wait, int consumers) {
    TempDir dir;
    Fake fake(dir, Welcome(kJob),
              R"({"type":"status","job":"fake","state":"running","autotune":{"measured":{"interval_seconds":1.0,)"
              R"("sequencer_slot_wait_fraction":)" + std::to_string(slot_wait) +
                  R"(,"consumer_wait_fraction":)" + std::to_string(consumer_wait) + R"(,"consumers":)" +
                  std::to_string(consumers) + "}}}");
    const CommandResult r = fake.Ctl({"list"});
    INFO(r.out << r.err);
    CHECK(r.status.ToString() == "exit 0");
    return r.out;
  };
  CHECK_THAT(list(0.9, 0.0, 2), Catch::Contains(ListLine(kJob, "running")) &&
                                    Catch::EndsWith("   (the trainers' pace: ring full or prefetch depth reached)\n"));
  CHECK_THAT(list(0.9, 0.0, 0), Catch::EndsWith("   (the trainers' pace: no trainer attached)\n"));
  // A trainer that attached after the tuner's interval: the reason is that interval's.
  CHECK_THAT(StatusTable(R"({"type":"status","job":"fake","state":"running","autotune":{"measured":{)"
                         R"("interval_seconds":2.0,"sequencer_slot_wait_fraction":1.0,"consumer_wait_fraction":0.0,)"
                         R"("consumers":0}},"consumers":[{"id":1,"pid":10}]})"),
             Catch::Contains("for the trainers to take batches (no trainer attached during that interval)") &&
                 Catch::Contains("consumers  1 attached"));
  CHECK_THAT(list(0.2, 0.0, 2), !Catch::Contains("pace"));
}

TEST_CASE("status: a cycle_length above the shard's files says that all of them are interleaved") {
  const auto table = [](int cycle_length, int in_shard) {
    return StatusTable(R"({"type":"status","job":"fake","state":"running","files":{"total":9,"in_shard":)" +
                       std::to_string(in_shard) + R"(},"pipeline":{"cycle_length":)" + std::to_string(cycle_length) +
                       "}}");
  };
  CHECK_THAT(table(8, 4), Catch::Contains("pipeline   cycle_length 8 (all 4 files at once), readers"));
  CHECK_THAT(table(4, 4), Catch::Contains("pipeline   cycle_length 4, readers"));
  CHECK_THAT(table(4, 9), Catch::Contains("pipeline   cycle_length 4, readers"));
}

TEST_CASE("status: the files being read, none at the end; batches reclaimed counted in the singular for one") {
  const auto table = [](int open_files, int reclaimed) {
    return StatusTable(R"({"type":"status","job":"fake","state":"running","pipeline":{"open_files":)" +
                       std::to_string(open_files) + R"(},"batches_reclaimed":)" + std::to_string(reclaimed) + "}");
  };
  CHECK_THAT(table(0, 0), Catch::Contains("readers 0 (no file being read now; read-ahead ") &&
                              !Catch::Contains("reclaimed"));
  CHECK_THAT(table(1, 1), Catch::Contains("(taking turns on 1 file being read; ") &&
                              Catch::Contains("consumers  0 attached, 1 batch reclaimed from consumers"));
  CHECK_THAT(table(3, 2), Catch::Contains("(taking turns on 3 files being read; ") &&
                              Catch::Contains(", 2 batches reclaimed from consumers"));
}

TEST_CASE("status: a trainer that has taken nothing for 5 s or more says since when; the socket that answered") {
  const auto table = [](const std::string& state, uint64_t taken, double since) {
    return StatusTable(R"({"type":"status","job":"fake","state":")" + state + R"(","socket":"/run/x/fake.sock",)"
                       R"("consumers":[{"id":1,"pid":42,"batches_taken":)" + std::to_string(taken) +
                       R"(,"slots_held":5,"wait_seconds":0.0,"attached_seconds":60.0,"seconds_since_take":)" +
                       std::to_string(since) + "}]}");
  };
  CHECK_THAT(table("running", 384, 15.2),
             Catch::Contains("\n           id 1 pid 42: 384 batches taken (the last 15.2 s ago), holds 5 slots, waited "
                             "0.0 s, attached 60.0 s\n") &&
                 Catch::Contains("(pid 0, config )\nsocket     /run/x/fake.sock\nstate "));
  CHECK_THAT(table("running", 0, 7.0), Catch::Contains(": 0 batches taken (none in 7.0 s), holds 5 slots"));
  // Before the first batch, the shuffle buffer filling says why nothing is produced.
  const auto filling = [](uint64_t batches) {
    return StatusTable(R"({"type":"status","job":"fake","state":"running","batches":)" + std::to_string(batches) +
                       R"(,"memory":{"shuffle_buffer":10000,"shuffle_buffer_records":5119}})");
  };
  CHECK_THAT(filling(0), Catch::Contains("\nproduced   0 records in 0 batches, 0 B\n           filling the shuffle "
                                         "buffer before the first batch: 5119 of 10000 records (shuffle.buffer)\n"));
  CHECK_THAT(filling(1), !Catch::Contains("filling the shuffle buffer"));
  CHECK_THAT(table("running", 384, 4.9), Catch::Contains(": 384 batches taken, holds 5 slots"));
  // Once production ended, trainers that stopped taking may simply be done.
  CHECK_THAT(table("end_of_data", 384, 15.2), Catch::Contains(": 384 batches taken, holds 5 slots"));
}

TEST_CASE("status names a rank that holds the others up from the daemon's holds_up, after 5 s") {
  // The daemon decides (ConsumerRegistry::RankStates); the table only waits 5 s. A rank whose
  // batches wait while another attached rank has none ready is not named without holds_up:
  // after the end of the data, say, the other ranks get the end instead of waiting for it.
  const auto table = [](const std::string& state, const std::string& rank1) {
    return StatusTable(R"({"type":"status","job":"fake","state":")" + state +
                       R"(","consumers":[{"id":1,"pid":10,"rank":0},{"id":2,"pid":11,"rank":1}],)"
                       R"("ranks_without_consumer":[],"ranks":[{"rank":0,"ready":0,"seconds_since_take":0,"holds_up":false},)" +
                       rank1 + "]}");
  };
  const std::string line = "rank 1 (consumer 2, pid 11) has not taken any of its 3 ready batches for 7 s";
  CHECK_THAT(table("running", R"({"rank":1,"ready":3,"seconds_since_take":7,"holds_up":true})"),
             Catch::Contains(line + " while another rank waits: production stops at the prefetch depth, so every "
                                    "rank waits for it; is that trainer stopped, stuck or far slower than its "
                                    "peers?\n") &&
                 Catch::Contains("id 2 pid 11 rank 1 (3 ready): 0 batches taken"));
  CHECK_THAT(table("running", R"({"rank":1,"ready":3,"seconds_since_take":4,"holds_up":true})"),
             !Catch::Contains("has not taken any"));
  CHECK_THAT(table("end_of_data", R"({"rank":1,"ready":3,"seconds_since_take":7,"holds_up":false})"),
             !Catch::Contains("has not taken any"));
  // From a daemon that does not send holds_up: no line rather than a guess.
  CHECK_THAT(table("running", R"({"rank":1,"ready":3,"seconds_since_take":7})"), !Catch::Contains("has not taken any"));
  // list says so on the job's line (its rate falls, and the trainers' pace does not explain it).
  TempDir dir;
  Fake fake(dir, Welcome(kJob),
            R"({"type":"status","job":"fake","state":"running","ranks":[{"rank":0,"ready":0,"seconds_since_take":0,)"
            R"("holds_up":false},{"rank":1,"ready":3,"seconds_since_take":7,"holds_up":true}]})");
  CHECK_THAT(fake.Ctl({"list"}).out, Catch::EndsWith("   (rank 1 holds the other ranks up: `ringfeedctl status fake` "
                                                     "names its trainer)\n"));
}

TEST_CASE("status, list and dump refuse a welcome that names another job") {
  TempDir dir;
  Fake fake(dir, Welcome("other"), R"({"type":"status","job":"other","state":"running"})");
  const std::string why = "the daemon at " + fake.socket + " serves job other, not fake";

  const CommandResult status = fake.Ctl({"status", kJob});
  INFO("status:\n" << status.out << status.err);
  CHECK(status.status.ToString() == "exit 1");
  CHECK(status.out.empty());
  CHECK(status.err == "ringfeedctl status: " + why + "\n");

  const CommandResult json = fake.Ctl({"status", kJob, "--json"});
  CHECK(json.status.ToString() == "exit 1");
  CHECK(json.out.empty());
  CHECK(json.err == "ringfeedctl status: " + why + "\n");

  const CommandResult list = fake.Ctl({"list"});
  INFO("list:\n" << list.out << list.err);
  CHECK(list.status.ToString() == "exit 0");
  CHECK_THAT(list.out, Catch::Contains(ListErrorLine(kJob, "bad reply") + why + ")\n"));

  // dump attaches through the client library, which checks the welcome's job.
  const CommandResult dump = fake.Ctl({"dump", kJob, "--timeout", "2"});
  INFO("dump:\n" << dump.out << dump.err);
  CHECK(dump.status.ToString() == "exit 1");
  CHECK(dump.out.empty());
  CHECK_THAT(dump.err, Catch::StartsWith("ringfeedctl dump: ") && Catch::Contains(why));
}

TEST_CASE("a runtime directory this user cannot read: list, status and dump name its permissions, not the job") {
  // Permissions do not hold root back: as root, ringfeedctl runs as nobody (setpriv), in a
  // runtime directory nobody owns, as the daemon's user would.
  std::vector<std::string> as_user;
  if (::geteuid() == 0) {
    as_user = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    std::vector<std::string> probe = as_user;
    probe.insert(probe.end(), {CtlBinary(), "--version"});
    if (RunCommand(probe).status.ToString() != "exit 0") {
      SkipOrFail("runs as root, and cannot run ringfeedctl as nobody (setpriv, or the build directory is closed to "
                 "other users): root is not held back by a directory's mode");
      return;
    }
  }
  TempDir dir;
  Fake fake(dir, Welcome(kJob), R"({"type":"status","job":"fake","state":"running"})");
  if (!as_user.empty()) {
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                                 std::filesystem::perms::others_exec);
    REQUIRE(::chown(fake.runtime_dir.c_str(), 65534, 65534) == 0);
  }
  const auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), CtlBinary());
    args.insert(args.begin(), as_user.begin(), as_user.end());
    args.insert(args.end(), {"--runtime-dir", fake.runtime_dir});
    return RunCommand(args);
  };
  std::filesystem::permissions(fake.runtime_dir, std::filesystem::perms::none);
  struct Restore {
    std::string dir;
    ~Restore() { std::filesystem::permissions(dir, std::filesystem::perms::owner_all); }
  } restore{fake.runtime_dir};
  const std::string uid = as_user.empty() ? std::to_string(::geteuid()) : "65534";
  const std::string permissions = "(owned by uid " + uid + " (this user), mode 0000; ringfeedd creates it with mode "
                                  "0755, ringfeed@.service with RuntimeDirectoryMode=0755; give it "
                                  "back: chmod 0755 " + fake.runtime_dir + ")";

  const CommandResult list = ctl({"list"});
  INFO("list:\n" << list.out << list.err);
  CHECK(list.status.ToString() == "exit 1");
  CHECK(list.out.empty());
  CHECK(list.err == "ringfeedctl list: cannot read the runtime directory " + fake.runtime_dir +
                        ": Permission denied " + permissions + "\n");

  const CommandResult status = ctl({"status", kJob});
  INFO("status:\n" << status.out << status.err);
  CHECK(status.status.ToString() == "exit 1");
  CHECK(status.err == "ringfeedctl status: cannot enter the runtime directory " + fake.runtime_dir +
                          ": Permission denied " + permissions + "\n");

  // dump attaches as a trainer does (the client library): its connect is what is denied.
  const CommandResult dump = ctl({"dump", kJob, "--timeout", "1"});
  INFO("dump:\n" << dump.out << dump.err);
  CHECK(dump.status.ToString() == "exit 1");
  CHECK_THAT(dump.err, Catch::Contains("cannot connect to ringfeedd for job fake at " + fake.socket +
                                       ": Permission denied; this process cannot enter the runtime directory " +
                                       fake.runtime_dir + " " + permissions));
  CHECK_THAT(dump.err, !Catch::Contains("is not running") && !Catch::Contains("run this process as the daemon's user"));

  // A subdirectory (systemd's per-instance one) that cannot be read is a row of `list`, and
  // `status` of a job not found says its jobs cannot be seen: not "no jobs".
  const std::string top = dir.file("top");
  const std::string instance = top + "/inst";
  std::filesystem::create_directories(instance);
  if (!as_user.empty()) REQUIRE(::chown(instance.c_str(), 65534, 65534) == 0);
  std::filesystem::permissions(instance, std::filesystem::perms::none);
  Restore restore_instance{instance};
  const auto ctl_in = [&](const std::string& runtime_dir, std::vector<std::string> args) {
    args.insert(args.begin(), CtlBinary());
    args.insert(args.begin(), as_user.begin(), as_user.end());
    args.insert(args.end(), {"--runtime-dir", runtime_dir});
    return RunCommand(args);
  };
  const CommandResult sub = ctl_in(top, {"list"});
  INFO("list with an unreadable subdirectory:\n" << sub.out << sub.err);
  CHECK(sub.status.ToString() == "exit 0");
  CHECK_THAT(sub.out, Catch::Contains(ListErrorLine("?", "unreadable") + "cannot read the runtime directory " + instance +
                                      ": Permission denied (owned by uid " + uid + " (this user), mode 0000;"));
  const CommandResult sub_status = ctl_in(top, {"status", "absent-job"});
  CHECK(sub_status.status.ToString() == "exit 1");
  CHECK_THAT(sub_status.err, Catch::Contains("the jobs of " + instance + " (Permission denied) cannot be seen"));

  // Something else than a directory: no advice about permissions.
  const std::string file = dir.file("a-file");
  WriteFile(file, "x");
  const CommandResult not_dir = ctl_in(file, {"list"});
  CHECK(not_dir.status.ToString() == "exit 1");
  CHECK(not_dir.err == "ringfeedctl list: cannot read the runtime directory " + file + ": Not a directory\n");

  // A directory above the runtime directory that does not let this user through is named
  // (as root, the test's own directory closed to nobody).
  if (!as_user.empty()) {
    std::filesystem::permissions(fake.runtime_dir, std::filesystem::perms::owner_all |
                                                       std::filesystem::perms::group_read |
                                                       std::filesystem::perms::group_exec |
                                                       std::filesystem::perms::others_read |
                                                       std::filesystem::perms::others_exec);
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    const CommandResult above = ctl({"list"});
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                                 std::filesystem::perms::others_exec);
    INFO("list below a closed directory:\n" << above.out << above.err);
    CHECK(above.status.ToString() == "exit 1");
    CHECK(above.err == "ringfeedctl list: cannot read the runtime directory " + fake.runtime_dir +
                           ": Permission denied (the directory " + dir.path().string() +
                           " above it does not let this user in (owned by uid 0, mode 0700); ask its owner to let "
                           "this user through (chmod o+x " + dir.path().string() + "))\n");
    // The directory's group is one this process is in (nogroup, nobody's): its group bits are
    // what to open, not the others'.
    REQUIRE(::chown(dir.path().c_str(), 0, 65534) == 0);
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    const CommandResult group_above = ctl({"list"});
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                                 std::filesystem::perms::others_exec);
    INFO("list below a directory closed to its group:\n" << group_above.out << group_above.err);
    CHECK(group_above.err == "ringfeedctl list: cannot read the runtime directory " + fake.runtime_dir +
                                 ": Permission denied (the directory " + dir.path().string() +
                                 " above it does not let this user in (owned by uid 0, mode 0700, group nogroup, "
                                 "which this process is in); ask its owner to let the group through (chmod g+x " +
                                 dir.path().string() + "))\n");
    // The way open, the socket (root's, not writable by nobody) not: listed as denied, not as a
    // daemon that does not answer.
    ::chmod(fake.socket.c_str(), 0755);
    const CommandResult denied = ctl({"list"});
    INFO("list of a socket this user may not connect to:\n" << denied.out << denied.err);
    CHECK(denied.status.ToString() == "exit 0");
    CHECK_THAT(denied.out, Catch::Contains(ListErrorLine(kJob, "denied")) &&
                               Catch::Contains("the socket is user root's with mode 0755, which lets only that user "
                                               "connect (the job sets no permissions.group): run this process as "
                                               "root, or give the job a permissions.group this process is in (id "
                                               "-Gn) and restart it"));
    // A socket of a group nobody is not in (a job's permissions.group): that group is named.
    ::chmod(fake.socket.c_str(), 0770);
    const CommandResult other_group = ctl({"list"});
    INFO("list of a socket of another group:\n" << other_group.out << other_group.err);
    CHECK_THAT(other_group.out, Catch::Contains("the socket is user root's and group root's (mode 0770, the job's "
                                                "permissions.group), and this process is in neither (id -Gn): add "
                                                "its user to the group (usermod -aG root nobody, then log in again) "
                                                "or run it as root"));
    // A socket of nobody's own login group (nogroup), to a process of nobody started without it
    // (as a login session older than the user's membership is): no usermod, a new login.
    REQUIRE(::chown(fake.socket.c_str(), 0, 65534) == 0);
    const CommandResult stale_login = RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=1", "--clear-groups",
                                                  CtlBinary(), "list", "--runtime-dir", fake.runtime_dir});
    INFO("list of a socket of the user's group, from a process without it:\n" << stale_login.out << stale_login.err);
    CHECK_THAT(stale_login.out, Catch::Contains("the socket is user root's and group nogroup's (mode 0770, the job's "
                                                "permissions.group); user nobody is in group nogroup but this process "
                                                "is not (id -Gn): a process keeps the groups of the login session it "
                                                "started in, so start it from a new login (or run newgrp nogroup; "
                                                "restart a service) or run it as root"));
    CHECK_THAT(stale_login.out, !Catch::Contains("usermod"));
    REQUIRE(::chown(fake.socket.c_str(), 0, 0) == 0);
    // A runtime directory this user may list but not enter (root's, 0744): denied too.
    REQUIRE(::chown(fake.runtime_dir.c_str(), 0, 0) == 0);
    std::filesystem::permissions(fake.runtime_dir, std::filesystem::perms::owner_all |
                                                       std::filesystem::perms::group_read |
                                                       std::filesystem::perms::others_read);
    const CommandResult closed = ctl({"list"});
    INFO("list of a runtime directory this user cannot enter:\n" << closed.out << closed.err);
    CHECK(closed.status.ToString() == "exit 0");
    CHECK_THAT(closed.out, Catch::Contains(ListErrorLine(kJob, "denied") + "cannot enter the runtime directory " +
                                           fake.runtime_dir));
  }

  // A runtime directory that does not exist still lists no jobs (exit 0).
  const CommandResult none = RunCommand({CtlBinary(), "list", "--runtime-dir", dir.file("absent")});
  CHECK(none.status.ToString() == "exit 0");
  CHECK_THAT(none.out, Catch::StartsWith("no ringfeed jobs in " + dir.file("absent")));
}

TEST_CASE("status: a welcome of another type, or a refusal, is said as such") {
  TempDir dir;
  {
    Fake fake(dir, R"({"type":"hello","job":"fake"})", "{}");
    const CommandResult status = fake.Ctl({"status", kJob});
    CHECK(status.status.ToString() == "exit 1");
    CHECK(status.err ==
          "ringfeedctl status: " + Unreadable(fake.socket, R"(type: expected "welcome" or "error")") + "\n");
  }
  TempDir dir2;
  Fake fake(dir2, R"({"type":"error","message":"too many control connections"})", "{}");
  const CommandResult status = fake.Ctl({"status", kJob});
  CHECK(status.status.ToString() == "exit 1");
  CHECK(status.err == "ringfeedctl status: job 'fake': ringfeedd refused: too many control connections\n");
}

TEST_CASE("dump's timeout in ranks mode names the ranks without a consumer, then those that take nothing") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 30);
  // epochs: 0, so the data never ends: rank 0's dump waits for its next batch while ranks 1
  // and 2's batches fill the prefetch depth and production stops.
  DaemonProcess daemon(dir.path(), "ranks-dump",
                       IdJobConfig("ranks-dump", dir.file("data.tfrecord"),
                                   "batch: {size: 2}\nepochs: 0\nconsumers: {mode: ranks, count: 3}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const auto dump = [&] {
    return RunCommand({CtlBinary(), "dump", "ranks-dump", "--rank", "0", "--timeout", "1", "--runtime-dir",
                       daemon.runtime_dir()});
  };
  const CommandResult both = dump();
  INFO("dump:\n" << both.out << both.err);
  CHECK(both.status.ToString() == "exit 1");
  CHECK(both.err ==
        "ringfeedctl dump: job 'ranks-dump': no batch within 1.0 s: ranks 1, 2 of 3 have no consumer attached; "
        "ranks mode gives batch k of an epoch to rank k mod 3, so the daemon stops producing at its prefetch depth "
        "while a rank does not take its batches: start every rank (docs/config.md, consumers; ringfeedctl status "
        "ranks-dump)\n");

  // Rank 1 attached (taking nothing): rank 2 is named as without a consumer, rank 1 with its
  // untaken batches.
  auto rank1 = Client::Attach(daemon.client_options(1));
  const CommandResult one = dump();
  INFO("dump:\n" << one.out << one.err);
  CHECK(one.status.ToString() == "exit 1");
  CHECK_THAT(one.err, Catch::Contains("no batch within 1.0 s: rank 2 of 3 has no consumer attached; rank 1 has ") &&
                          Catch::Contains(" that its trainer has not taken; ranks mode gives batch k of an epoch to "
                                          "rank k mod 3 and stops producing at its prefetch depth while a rank does "
                                          "not take its batches: start every rank, and look for a trainer that is "
                                          "stopped, stuck or far slower than its peers"));

  // Every rank attached, ranks 1 and 2 taking nothing: they are named with their ready batches.
  auto rank2 = Client::Attach(daemon.client_options(2));
  const CommandResult behind = dump();
  INFO("dump:\n" << behind.out << behind.err);
  CHECK(behind.status.ToString() == "exit 1");
  CHECK_THAT(behind.err, Catch::Contains("no batch within 1.0 s: rank 1 has ") &&
                             Catch::Contains(" that their trainers have not taken; ranks mode gives batch k of an "
                                             "epoch to rank k mod 3") &&
                             Catch::EndsWith("(docs/operations.md, Status and troubleshooting; ringfeedctl status "
                                             "ranks-dump)\n"));
  rank1.reset();
  rank2.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");

  // A ring of fewer slots than 2 per rank stalls the ranks too: said beside the missing rank
  // (which, in a run of trainers, may be one that timed out on the small ring and left).
  DaemonProcess small(dir.path(), "ranks-small",
                      IdJobConfig("ranks-small", dir.file("data.tfrecord"),
                                  "batch: {size: 2}\nepochs: 0\nconsumers: {mode: ranks, count: 2}\nring: {slots: 2}\n"));
  RINGFEED_REQUIRE_STARTED(small);
  const CommandResult few = RunCommand(
      {CtlBinary(), "dump", "ranks-small", "--rank", "0", "--timeout", "1", "--runtime-dir", small.runtime_dir()});
  INFO("dump:\n" << few.out << few.err);
  CHECK(few.status.ToString() == "exit 1");
  CHECK_THAT(few.err, Catch::Contains("no batch within 1.0 s: rank 1 of 2 has no consumer attached; besides, the "
                                      "ring's 2 slots are too few for 2 ranks that each keep a batch while waiting "
                                      "for the next (give the job ring.slots: 4 or more); ranks mode gives"));
  CHECK(small.Stop().ToString() == "exit 0");
}

TEST_CASE("dump stopped by Ctrl-C prints the batch it took first: the job loses none that it did not show") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "int-dump",
                       IdJobConfig("int-dump", dir.file("data.tfrecord"), "batch: {size: 2}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const std::string out_path = dir.file("dump.out"), err_path = dir.file("dump.err");
  const std::string ctl = CtlBinary(), run = daemon.runtime_dir();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);  // a test started in the background of a shell has it ignored
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
    ::execl(ctl.c_str(), "ringfeedctl", "dump", "int-dump", "--runtime-dir", run.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  const bool dumping =
      WaitUntil([&] { return std::filesystem::exists(out_path) && lines(ReadFile(out_path)) >= 3; });
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(dumping);
  const std::string out = ReadFile(out_path), err = ReadFile(err_path);
  INFO("stdout: " << out.size() << " bytes; stderr: " << err);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 130));
  CHECK(err == "ringfeedctl dump: stopped by SIGINT after " + std::to_string(lines(out)) +
                   " batch(es), every batch taken from the job printed\n");
  // Every line whole; the next batch a consumer gets is the one after the last printed.
  json last;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) last = json::parse(line);
  const uint64_t epoch = last["epoch"], index = last["batch"];
  auto client = Client::Attach(daemon.client_options());
  Batch next;
  REQUIRE(client->Next(kEventually, &next) == Client::Status::kBatch);
  CHECK(std::make_pair(next.epoch(), next.index()) ==
        (index + 1 < 20 ? std::make_pair(epoch, index + 1) : std::make_pair(epoch + 1, uint64_t{0})));
}

TEST_CASE("dump's timeout in shared mode says the ring is held by other consumers") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 30);
  DaemonProcess daemon(
      dir.path(), "held-dump",
      IdJobConfig("held-dump", dir.file("data.tfrecord"), "batch: {size: 2}\nepochs: 0\nring: {slots: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // This process holds both slots (a Batch holds its slot until the next Next).
  auto client = Client::Attach(daemon.client_options());
  Batch first, second;
  REQUIRE(client->Next(kEventually, &first) == Client::Status::kBatch);
  REQUIRE(client->Next(kEventually, &second) == Client::Status::kBatch);
  const CommandResult dump =
      RunCommand({CtlBinary(), "dump", "held-dump", "--timeout", "0.5", "--runtime-dir", daemon.runtime_dir()});
  INFO("dump:\n" << dump.out << dump.err);
  CHECK(dump.status.ToString() == "exit 1");
  // Who holds them (this process's consumer, named by id and pid) and what to do.
  const std::string holder =
      "consumer " + std::to_string(client->consumer_id()) + " (pid " + std::to_string(getpid()) + ")";
  CHECK(dump.err == "ringfeedctl dump: job 'held-dump': no batch within 0.5 s: all 2 slots of the ring are held by "
                    "its consumers, so the daemon has nowhere to put the next batch: " + holder + " holds 2: " +
                    holder + " keeps 2 batches it has not released (batches a trainer stores, or arrays or tensors "
                    "of them kept alive): release those no longer needed; trainers that need them all at once need "
                    "more ring.slots (4 for these consumers) (ringfeedctl status held-dump)\n");
  // Output that cannot be written (a full disk) is an error naming it, not a quiet exit 0; the
  // batch dump had taken is gone, and it says so.
  first.Release();
  const CommandResult full =
      RunCommand({"/bin/bash", "-c", "exec \"$0\" dump held-dump --batches 1 --runtime-dir \"$1\" > /dev/full",
                  CtlBinary(), daemon.runtime_dir()});
  CHECK(full.status.ToString() == "exit 1");
  CHECK_THAT(full.err, Catch::StartsWith("ringfeedctl dump: writing standard output failed: No space left on device "
                                         "after 0 batch(es)"));
  const CommandResult status = RunCommand({"/bin/bash", "-c", "exec \"$0\" status held-dump --runtime-dir \"$1\" "
                                           "> /dev/full", CtlBinary(), daemon.runtime_dir()});
  CHECK(status.status.ToString() == "exit 1");
  CHECK(status.err == "ringfeedctl: writing standard output failed: No space left on device\n");
  // A closed stdout: said at once, no batch taken (dump's socket once got descriptor 1 and the
  // batch's JSON went into its own connection to the daemon).
  const CommandResult closed =
      RunCommand({"/bin/bash", "-c", "exec \"$0\" dump held-dump --batches 1 --runtime-dir \"$1\" >&-",
                  CtlBinary(), daemon.runtime_dir()});
  CHECK(closed.status.ToString() == "exit 1");
  CHECK_THAT(closed.err, Catch::StartsWith("ringfeedctl: standard output is closed (>&-)"));
  second.Release();
  client.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

// SIGKILLs the daemon and waits until it is a zombie (this process, its parent, has not waited
// for it yet) whose socket is closed. Returns its pid.
static pid_t KillToZombie(DaemonProcess& daemon) {
  const pid_t pid = daemon.pid();
  daemon.Kill(SIGKILL);
  // The main thread shows Z while the other threads still exit, and the descriptors (the
  // listening socket) close with the last of them: a connection then gets ECONNRESET, not
  // ECONNREFUSED.
  const auto refused = [&] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", daemon.socket_path().c_str());
    const bool is_refused =
        fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED;
    if (fd >= 0) ::close(fd);
    return is_refused;
  };
  REQUIRE(WaitUntil([&] {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    return std::getline(stat, line) && line.find(") Z ") != std::string::npos && refused();
  }));
  return pid;
}

TEST_CASE("a daemon killed with SIGKILL: list and status say it is gone, with its pid, and that a start cleans up") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 30);
  DaemonProcess daemon(dir.path(), "killed", IdJobConfig("killed", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // Dead but not reaped yet (a zombie; a parent that never waits keeps it so): gone already.
  const pid_t pid = KillToZombie(daemon);
  const CommandResult zombie = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(zombie.out, Catch::Contains("killed                   gone "));
  REQUIRE(daemon.Wait());  // reaped: no process has the pid now
  const std::string said = "job 'killed' is not running: its ringfeedd (pid " + std::to_string(pid) +
                           ") is gone and left its socket " + daemon.socket_path() +
                           " (killed or crashed: its log says why); starting the job again cleans up";
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  INFO("list:\n" << list.out << list.err);
  // The columns stay in place; the reason follows them.
  CHECK_THAT(list.out, Catch::Contains(ListErrorLine("killed", "gone") + said + ")\n"));
  // Another user, whom the socket's mode (0600) denies before the refusal: gone all the same
  // (it was "denied", with advice to join the group). As root, ringfeedctl runs as nobody.
  if (::geteuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0) {
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::others_exec);
    const CommandResult other = RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                            CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
    INFO("list as nobody:\n" << other.out << other.err);
    CHECK(other.status.ToString() == "exit 0");
    CHECK_THAT(other.out, Catch::Contains("killed                   gone "));
  }
  // A live ringfeedd holds the lock (a new daemon still listing and sampling its files): not
  // "stale, start the job again".
  const std::string held = ReadFile(daemon.lock_path());
  {
    FakeRingfeedd next(dir);
    WriteFile(daemon.lock_path(), std::to_string(next.pid()) + "\n");
    const CommandResult starting = RunCommand({CtlBinary(), "status", "killed", "--runtime-dir", daemon.runtime_dir()});
    CHECK_THAT(starting.err, Catch::Contains("; ringfeedd (pid " + std::to_string(next.pid()) +
                                             ") holds the job's lock but does not listen yet: it is starting") &&
                                 !Catch::Contains("start the job again"));
  }
  WriteFile(daemon.lock_path(), held);
  const CommandResult status = RunCommand({CtlBinary(), "status", "killed", "--runtime-dir", daemon.runtime_dir()});
  CHECK(status.status.ToString() == "exit 1");
  CHECK(status.err == "ringfeedctl status: " + said + "\n");
  // --json: the same state and reason, for monitoring.
  const CommandResult listed = RunCommand({CtlBinary(), "list", "--json", "--runtime-dir", daemon.runtime_dir()});
  INFO("list --json:\n" << listed.out << listed.err);
  CHECK(listed.status.ToString() == "exit 0");
  const json gone = json::parse(listed.out);
  CHECK(gone["runtime_dir"] == daemon.runtime_dir());
  REQUIRE(gone["jobs"].size() == 1);
  CHECK(gone["jobs"][0]["job"] == "killed");
  CHECK(gone["jobs"][0]["state"] == "gone");
  CHECK(gone["jobs"][0]["error"] == said);
  CHECK_FALSE(gone["jobs"][0].contains("status"));
  // Killed while it stopped: the lock file says so ("PID stopping"), and it is gone all the same.
  const std::string lock_text = ReadFile(daemon.lock_path());
  WriteFile(daemon.lock_path(), std::to_string(pid) + " stopping\n");
  CHECK(RunCommand({CtlBinary(), "status", "killed", "--runtime-dir", daemon.runtime_dir()}).err ==
        "ringfeedctl status: " + said + "\n");
  WriteFile(daemon.lock_path(), lock_text);
  // A lock file that does not hold just a pid (another program wrote it) names no process.
  const std::string lock = ReadFile(daemon.lock_path());
  for (const std::string& junk : {"  " + std::to_string(pid) + "\n", std::to_string(pid) + " junk\n"}) {
    WriteFile(daemon.lock_path(), junk);
    const CommandResult unsure = RunCommand({CtlBinary(), "status", "killed", "--runtime-dir", daemon.runtime_dir()});
    CHECK(unsure.status.ToString() == "exit 1");
    CHECK_THAT(unsure.err, !Catch::Contains("is gone") && Catch::Contains("Connection refused"));
  }
  WriteFile(daemon.lock_path(), lock);
  // The start that cleans up.
  RINGFEED_REQUIRE_STARTED(daemon);
  const CommandResult again = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(again.out, Catch::Contains("killed                   running"));
  const json running = json::parse(RunCommand({CtlBinary(), "list", "--json", "--runtime-dir", daemon.runtime_dir()}).out);
  REQUIRE(running["jobs"].size() == 1);
  CHECK(running["jobs"][0]["state"] == "running");
  CHECK(running["jobs"][0]["status"]["pid"] == daemon.pid());
  CHECK(running["jobs"][0]["status"]["job"] == "killed");
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("a daemon killed and not reaped yet (a zombie): dump and the client library say it is gone, as status does") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 30);
  DaemonProcess daemon(dir.path(), "undead", IdJobConfig("undead", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // This process is its parent and does not wait for it yet: a zombie, its socket left behind.
  const pid_t pid = KillToZombie(daemon);
  const std::string said = "job 'undead' is not running: its ringfeedd (pid " + std::to_string(pid) +
                           ") is gone and left its socket " + daemon.socket_path() +
                           " (killed or crashed: its log says why); starting the job again cleans up";
  const auto check_said = [&] {
    const CommandResult status = RunCommand({CtlBinary(), "status", "undead", "--runtime-dir", daemon.runtime_dir()});
    CHECK(status.status.ToString() == "exit 1");
    CHECK(status.err == "ringfeedctl status: " + said + "\n");
    // dump said "cannot connect ...: Connection refused; is ringfeedd running for job undead ...".
    const CommandResult dump = RunCommand({CtlBinary(), "dump", "undead", "--runtime-dir", daemon.runtime_dir()});
    CHECK(dump.status.ToString() == "exit 1");
    CHECK(dump.out.empty());
    CHECK(dump.err == "ringfeedctl dump: " + said + "\n");
    // The client library, as a trainer attaches (its advice on attach_timeout after the reason).
    try {
      Client::Attach(daemon.client_options());
      FAIL("attached to a daemon that is gone");
    } catch (const DaemonNotRunningError& e) {
      CHECK(e.reason() == said);
      CHECK(std::string(e.what()) == said + ". To wait for a daemon that is starting, set attach_timeout "
                                            "(ClientOptions; attach_timeout= in Python)");
    }
  };
  {
    INFO("a zombie");
    check_said();
  }
  REQUIRE(daemon.Wait());  // reaped: no process has the pid now
  {
    INFO("reaped");
    check_said();
  }
  std::filesystem::remove(daemon.segment_path());  // the killed daemon's, which no start replaces here
}

TEST_CASE("a stale socket whose lock file is a FIFO: status, list, dump and the client library answer, none blocks") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 30);
  DaemonProcess daemon(dir.path(), "fifolock", IdJobConfig("fifolock", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const std::string lock = daemon.runtime_dir() + "/fifolock.lock";
  daemon.Kill(SIGKILL);
  REQUIRE(daemon.Wait());  // gone: its socket left behind
  // The lock file replaced by a FIFO that nothing writes to: opening it for reading blocked GoneDaemonPid.
  REQUIRE(std::filesystem::remove(lock));
  REQUIRE(::mkfifo(lock.c_str(), 0644) == 0);
  const auto refused = Catch::Contains("Connection refused");
  for (const char* command : {"status", "dump"}) {
    INFO(command);
    const CommandResult r = RunCommand({CtlBinary(), command, "fifolock", "--runtime-dir", daemon.runtime_dir()},
                                       std::chrono::seconds(20));
    CHECK(r.status.ToString() == "exit 1");
    CHECK_THAT(r.err, refused);
  }
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()},
                                        std::chrono::seconds(20));
  CHECK(list.status.ToString() == "exit 0");
  CHECK_THAT(list.out, Catch::Contains("fifolock"));
  try {
    Client::Attach(daemon.client_options());
    FAIL("attached to a daemon that is gone");
  } catch (const DaemonNotRunningError& e) {
    CHECK_THAT(std::string(e.what()), refused);
  }
  std::filesystem::remove(daemon.segment_path());  // the killed daemon's, which no start replaces here
}

TEST_CASE("a ringfeedd holding the job's lock without a socket: status and list say starting, or stopping") {
  // A ringfeedd samples records and reserves its ring before it opens its socket (seconds on
  // slow storage); meanwhile its lock file names it.
  TempDir dir;
  FakeRingfeedd daemon(dir);
  const pid_t pid = daemon.pid();
  const std::string run = dir.file("run");
  std::filesystem::create_directory(run);
  { std::ofstream(run + "/slow.lock") << pid << "\n"; }
  const CommandResult starting = RunCommand({CtlBinary(), "status", "slow", "--runtime-dir", run});
  CHECK(starting.status.ToString() == "exit 1");
  CHECK_THAT(starting.err, Catch::Contains("job 'slow' is starting: ringfeedd (pid " + std::to_string(pid) +
                                           ") holds its lock file " + run + "/slow.lock and opens its socket once it "
                                           "has sampled the first records and reserved its ring") &&
                               !Catch::Contains("not running"));
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", run});
  INFO("list:\n" << list.out << list.err);
  CHECK_THAT(LineWith(list.out, "slow "), Catch::Matches("slow +starting +" + std::to_string(pid) +
                                                         " +- +- +-   \\(no socket yet: it opens it once its ring is "
                                                         "set up\\)"));
  const json listed = json::parse(RunCommand({CtlBinary(), "list", "--json", "--runtime-dir", run}).out);
  REQUIRE(listed["jobs"].size() == 1);
  CHECK(listed["jobs"][0]["state"] == "starting");
  CHECK(listed["jobs"][0]["pid"] == pid);
  // In a subdirectory (systemd's per-instance one) too, once it stops.
  std::filesystem::create_directory(run + "/instance");
  std::filesystem::rename(run + "/slow.lock", run + "/instance/slow.lock");
  { std::ofstream(run + "/instance/slow.lock") << pid << " stopping\n"; }
  const CommandResult stopping = RunCommand({CtlBinary(), "status", "slow", "--runtime-dir", run});
  CHECK_THAT(stopping.err, Catch::Contains("job 'slow' is stopping: ringfeedd (pid " + std::to_string(pid) +
                                           ") closed its socket in " + run + "/instance and is finishing its stop"));
  CHECK_THAT(LineWith(RunCommand({CtlBinary(), "list", "--runtime-dir", run}).out, "slow "),
             Catch::Matches("slow +stopping +" + std::to_string(pid) + " +- +- +-   \\(its socket is closed: "
                            "it is finishing its stop\\)   \\(in " + run + "/instance\\)"));
  // Stopped (SIGSTOP) while it stopped, after closing its socket but before removing it: the
  // socket is there and nobody listens. Stopping all the same, with its pid (helper-141,
  // session 54: "unreachable" and no pid).
  const int closed = BindUnixSocket(run + "/instance/slow.sock", SOCK_STREAM);
  REQUIRE(closed >= 0);
  ::close(closed);
  CHECK_THAT(LineWith(RunCommand({CtlBinary(), "list", "--runtime-dir", run}).out, "slow "),
             Catch::Matches("slow +stopping +" + std::to_string(pid) + " +- +- +-   \\(.*it is stopping\\).*"));
  // A start after a killed daemon left its socket: starting.
  { std::ofstream(run + "/instance/slow.lock") << pid << "\n"; }
  const json left = json::parse(RunCommand({CtlBinary(), "list", "--json", "--runtime-dir", run}).out);
  REQUIRE(left["jobs"].size() == 1);
  CHECK(left["jobs"][0]["state"] == "starting");
  CHECK(left["jobs"][0]["pid"] == pid);
  // The lock names a pid that another program has now (the daemon died, its pid was reused):
  // gone, not starting (an attach_timeout would wait for nothing).
  { std::ofstream(run + "/instance/slow.lock") << ::getpid() << "\n"; }
  const CommandResult reused = RunCommand({CtlBinary(), "status", "slow", "--runtime-dir", run});
  CHECK_THAT(reused.err, Catch::Contains("job 'slow' is not running: its ringfeedd (pid " + std::to_string(::getpid()) +
                                         ") is gone and left its socket " + run + "/instance/slow.sock"));
  CHECK_THAT(LineWith(RunCommand({CtlBinary(), "list", "--runtime-dir", run}).out, "slow "),
             Catch::StartsWith("slow") && Catch::Contains(" gone "));
  std::filesystem::remove(run + "/instance/slow.sock");
  { std::ofstream(run + "/instance/slow.lock") << pid << " stopping\n"; }
  // Gone: not running, as before.
  daemon.Kill();
  const CommandResult gone = RunCommand({CtlBinary(), "status", "slow", "--runtime-dir", run});
  CHECK_THAT(gone.err, Catch::Contains("job 'slow' is not running in " + run));
}

TEST_CASE("list: a long job name widens the JOB column; a row without a status says which subdirectory") {
  TempDir dir;
  const std::string top = dir.file("run"), sub = top + "/instance";
  std::filesystem::create_directories(sub);
  // Sockets nobody listens on (bound, then closed: the file stays).
  auto dead_socket = [](const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
  };
  const std::string long_name(40, 'j');
  dead_socket(top + "/" + long_name + ".sock");
  dead_socket(sub + "/short.sock");
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", top});
  INFO(list.out << list.err);
  CHECK(list.status.ToString() == "exit 0");
  CHECK_THAT(list.out, Catch::StartsWith("JOB" + std::string(40 - 3, ' ') + " STATE "));
  const size_t long_row = list.out.find("\n" + long_name + " ");
  REQUIRE(long_row != std::string::npos);
  const size_t short_row = list.out.find("\nshort" + std::string(40 - 5, ' ') + " ");
  REQUIRE(short_row != std::string::npos);
  const std::string row = list.out.substr(short_row + 1, list.out.find('\n', short_row + 1) - short_row - 1);
  CHECK_THAT(row, Catch::EndsWith(")   (in " + sub + ")"));
}

TEST_CASE("a JOB.sock that is not a socket is said to be one; a .sock no job could be named by is not listed") {
  TempDir dir;
  { std::ofstream(dir.file("file.sock")) << "x"; }
  REQUIRE(::mkdir(dir.file("dir.sock").c_str(), 0700) == 0);
  { std::ofstream(dir.file("bad name\x1b[31m.sock")) << "x"; }
  const CommandResult status = RunCommand({CtlBinary(), "status", "file", "--runtime-dir", dir.path().string()});
  CHECK(status.status.ToString() == "exit 1");
  CHECK_THAT(status.err, Catch::Contains(dir.file("file.sock") + " is a regular file, not a socket: no ringfeedd made "
                                         "it (remove it, or use another runtime directory)") &&
                             !Catch::Contains("stale"));
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", dir.path().string()});
  CHECK_THAT(list.out, Catch::Contains(dir.file("dir.sock") + " is a directory, not a socket"));
  CHECK_THAT(list.out, !Catch::Contains("bad name") && !Catch::Contains("\x1b"));
  // A dangling symbolic link: something in the way too (before: "not running ... (no JOB.sock);
  // jobs there: JOB").
  std::filesystem::create_symlink(dir.file("nowhere"), dir.file("link.sock"));
  const CommandResult link = RunCommand({CtlBinary(), "status", "link", "--runtime-dir", dir.path().string()});
  CHECK(link.status.ToString() == "exit 1");
  CHECK_THAT(link.err, Catch::Contains(dir.file("link.sock") + " is a symbolic link to a file that does not exist, not "
                                       "a socket: no ringfeedd made it") &&
                           !Catch::Contains("is not running in"));
}

TEST_CASE("an empty --runtime-dir or a JOB no config could name is a usage error") {
  for (const std::vector<std::string>& args : {std::vector<std::string>{CtlBinary(), "list", "--runtime-dir", ""},
                                               {CtlBinary(), "status", "job", "--runtime-dir", ""},
                                               {DaemonBinary(), "--config", "/dev/null", "--runtime-dir", ""}}) {
    const CommandResult r = RunCommand(args);
    INFO(args[0] << " " << args[1] << ": " << r.out << r.err);
    CHECK(r.status.ToString() == "exit 2");
    CHECK_THAT(r.err, Catch::Contains("--runtime-dir: an empty directory; leave --runtime-dir out for the default"));
  }
  // So is a JOB no config could name: a path is not looked for as a socket.
  for (const char* command : {"status", "dump"}) {
    const CommandResult r = RunCommand({CtlBinary(), command, "../../etc/passwd"});
    INFO(command << ": " << r.out << r.err);
    CHECK(r.status.ToString() == "exit 2");
    CHECK_THAT(r.err, Catch::StartsWith("ringfeedctl " + std::string(command) +
                                        ": JOB: invalid job name '../../etc/passwd'; expected 1 to 64 characters"));
  }
}

TEST_CASE("ringfeedd --help: what it does, its options, and each exit status on a line of its own") {
  const CommandResult r = RunCommand({DaemonBinary(), "--help"});
  INFO(r.out << r.err);
  CHECK(r.status.ToString() == "exit 0");
  CHECK_THAT(r.out, Catch::StartsWith("ringfeedd: reads the TFRecord files of one job"));
  for (const char* option : {"-c,--config FILE REQUIRED", "--log-level", "--runtime-dir DIR", "--exit-when-done",
                             "--start-epoch EPOCH", "--start-batch BATCH", "--version"}) {
    CHECK_THAT(r.out, Catch::Contains(option));
  }
  CHECK_THAT(r.out, Catch::Contains("\nExit status:\n  0  stopped cleanly"));
  CHECK_THAT(r.out, Catch::Contains("\n  1  runtime failure"));
  CHECK_THAT(r.out, Catch::Contains("\n  2  usage or config error"));
  // The prose is wrapped (CLI11 does not wrap): only option lines may run long.
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("  -")) CHECK(line.size() <= 100);
  }
}

TEST_CASE("ringfeedd JOB.yaml without --config: a usage error that gives the command") {
  const CommandResult r = RunCommand({DaemonBinary(), "job.yaml"});
  INFO(r.out << r.err);
  CHECK(r.status.ToString() == "exit 2");
  CHECK(r.err == "ringfeedd: the job config is given with --config: ringfeedd --config job.yaml\n");
  const CommandResult none = RunCommand({DaemonBinary()});
  CHECK(none.status.ToString() == "exit 2");
  CHECK(none.err == "ringfeedd: --config is required\nRun 'ringfeedd --help' for more information.\n");
  // Every usage error names the program.
  const CommandResult level = RunCommand({DaemonBinary(), "--config", "/dev/null", "--log-level", "verbose"});
  CHECK(level.status.ToString() == "exit 2");
  CHECK_THAT(level.err, Catch::StartsWith("ringfeedd: --log-level: verbose not in {"));
  // A config that cannot be read: the system's reason (CLI11's own check said "File does not
  // exist" for one this user may not read), and a directory named as one.
  const CommandResult missing = RunCommand({DaemonBinary(), "--config", "/nonexistent/job.yaml"});
  CHECK(missing.status.ToString() == "exit 2");
  CHECK_THAT(missing.err, Catch::StartsWith("ringfeedd: --config: cannot read /nonexistent/job.yaml: No such file or "
                                            "directory"));
  const CommandResult directory = RunCommand({DaemonBinary(), "--config", "/tmp"});
  CHECK(directory.status.ToString() == "exit 2");
  CHECK_THAT(directory.err, Catch::StartsWith("ringfeedd: --config: /tmp is a directory, not a config file"));
  // `-c=FILE` (CLI11 keeps the '=' in a short option's value): the spelling that works.
  TempDir dir;
  WriteFile(dir.file("job.yaml"), "job: x\n");
  const CommandResult equals = RunCommand({DaemonBinary(), "-c=" + dir.file("job.yaml")});
  CHECK(equals.status.ToString() == "exit 2");
  CHECK_THAT(equals.err, Catch::StartsWith("ringfeedd: --config: cannot read =" + dir.file("job.yaml") +
                                           ": -c takes no '=': write -c " + dir.file("job.yaml") + " or --config=" +
                                           dir.file("job.yaml") + "\n"));
  // --help wins over the other arguments, a config that cannot be read among them.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-h", "--config", "/nonexistent/x.yaml"},
                                               std::vector<std::string>{"--config", "/nonexistent/x.yaml", "--help"}}) {
    std::vector<std::string> command = {DaemonBinary()};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult help = RunCommand(command);
    CHECK(help.status.ToString() == "exit 0");
    CHECK_THAT(help.out, Catch::StartsWith("ringfeedd: reads the TFRecord files of one job"));
    CHECK(help.err.empty());
  }
  // ringfeedctl check takes the config as its argument; --config there is said so, and an empty
  // path is named as ringfeedd names it.
  for (const std::vector<std::string>& form : {std::vector<std::string>{"--config", dir.file("job.yaml")},
                                               std::vector<std::string>{"--config=" + dir.file("job.yaml")}}) {
    std::vector<std::string> command = {CtlBinary(), "check"};
    command.insert(command.end(), form.begin(), form.end());
    const CommandResult check = RunCommand(command);
    CHECK(check.status.ToString() == "exit 2");
    CHECK(check.err == "ringfeedctl check: the job config is check's argument, without --config: ringfeedctl check " +
                           dir.file("job.yaml") + "\n");
  }
  const CommandResult short_equals = RunCommand({CtlBinary(), "check", "-c=" + dir.file("job.yaml")});
  CHECK(short_equals.err == "ringfeedctl check: the job config is check's argument, without --config: ringfeedctl "
                            "check " + dir.file("job.yaml") + "\n");
  // ... but help asked for comes first.
  const CommandResult check_help = RunCommand({CtlBinary(), "check", "-h", "--config", dir.file("job.yaml")});
  CHECK(check_help.status.ToString() == "exit 0");
  CHECK_THAT(check_help.out, Catch::Contains("Usage: ringfeedctl check [OPTIONS] CONFIG"));
  const CommandResult empty = RunCommand({CtlBinary(), "check", ""});
  CHECK(empty.status.ToString() == "exit 2");
  CHECK_THAT(empty.err, Catch::StartsWith("ringfeedctl check: CONFIG: the path is empty\n"));
  // An unknown option is named, not the required one it came without (CLI11 checks those first).
  const CommandResult unknown = RunCommand({DaemonBinary(), "-x"});
  CHECK(unknown.status.ToString() == "exit 2");
  CHECK(unknown.err == "ringfeedd: The following argument was not expected: -x\nRun 'ringfeedd --help' for more "
                       "information.\n");
  for (const char* command : {"status", "dump", "inspect", "check"}) {
    const CommandResult r = RunCommand({CtlBinary(), command, "-x"});
    INFO(command << ": " << r.err);
    CHECK(r.status.ToString() == "exit 2");
    CHECK_THAT(r.err, Catch::StartsWith(std::string("ringfeedctl ") + command +
                                        ": The following argument was not expected: -x\n"));
  }
  // "--" ends the options: no unknown option, the missing argument is the error.
  CHECK_THAT(RunCommand({CtlBinary(), "status", "--"}).err, Catch::StartsWith("ringfeedctl status: JOB is required"));
}

TEST_CASE("--help: exit statuses and where problems go, as docs/ringfeedctl.md says") {
  const auto help = [](const std::string& command) {
    const CommandResult r = RunCommand({CtlBinary(), command, "--help"});
    INFO(r.out << r.err);
    CHECK(r.status.ToString() == "exit 0");
    std::string text = r.out;  // as one line: the footers wrap at 100 columns
    for (char& c : text) {
      if (c == '\n') c = ' ';
    }
    return text;
  };
  const std::string inspect = help("inspect");
  CHECK_THAT(inspect, Catch::Contains("go to stderr as they are found, except with --verify, which prints them on "
                                      "stdout as its report"));
  const std::string check = help("check");
  CHECK_THAT(check, Catch::Contains("a file list that cannot be expanded") &&
                        Catch::Contains("a permissions.group that does not exist") &&
                        Catch::Contains("a memory budget"));
  CHECK_THAT(help("dump"), Catch::Contains("sent no batch within --timeout seconds"));
  CHECK_THAT(help("status"), Catch::Contains("sent a reply ringfeedctl cannot read"));
}

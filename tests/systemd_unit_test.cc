// Tests of systemd/ringfeed@.service: the settings the daemon depends on (Type=notify, a
// per-instance RuntimeDirectory, RemoveIPC=no, no DynamicUser=, ...), and `systemd-analyze
// verify` on a copy whose ExecStart= names an existing binary (verify rejects a missing one; the
// real ringfeedd is installed later). systemd-analyze verify needs no running systemd; where the
// program is absent the verify test prints "RINGFEED_SKIP:" (a failure with CI=true).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace ringfeed {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

const std::string kUnitPath = std::string(RINGFEED_SOURCE_DIR) + "/systemd/ringfeed@.service";

// A unit file as systemd reads it: "[Section]" headers and Key=Value lines; '#' and ';' start
// comments. Values of a repeated key are kept in order.
struct UnitFile {
  std::map<std::string, std::map<std::string, std::vector<std::string>>> sections;
  std::vector<std::string> comments;

  std::vector<std::string> Values(const std::string& section, const std::string& key) const {
    auto s = sections.find(section);
    if (s == sections.end()) return {};
    auto k = s->second.find(key);
    return k == s->second.end() ? std::vector<std::string>{} : k->second;
  }
  // The value of a key given once; "<absent>" or "<repeated>" otherwise.
  std::string Value(const std::string& section, const std::string& key) const {
    std::vector<std::string> v = Values(section, key);
    if (v.empty()) return "<absent>";
    if (v.size() > 1) return "<repeated>";
    return v[0];
  }
  bool HasKeyAnywhere(const std::string& key) const {
    for (const auto& [name, keys] : sections) {
      if (keys.count(key) > 0) return true;
    }
    return false;
  }
};

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

UnitFile ParseUnit(const std::string& text) {
  UnitFile unit;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    if (line[0] == '#' || line[0] == ';') {
      unit.comments.push_back(line);
      continue;
    }
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    size_t eq = line.find('=');
    INFO("unit line: " << line);
    REQUIRE(eq != std::string::npos);
    REQUIRE(!section.empty());
    unit.sections[section][Trim(line.substr(0, eq))].push_back(Trim(line.substr(eq + 1)));
  }
  return unit;
}

TEST_CASE("the unit has the settings ringfeedd depends on", "[systemd][unit]") {
  const UnitFile unit = ParseUnit(ReadFile(kUnitPath));
  const std::string S = "Service";

  CHECK(unit.Value(S, "Type") == "notify");
  CHECK(unit.Value(S, "NotifyAccess") == "main");
  CHECK(unit.Value(S, "ExecStart") == "/usr/local/bin/ringfeedd --config /etc/ringfeed/%i.yaml");
  CHECK(unit.Value(S, "WatchdogSec") == "30s");
  CHECK(unit.Value(S, "Restart") == "on-failure");
  CHECK(unit.Value(S, "RestartSec") == "2s");
  CHECK(unit.Value(S, "RestartPreventExitStatus") == "2");  // a bad config (ringfeedd --help)
  CHECK(unit.Value(S, "KillSignal") == "SIGTERM");
  CHECK(unit.Value(S, "TimeoutStopSec") == "30s");

  // Per instance, so that stopping one job does not remove another job's directory.
  CHECK(unit.Value(S, "RuntimeDirectory") == "ringfeed/%i");
  CHECK_THAT(unit.Value(S, "RuntimeDirectory"), Catch::Contains("%i"));
  CHECK(unit.Value(S, "RuntimeDirectoryMode") == "0755");
  CHECK_FALSE(unit.HasKeyAnywhere("RuntimeDirectoryPreserve"));

  // No systemd clean-up of POSIX shared memory: no RemoveIPC, hence no DynamicUser.
  CHECK(unit.Value(S, "RemoveIPC") == "no");
  CHECK_FALSE(unit.HasKeyAnywhere("DynamicUser"));
  CHECK_FALSE(unit.HasKeyAnywhere("PrivateIPC"));

  // No user is forced on the operator; the guidance is there, commented.
  CHECK_FALSE(unit.HasKeyAnywhere("User"));
  CHECK_FALSE(unit.HasKeyAnywhere("Group"));
  bool user_hint = false, group_hint = false;
  for (const std::string& c : unit.comments) {
    user_hint = user_hint || c.rfind("#User=", 0) == 0;
    group_hint = group_hint || c.find("permissions: {group:") != std::string::npos;
  }
  CHECK(user_hint);
  CHECK(group_hint);

  // Hardening that leaves /dev/shm writable and the data readable.
  const std::pair<const char*, const char*> hardening[] = {
      {"NoNewPrivileges", "yes"},        {"ProtectSystem", "strict"},
      {"ProtectHome", "read-only"},      {"PrivateTmp", "yes"},
      {"ProtectKernelTunables", "yes"},  {"ProtectControlGroups", "yes"},
      {"RestrictAddressFamilies", "AF_UNIX"}, {"LockPersonality", "yes"},
      {"MemoryDenyWriteExecute", "yes"}, {"DevicePolicy", "closed"},
      {"UMask", "0077"},
  };
  for (const auto& [key, value] : hardening) {
    INFO(key);
    CHECK(unit.Value(S, key) == value);
  }
  // PrivateDevices= would replace /dev (and so /dev/shm) with a private mount; ProtectProc=
  // would hide trainers' processes; ProtectHome=yes/tmpfs would hide data under /home.
  CHECK_FALSE(unit.HasKeyAnywhere("PrivateDevices"));
  CHECK_FALSE(unit.HasKeyAnywhere("ProtectProc"));
  CHECK_FALSE(unit.HasKeyAnywhere("InaccessiblePaths"));
  CHECK_FALSE(unit.HasKeyAnywhere("ReadWritePaths"));
  CHECK_THAT(unit.Value(S, "CapabilityBoundingSet"), Catch::Contains("CAP_CHOWN") &&
                                                         Catch::Contains("CAP_DAC_READ_SEARCH"));

  CHECK(unit.Value("Install", "WantedBy") == "multi-user.target");
  bool enable_hint = false;
  for (const std::string& c : unit.comments) {
    enable_hint =
        enable_hint || c.find("systemctl enable --now ringfeed@taxi") != std::string::npos;
  }
  CHECK(enable_hint);
}

std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path ? path : "") + ":/usr/bin:/bin:/usr/sbin:/sbin";
  std::istringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct RunResult {
  int exit_status = -1;
  std::string output;  // stdout and stderr together
};

// Runs argv[0] with its arguments (fork/exec), collecting its output.
RunResult Run(const std::vector<std::string>& argv) {
  int pipefd[2];
  REQUIRE(pipe2(pipefd, O_CLOEXEC) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // No pager, no colours, no tty-dependent output.
    setenv("SYSTEMD_PAGER", "", 1);
    setenv("SYSTEMD_COLORS", "0", 1);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  RunResult result;
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) result.output.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The unit text with ExecStart's program replaced by one that exists on every machine.
std::string WithExistingProgram(std::string text) {
  const std::string from = "ExecStart=/usr/local/bin/ringfeedd ";
  size_t pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), "ExecStart=/bin/true ");
  return text;
}

TEST_CASE("systemd-analyze verify accepts the unit", "[systemd][unit][verify]") {
  const std::string analyze = FindProgram("systemd-analyze");
  if (analyze.empty()) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") {
      FAIL("CI=true but systemd-analyze is not installed (apt-get install systemd)");
    }
    ringfeed::testing::Skip("systemd-analyze not found (package systemd); the unit was checked only by the "
                            "assertions of the other test cases");
    return;
  }

  TempDir dir;
  const std::string text = WithExistingProgram(ReadFile(kUnitPath));
  // An instance name, as `systemctl start ringfeed@verify` would load it.
  const std::string unit = dir.file("ringfeed@verify.service");
  WriteFile(unit, text);
  RunResult ok = Run({analyze, "verify", "--man=no", unit});
  INFO("systemd-analyze verify output:\n" << ok.output);
  CHECK(ok.exit_status == 0);
  // verify reports unknown keys and bad values as warnings with exit status 0: any output at
  // all is a problem.
  CHECK(ok.output.empty());

  SECTION("the check is not vacuous: a bad value and an unknown key are reported") {
    std::string broken = text;
    broken.replace(broken.find("Type=notify"), 11, "Type=notifyy");
    broken.replace(broken.find("RemoveIPC=no"), 12, "RemoveIPCC=no");
    const std::string bad_unit = dir.file("ringfeed@broken.service");
    WriteFile(bad_unit, broken);
    RunResult bad = Run({analyze, "verify", "--man=no", bad_unit});
    INFO("systemd-analyze verify output:\n" << bad.output);
    CHECK_THAT(bad.output, Catch::Contains("notifyy") && Catch::Contains("RemoveIPCC"));
  }

  SECTION("a missing ExecStart program fails verification") {
    std::string missing = text;
    missing.replace(missing.find("ExecStart=/bin/true"), 19,
                    "ExecStart=" + dir.file("no-such-ringfeedd"));
    const std::string bad_unit = dir.file("ringfeed@missing.service");
    WriteFile(bad_unit, missing);
    RunResult bad = Run({analyze, "verify", "--man=no", bad_unit});
    INFO("systemd-analyze verify output:\n" << bad.output);
    CHECK(bad.exit_status != 0);
    CHECK_THAT(bad.output, Catch::Contains("no-such-ringfeedd"));
  }
}

TEST_CASE("the installed copy points at the prefix installed to", "[systemd][unit]") {
  // `cmake --install BUILD --prefix P` (the unit's component only): the paths are written at
  // install time (systemd/install_unit.cmake), so P need not be the configure step's prefix.
  if (std::string(RINGFEED_SYSTEMD_UNIT_DIR).starts_with("/")) {
    ringfeed::testing::Skip(std::string("RINGFEED_SYSTEMD_UNIT_DIR is absolute (") + RINGFEED_SYSTEMD_UNIT_DIR +
                            "): installing into a temporary prefix would write there");
    return;
  }
  TempDir dir;
  const std::string prefix = dir.path().string() + "/prefix";
  RunResult install = Run({RINGFEED_CMAKE_COMMAND, "--install", RINGFEED_BINARY_DIR, "--prefix", prefix, "--component",
                           "systemd"});
  INFO(install.output);
  REQUIRE(install.exit_status == 0);
  const UnitFile unit = ParseUnit(ReadFile(prefix + "/" + RINGFEED_SYSTEMD_UNIT_DIR + "/ringfeed@.service"));
  CHECK(unit.Value("Service", "ExecStart") == prefix + "/bin/ringfeedd --config /etc/ringfeed/%i.yaml");
  CHECK(unit.Value("Unit", "Documentation") == "file://" + prefix + "/share/doc/ringfeed/operations.md");
  const UnitFile source = ParseUnit(ReadFile(kUnitPath));
  CHECK(unit.Value("Service", "RemoveIPC") == source.Value("Service", "RemoveIPC"));
  CHECK(unit.Value("Service", "RuntimeDirectory") == source.Value("Service", "RuntimeDirectory"));

  // The pages installed beside it (the unit's Documentation=): every relative link resolves
  // there, to another installed page or chart (links into the source tree would be dead).
  const std::filesystem::path docs = prefix + "/share/doc/ringfeed";
  const std::regex link(R"(\]\(([^)#\s]+)(#[^)]*)?\))");
  int pages = 0, links = 0;
  for (const auto& entry : std::filesystem::directory_iterator(docs)) {
    if (entry.path().extension() != ".md") continue;
    ++pages;
    const std::string page = ReadFile(entry.path().string());
    for (std::sregex_iterator m(page.begin(), page.end(), link), end; m != end; ++m) {
      const std::string target = (*m)[1].str();
      if (target.find("://") != std::string::npos || target.starts_with("mailto:")) continue;
      ++links;
      INFO(entry.path().filename().string() << " links to " << target);
      CHECK(std::filesystem::exists(docs / target));
    }
  }
  CHECK(pages == 7);
  CHECK(links > 20);
}

}  // namespace
}  // namespace ringfeed

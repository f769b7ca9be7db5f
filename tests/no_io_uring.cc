// no_io_uring: runs a command in which io_uring_setup(2) fails with EPERM, as under Docker's
// default seccomp profile (since 2023) or with the sysctl kernel.io_uring_disabled = 2, for the
// tests of ringfeedd without io_uring (tests/daemon_autotune_test.cc).
//
//   no_io_uring COMMAND [ARGS...]
//
// It installs a seccomp filter (classic BPF, no libseccomp) that answers io_uring_setup with
// EPERM and allows every other system call, then execs COMMAND; children inherit it.
// Exit status: COMMAND's, or 125 when the filter cannot be installed (or this architecture is
// not known here), 127 when COMMAND cannot be run.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#define RINGFEED_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define RINGFEED_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: no_io_uring COMMAND [ARGS...]\n");
    return 125;
  }
#ifndef RINGFEED_AUDIT_ARCH
  std::fprintf(stderr, "no_io_uring: unknown architecture\n");
  return 125;
#else
  sock_filter filter[] = {
      // Another architecture's system call numbers mean other calls: allow them unchanged.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RINGFEED_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    std::fprintf(stderr, "no_io_uring: cannot install the seccomp filter: %s\n", std::strerror(errno));
    return 125;
  }
  ::execvp(argv[1], argv + 1);
  std::fprintf(stderr, "no_io_uring: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
#endif
}

// OccupyClosedStandardFds: standard streams that a parent closed (`>&-`, `2>&-`). The next file
// or socket the process opens would get that descriptor, and what is written to the stream would
// go into it: ringfeedctl dump with stdout closed wrote a batch's JSON into its own connection to
// the daemon (and the daemon's log would land in a socket). Each closed one of 0, 1 and 2 is
// opened on /dev/null; returns which were closed. Call first in main, before anything opens a file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace ringfeed {

inline std::vector<int> OccupyClosedStandardFds() {
  std::vector<int> closed;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    closed.push_back(fd);
    const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);  // the lowest free: fd itself
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
  return closed;
}

}  // namespace ringfeed

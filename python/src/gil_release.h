// GilRelease: releases the GIL for its lifetime, as nb::gil_scoped_release does, for the module's
// blocking calls (attach, Client::Next slices, files(), CUDA synchronisation) — but safe when
// the interpreter exits while a daemon thread is inside one of them.
//
// Why: a thread that takes the GIL back while Python finalizes is ended by CPython with
// pthread_exit (PyEval_RestoreThread, CPython 3.11-3.13; documented in the C API's "Thread
// State and the Global Interpreter Lock"). pthread_exit unwinds the C++ frames with a forced
// unwind, and one that reaches a noexcept frame (a destructor: nb::gil_scoped_release's, which
// takes the GIL back) or nanobind's catch (...) calls std::terminate: the trainer's exit ends in
// "terminate called without an active exception" and SIGABRT. So: when Python is finalizing
// (checked before taking the GIL back), or starts to while this thread waits for the GIL (the
// forced unwind, caught at once), the thread stays parked until the process exits instead. It
// holds no GIL and nothing Python waits for: daemon threads are not joined at exit.
//
// Thread-safety: one object per blocking call, on the thread that made it.
#pragma once

#include <Python.h>
#include <cxxabi.h>
#include <unistd.h>

namespace ringfeed::python {

class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { Restore(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  static bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
  }
  [[noreturn]] static void Park() {
    for (;;) ::pause();  // until the process exits
  }
  // Not inline into the noexcept destructor's frame: the forced unwind is caught here, before
  // it reaches that frame.
  [[gnu::noinline]] static void Restore(PyThreadState* state) {
    if (Finalizing()) Park();
    try {
      PyEval_RestoreThread(state);
    } catch (abi::__forced_unwind&) {
      Park();  // never leaves the handler, so the unwind is neither swallowed nor terminate()d
    }
  }

  PyThreadState* state_;
};

}  // namespace ringfeed::python

// ThreadedCopyBackend (tests only): the CPU kernels behind a Backend whose CopyQueue really copies
// in the background, as a GPU's does: downloads on one thread, uploads on another, each direction
// in the order queued (the contract of kernels/backend.h). The CPU backend's own queue copies at
// once (SynchronousCopyQueue), so code that reads a download's host buffer before wait_host, or
// overwrites a copy's source before it has completed, still works there; here it reads or writes
// memory that the copy thread is using: usually a wrong value (a bitwise comparison fails) and
// always, under ThreadSanitizer (scripts/test_tsan.sh), a reported data race.
#pragma once
#include <memory>

#include "forwarding_backend.h"
#include "kernels/backend.h"

namespace strata::testing {

class ThreadedCopyBackend : public ForwardingBackend {
 public:
  ThreadedCopyBackend() : ForwardingBackend(cpu_backend()) {}
  std::unique_ptr<CopyQueue> make_copy_queue() override;
};

}  // namespace strata::testing

#include "sim/mj_guard.h"

#include <csetjmp>
#include <cstring>

#include <mujoco/mujoco.h>

// Exported by libmujoco 4.0 (the version pinned in pyproject.toml) and used by
// its own bindings: a log handler for the calling thread only, so trapping an
// error here does not touch the global handler other threads log through.
extern "C" {
MJAPI mjfLogHandler _mjPRIVATE_setTlsLogHandler(mjfLogHandler handler);
MJAPI mjfLogHandler _mjPRIVATE_getGlobalLogHandler(void);
}

namespace vlmrm::mj {
namespace {

thread_local std::jmp_buf* t_recovery = nullptr;
thread_local char t_message[1024];

void trap_errors(const mjLogMessage* msg) {
  if (msg->level == mjLOG_ERROR && t_recovery != nullptr) {
    std::strncpy(t_message, msg->subject, sizeof(t_message) - 1);
    t_message[sizeof(t_message) - 1] = '\0';
    std::longjmp(*t_recovery, 1);
  }
  // Warnings and information go where they would have gone without us.
  _mjPRIVATE_getGlobalLogHandler()(msg);
}

}  // namespace

bool call_trapping_errors(void (*fn)(void*), void* arg, std::string* message) {
  std::jmp_buf recovery;
  std::jmp_buf* outer = t_recovery;
  mjfLogHandler previous = _mjPRIVATE_setTlsLogHandler(trap_errors);
  t_recovery = &recovery;
  bool ok;
  if (setjmp(recovery) == 0) {
    fn(arg);
    ok = true;
  } else {
    ok = false;
  }
  t_recovery = outer;
  _mjPRIVATE_setTlsLogHandler(previous);
  if (!ok && message) *message = t_message;
  return ok;
}

}  // namespace vlmrm::mj

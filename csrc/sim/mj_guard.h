// MuJoCo reports errors with mju_error, whose default handler ends the process.
// Calls made on our threads go through `guarded`, which traps an error with a
// thread-local log handler (as MuJoCo's own Python bindings do) and throws it
// as a C++ exception after the MuJoCo call has unwound.
#pragma once

#include <stdexcept>
#include <string>

namespace vlmrm::mj {

// Runs fn(arg); returns false and writes MuJoCo's message if it raised an error.
// Implemented with setjmp/longjmp: fn must not own objects with destructors.
bool call_trapping_errors(void (*fn)(void*), void* arg, std::string* message);

// Runs `body` (a lambda that only makes MuJoCo calls on plain pointers and
// values) and throws std::runtime_error("<what>: <MuJoCo's message>") if MuJoCo
// raised an error in it.
template <typename Body>
void guarded(const char* what, Body&& body) {
  std::string message;
  auto trampoline = [](void* p) { (*static_cast<Body*>(p))(); };
  if (!call_trapping_errors(trampoline, &body, &message)) {
    throw std::runtime_error(std::string(what) + ": MuJoCo error: " + message);
  }
}

}  // namespace vlmrm::mj

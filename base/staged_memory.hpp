// The device memory of `--device cpu-staged`: host pages that the CPU's layers compute on, handed
// out under addresses the host cannot use. Two ranges of the same size are reserved at start: the
// real one, readable and writable, and beside it one with no access at all. An allocation takes
// pages of the real range and returns their address in the other; the cpu-staged layer table, step
// ops and staging copies (the device's calls) turn such an address back into the real one
// (`real`) before the CPU's code runs. Host code that reads or writes a device buffer directly,
// which a GPU run would fault on, faults on cpu-staged too, and the fault names it (a SIGSEGV
// handler prints what was touched and the stack, then aborts). One arena per process, as a
// device's memory is.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace mpitron::staged_memory {

// Zero-filled, 4 KiB aligned; throws DeviceOutOfMemory when the arena is full.
void* allocate(size_t bytes);
void release(void* device_address);

// The no-access range: [begin, end) (both null before the first allocation).
struct Range {
  uintptr_t begin = 0, end = 0;
};
Range device_range();

// The real address of a device address (any other pointer unchanged).
template <class T>
T* real(T* p) {
  const Range r = device_range();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a < r.begin || a >= r.end) return p;
  return reinterpret_cast<T*>(a - (r.end - r.begin));
}

// A call's argument as the CPU's code takes it: pointers translated by `real`, the rest as given.
template <class T>
T real_arg(T x) {
  if constexpr (std::is_pointer_v<T>)
    return real(x);
  else
    return x;
}

// A member of a constexpr table of functions (a layer table, step ops) as a device call of
// cpu-staged: the same function, its pointer arguments translated by `real` first. Null where the
// table's entry is.
template <auto& table, auto member, class R, class... Args>
struct DeviceCall {
  static R call(Args... args) { return (table.*member)(real_arg<Args>(args)...); }
};
template <auto& table, auto member, class Table, class R, class... Args>
constexpr auto device_call_of(R (*Table::*)(Args...)) {
  return &DeviceCall<table, member, R, Args...>::call;
}
template <class F>
constexpr bool is_null(F f) {  // a parameter: no warning that a function's address is never null
  return f == nullptr;
}
template <auto& table, auto member>
constexpr auto device_call() {
  return is_null(table.*member) ? nullptr : device_call_of<table, member>(member);
}

}  // namespace mpitron::staged_memory

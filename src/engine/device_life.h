// An accelerator's runtime state: the driver's context, the pipelines or
// kernel modules a backend compiles or loads on first use, its queues and
// threads. It is up while something needs the device and is given back when
// nothing has needed it for a while, so that an idle process holds nothing
// there (docs/devices.md has the figures).
//
// Every use of a device holds it (DeviceHold): a model, for its whole life,
// and anything that asks the device a question. The first hold after a
// release brings the device back. Where there is no accelerator every call
// here is a no-op.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/scope.h"
#include "core/usage.h"

namespace reclaim {

enum class DeviceState {
  absent,    // no accelerator in this process
  in_use,    // held
  idle,      // up, and nothing holds it
  released,  // given back; the next hold brings it up
};
std::string_view device_state_name(DeviceState s);  // "none", "in_use", "idle", "released"

// What a device's driver context has set for itself, where the backend can
// say (ggml-cuda, patched): CUDA grows a context's stack when a kernel needs
// more, and keeps it until the context goes.
struct DeviceContextLimits {
  std::string device;       // ggml's name ("CUDA0")
  uint64_t stack_size = 0;  // per thread, bytes
  uint64_t heap_size = 0;   // device-side malloc heap, bytes
  bool lazy_loading = false;  // kernel modules load at first launch
};

struct DeviceLifeStatus {
  DeviceState state = DeviceState::absent;
  std::string names;        // ggml's names of the accelerators ("Vulkan0")
  bool releasable = false;  // the backends can give their state back (a patched ggml-vulkan)
  int holds = 0;
  double idle_s = 0;        // how long nothing has held it, while idle
  uint64_t releases = 0;
  uint64_t bring_ups = 0;   // after a release
  double last_release_ms = 0;
  double last_bring_up_ms = 0;
  int64_t state_bytes = 0;  // the ledger's device_state entry while up
  std::vector<DeviceContextLimits> limits;  // while up, where the backend reads them
};

class DeviceHold {
 public:
  DeviceHold() = default;
  DeviceHold(DeviceHold&& o) noexcept : held_(o.held_) { o.held_ = false; }
  DeviceHold& operator=(DeviceHold&& o) noexcept;
  DeviceHold(const DeviceHold&) = delete;
  DeviceHold& operator=(const DeviceHold&) = delete;
  ~DeviceHold() { reset(); }
  void reset() noexcept;

 private:
  friend DeviceHold hold_devices();
  bool held_ = false;
};

// Holds the accelerators, bringing them up first where they were released.
// Throws Error when a device cannot be started again.
DeviceHold hold_devices();

DeviceLifeStatus device_life();

// Gives the accelerators' runtime state back once nothing has held them for
// `idle` (a negative `idle`: never). Returns when to ask again:
// time_point::max() when there is nothing to wait for (held, released, no
// accelerator, or backends that cannot release).
std::chrono::steady_clock::time_point release_idle_devices(std::chrono::milliseconds idle);

// Runtime's part: brings the accelerators up at start-up (a device's
// context and driver come with its first backend: CUDA's primary context, a
// Vulkan instance and device). Their state is an entry of `scope`, born with
// it and released with it.
void start_devices(Scope& scope);
void stop_devices() noexcept;

// The device-state entry's bytes: the heap the device's start-up took, plus
// the most the heap has held, at a moment when no model was loaded, beyond
// what it held at the first call after the device came up. The registry
// calls it once it is built and whenever its last loaded model is gone.
void note_devices_idle();

// Accelerator memory for the ledger's probe: read from the devices while
// they are up, 0 in use (with the last total) while released, so that a
// probe never brings a device back.
std::vector<DeviceMemory> probe_device_memory();

}  // namespace reclaim

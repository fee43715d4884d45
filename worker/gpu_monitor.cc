#include "worker/gpu_monitor.h"

#include <dlfcn.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/logging.h"

namespace cascade {

// NVML's C interface, as its documentation gives it: every call returns 0 on success;
// devices are opaque handles.
class GpuMonitor::Nvml {
 public:
  using Device = void*;
  struct Utilization {
    unsigned int gpu;     // percent of the last sample period a kernel ran
    unsigned int memory;  // percent of it memory was read or written
  };
  struct Memory {
    unsigned long long total, free, used;  // bytes
  };

  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      reason_ = absl::StrCat("NVML not found (", dlerror(), ")");
      return;
    }
    if (!Bind(&init_, "nvmlInit_v2") || !Bind(&count_, "nvmlDeviceGetCount_v2") ||
        !Bind(&handle_, "nvmlDeviceGetHandleByIndex_v2") || !Bind(&name_, "nvmlDeviceGetName") ||
        !Bind(&util_, "nvmlDeviceGetUtilizationRates") || !Bind(&mem_, "nvmlDeviceGetMemoryInfo") ||
        !Bind(&temp_, "nvmlDeviceGetTemperature") || !Bind(&shutdown_, "nvmlShutdown")) {
      return;
    }
    if (int rc = init_(); rc != 0) {
      reason_ = absl::StrCat("nvmlInit failed (NVML error ", rc, ")");
      return;
    }
    ok_ = true;
  }
  ~Nvml() {
    if (ok_) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }

  bool ok() const { return ok_; }
  const std::string& reason() const { return reason_; }

  std::vector<v1::GpuStats> Sample() const ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<v1::GpuStats> out;
    if (!ok_) return out;
    absl::MutexLock lock(&mu_);
    unsigned int n = 0;
    if (count_(&n) != 0) return out;
    for (unsigned int i = 0; i < n; ++i) {
      Device d = nullptr;
      if (handle_(i, &d) != 0) continue;
      v1::GpuStats g;
      g.set_index(static_cast<int32_t>(i));
      char name[96] = {};
      if (name_(d, name, sizeof(name)) == 0) g.set_name(name);
      Utilization u{};
      if (util_(d, &u) == 0) g.set_utilization(u.gpu / 100.0);
      Memory m{};
      if (mem_(d, &m) == 0) {
        g.set_memory_used_bytes(m.used);
        g.set_memory_total_bytes(m.total);
      }
      unsigned int t = 0;
      if (temp_(d, /*NVML_TEMPERATURE_GPU=*/0, &t) == 0) g.set_temperature_celsius(t);
      out.push_back(std::move(g));
    }
    return out;
  }

 private:
  template <typename F>
  bool Bind(F** fn, const char* symbol) {
    *fn = reinterpret_cast<F*>(dlsym(lib_, symbol));
    if (*fn == nullptr) reason_ = absl::StrCat("NVML lacks ", symbol);
    return *fn != nullptr;
  }

  void* lib_ = nullptr;
  bool ok_ = false;
  std::string reason_;
  mutable absl::Mutex mu_;  // NVML is thread-safe; one sampler at a time keeps it cheap
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned int*) = nullptr;
  int (*handle_)(unsigned int, Device*) = nullptr;
  int (*name_)(Device, char*, unsigned int) = nullptr;
  int (*util_)(Device, Utilization*) = nullptr;
  int (*mem_)(Device, Memory*) = nullptr;
  int (*temp_)(Device, int, unsigned int*) = nullptr;
};

GpuMonitor::GpuMonitor() : nvml_(std::make_unique<Nvml>()) {
  if (!nvml_->ok()) spdlog::debug("GPU metrics off: {}", nvml_->reason());
}
GpuMonitor::~GpuMonitor() = default;
bool GpuMonitor::available() const { return nvml_->ok(); }
const std::string& GpuMonitor::unavailable_reason() const { return nvml_->reason(); }
std::vector<v1::GpuStats> GpuMonitor::Sample() const { return nvml_->Sample(); }

}  // namespace cascade

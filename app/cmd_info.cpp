// `troupe info`: what this build and machine offer (CPU features, CUDA devices).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "app/command.hpp"
#include "app/version.hpp"
#include "model/matmul.hpp"
#include "model/matmul_amx.hpp"
#include "model/paged_attention.hpp"
#ifdef TROUPE_HAVE_CUDA
#include "gpu/device_info.hpp"
#endif

namespace {
troupe::app::register_command reg("info", "Show build and machine capabilities", [](CLI::App&) {
  return []() {
    std::printf("troupe %s\n", troupe::version());
    __builtin_cpu_init();
    // __builtin_cpu_supports answers a feature's bit, not 1.
    std::printf("cpu: avx2=%d fma=%d avx512f=%d avx512vnni=%d\n", __builtin_cpu_supports("avx2") != 0,
                __builtin_cpu_supports("fma") != 0, __builtin_cpu_supports("avx512f") != 0,
                __builtin_cpu_supports("avx512vnni") != 0);
    const bool fast = troupe::model::fast_order_available();
    std::printf("matmul: %s (fast order: %s); %s\n", troupe::model::matmul_isa(),
                fast ? "available" : "not available, it needs AVX2 or AVX-512 VNNI; llama.cpp's order runs",
                troupe::model::amx_path_line().c_str());
    const bool q8 = troupe::model::kv_q8_supported(64) || troupe::model::kv_q8_supported(128);
    std::printf("q8 K/V: %s\n", q8 ? "available (head size 64 or 128)" : "not available, it needs AVX2 or AVX-512");
#ifdef TROUPE_HAVE_CUDA
    auto d = troupe::gpu::query_devices();
    std::printf("cuda backend: built; %s\n", d.count ? d.summary.c_str() : d.summary.c_str());
#else
    std::printf("cuda backend: not built (nvcc was not found at configure time)\n");
#endif
    return 0;
  };
});
}  // namespace

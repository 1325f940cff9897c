#pragma once
// Reading a database for the report: winners by key, the header facts, and
// which kernels fail. Internal to report/.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "store/store.hpp"

namespace ft::db::report::detail {

// "NVIDIA H200 (sm_90a)": how devices are matched between databases.
std::string device_label(const DeviceRecord& d);
// "NVIDIA H200 (sm_90a), cuda driver 580.95.05, runtime 13.0".
std::string device_description(const DeviceRecord& d);
std::string toolchain_label(const ToolchainRecord& t);

Winner winner_of(const WinnerRow& row);

// The winners of a database by key. Where one key has several rows (results
// of several driver versions of one GPU in one file), the newest choice wins.
struct KeyedWinners {
  std::map<Key, WinnerRow> rows;
  std::size_t total = 0;
  bool several_per_key = false;
};
Result<KeyedWinners> keyed_winners(Store& store);

SourceInfo source_info(Store& store, const KeyedWinners& winners);

// Why `kernel_name` fails in `store` for a problem on devices at a token count:
// its newest variant row for the target failed to compile, or its latest
// measurement of the problem on one of the devices failed, either at `tokens`
// or in the verify phase (verification runs once at its own token count).
// Without a problem id or devices only the compile status is looked at.
// A kernel the database does not know fails nowhere. Results are cached.
class FailureFinder {
 public:
  explicit FailureFinder(Store& store) : store_(store) {}
  Result<std::vector<KernelFailure>> failures(const std::string& kernel_name, const std::string& target,
                                              std::optional<std::int64_t> problem_id,
                                              const std::vector<std::int64_t>& device_ids, int tokens);

 private:
  Result<std::optional<VariantRecord>> newest_variant(const std::string& kernel_name, const std::string& target);
  Store& store_;
  std::map<std::pair<std::string, std::string>, std::optional<VariantRecord>> variants_;
};

bool is_failure(MeasurementStatus s);

// The stage kernels a layer variant names in its params (stage1_kernel,
// stage2_kernel); empty for other kinds.
std::vector<std::string> stage_kernels(const VariantRecord& v);

}  // namespace ft::db::report::detail

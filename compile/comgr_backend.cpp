// The comgr backend: HIP source -> LLVM bitcode -> relocatable -> executable
// code object, entirely in memory through libamd_comgr (API 2.x; the 2.4 of
// ROCm 5.2 has no single source-to-relocatable action, so three steps).
#include <mutex>
#include <regex>
#include <utility>

#include <fmt/format.h>

#include "compile/backends.hpp"
#include "compile/comgr_api.hpp"

namespace ft::detail {
namespace {

// Owns comgr handles for the length of one compilation.
class ComgrSession {
 public:
  explicit ComgrSession(const ComgrApi& api) : api_(api) {}
  ~ComgrSession() {
    for (auto d : data_) api_.release_data(d);
    for (auto s : sets_) api_.destroy_data_set(s);
    if (info_.handle) api_.destroy_action_info(info_);
  }
  ComgrSession(const ComgrSession&) = delete;
  ComgrSession& operator=(const ComgrSession&) = delete;

  Result<amd_comgr_data_set_t> new_set() {
    amd_comgr_data_set_t set{};
    FT_CHECK(check(api_.create_data_set(&set), "create data set"));
    sets_.push_back(set);
    return set;
  }

  Status add(amd_comgr_data_set_t set, amd_comgr_data_kind_t kind, std::string_view name, std::string_view bytes) {
    amd_comgr_data_t data{};
    FT_CHECK(check(api_.create_data(kind, &data), "create data"));
    data_.push_back(data);
    std::string name_z(name);
    FT_CHECK(check(api_.set_data(data, bytes.size(), bytes.data()), "set data"));
    FT_CHECK(check(api_.set_data_name(data, name_z.c_str()), "set data name"));
    return check(api_.data_set_add(set, data), "add data");
  }

  Result<amd_comgr_action_info_t> info(const std::string& isa) {
    FT_CHECK(check(api_.create_action_info(&info_), "create action info"));
    FT_CHECK(check(api_.action_info_set_isa_name(info_, isa.c_str()), fmt::format("set ISA {}", isa)));
    FT_CHECK(check(api_.action_info_set_language(info_, AMD_COMGR_LANGUAGE_HIP), "set language HIP"));
    FT_CHECK(check(api_.action_info_set_logging(info_, true), "enable logging"));
    return info_;
  }

  Status set_options(const std::vector<std::string>& options) {
    std::vector<const char*> argv;
    for (const auto& o : options) argv.push_back(o.c_str());
    return check(api_.action_info_set_option_list(info_, argv.data(), argv.size()), "set options");
  }

  // Every data object of `kind` in `set`, as bytes.
  Result<std::vector<std::string>> contents(amd_comgr_data_set_t set, amd_comgr_data_kind_t kind) {
    size_t count = 0;
    FT_CHECK(check(api_.action_data_count(set, kind, &count), "count data"));
    std::vector<std::string> out;
    for (size_t i = 0; i < count; ++i) {
      amd_comgr_data_t data{};
      FT_CHECK(check(api_.action_data_get_data(set, kind, i, &data), "get data"));
      data_.push_back(data);
      size_t size = 0;
      FT_CHECK(check(api_.get_data(data, &size, nullptr), "get data size"));
      std::string bytes(size, '\0');
      FT_CHECK(check(api_.get_data(data, &size, bytes.data()), "get data bytes"));
      bytes.resize(size);
      out.push_back(std::move(bytes));
    }
    return out;
  }

  Status check(amd_comgr_status_t s, std::string_view what) const {
    if (s == AMD_COMGR_STATUS_SUCCESS) return {};
    return fail(Errc::toolchain, fmt::format("comgr: {} failed: {}", what, api_.describe(s)));
  }

 private:
  const ComgrApi& api_;
  std::vector<amd_comgr_data_t> data_;
  std::vector<amd_comgr_data_set_t> sets_;
  amd_comgr_action_info_t info_{};
};

}  // namespace

Result<BackendOutput> compile_with_comgr(const BackendJob& job) {
  // comgr 2.x compiles with an in-process LLVM whose global state is not safe
  // for concurrent actions: parallel compiles crashed intermittently (seen in
  // the compile_all test). One comgr compile at a time per process; clang and
  // NVRTC still run in parallel.
  static std::mutex comgr_mutex;
  std::lock_guard lock(comgr_mutex);
  const ComgrApi& api = *FT_TRY(comgr_api());
  ComgrSession session(api);
  auto input = FT_TRY(session.new_set());
  FT_CHECK(session.add(input, AMD_COMGR_DATA_KIND_SOURCE, job.source.name + ".hip", job.source.text));
  for (const EmbeddedFile& h : job.headers) FT_CHECK(session.add(input, AMD_COMGR_DATA_KIND_INCLUDE, h.path, h.text));
  auto info = FT_TRY(session.info(job.target.comgr_isa()));

  BackendOutput out;
  auto append_logs = [&](amd_comgr_data_set_t set) -> Status {
    for (const std::string& log : FT_TRY(session.contents(set, AMD_COMGR_DATA_KIND_LOG)))
      if (!log.empty()) out.log += log.back() == '\n' ? log : log + '\n';
    return {};
  };
  // comgr compiles in a private /tmp/comgr-XXXXXX/{input,include}; name files as the sources do.
  auto strip_temp_paths = [&] {
    static const std::regex temp_dir(R"((/[^\s:'"]*)?/comgr-[0-9A-Za-z]+/(input|include|output)/)");
    out.log = std::regex_replace(out.log, temp_dir, "");
  };
  // Each step: options, action, its log; a failing action is the source's fault
  // (Errc::compile with the log), a failing API call is the toolchain's.
  auto step = [&](amd_comgr_action_kind_t action, const std::vector<std::string>& options,
                  amd_comgr_data_set_t from) -> Result<amd_comgr_data_set_t> {
    auto to = FT_TRY(session.new_set());
    FT_CHECK(session.set_options(options));
    amd_comgr_status_t s = api.do_action(action, info, from, to);
    FT_CHECK(append_logs(to));
    strip_temp_paths();
    if (s == AMD_COMGR_STATUS_ERROR) return std::unexpected(compile_failure("comgr", out.log));
    FT_CHECK(session.check(s, "action"));
    return to;
  };

  auto bitcode = FT_TRY(step(AMD_COMGR_ACTION_COMPILE_SOURCE_TO_BC, job.arguments, input));
  auto relocatable =
      FT_TRY(step(AMD_COMGR_ACTION_CODEGEN_BC_TO_RELOCATABLE, {fmt::format("-O{}", job.opt_level)}, bitcode));
  auto executable = FT_TRY(step(AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_EXECUTABLE, {}, relocatable));
  auto objects = FT_TRY(session.contents(executable, AMD_COMGR_DATA_KIND_EXECUTABLE));
  if (objects.size() != 1)
    return fail(Errc::toolchain, fmt::format("comgr produced {} executables instead of one", objects.size()));
  auto bytes = std::as_bytes(std::span(objects.front()));
  out.binary.assign(bytes.begin(), bytes.end());
  return out;
}

}  // namespace ft::detail

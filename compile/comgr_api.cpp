#include "compile/comgr_api.hpp"

#include <mutex>

#include <fmt/format.h>

#include "system/dynlib.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::detail {

const char* ComgrApi::describe(amd_comgr_status_t s) const {
  const char* text = nullptr;
  if (status_string && status_string(s, &text) == AMD_COMGR_STATUS_SUCCESS && text) return text;
  return "unknown comgr status";
}

namespace {

Result<ComgrApi> load_comgr(DynLib& lib) {
  const ComgrInfo& info = toolchains().comgr;
  if (!info.found) return fail(Errc::toolchain, info.error, "comgr");
  lib = FT_TRY(DynLib::open({info.library}, "ROCm comgr (libamd_comgr)"));
  ComgrApi api;
  bool ok = lib.bind(api.status_string, "amd_comgr_status_string") &&
            lib.bind(api.create_data, "amd_comgr_create_data") &&
            lib.bind(api.release_data, "amd_comgr_release_data") && lib.bind(api.set_data, "amd_comgr_set_data") &&
            lib.bind(api.set_data_name, "amd_comgr_set_data_name") && lib.bind(api.get_data, "amd_comgr_get_data") &&
            lib.bind(api.create_data_set, "amd_comgr_create_data_set") &&
            lib.bind(api.destroy_data_set, "amd_comgr_destroy_data_set") &&
            lib.bind(api.data_set_add, "amd_comgr_data_set_add") &&
            lib.bind(api.action_data_count, "amd_comgr_action_data_count") &&
            lib.bind(api.action_data_get_data, "amd_comgr_action_data_get_data") &&
            lib.bind(api.create_action_info, "amd_comgr_create_action_info") &&
            lib.bind(api.destroy_action_info, "amd_comgr_destroy_action_info") &&
            lib.bind(api.action_info_set_isa_name, "amd_comgr_action_info_set_isa_name") &&
            lib.bind(api.action_info_set_language, "amd_comgr_action_info_set_language") &&
            lib.bind(api.action_info_set_option_list, "amd_comgr_action_info_set_option_list") &&
            lib.bind(api.action_info_set_logging, "amd_comgr_action_info_set_logging") &&
            lib.bind(api.do_action, "amd_comgr_do_action") &&
            lib.bind(api.get_data_metadata, "amd_comgr_get_data_metadata") &&
            lib.bind(api.destroy_metadata, "amd_comgr_destroy_metadata") &&
            lib.bind(api.get_metadata_kind, "amd_comgr_get_metadata_kind") &&
            lib.bind(api.get_metadata_string, "amd_comgr_get_metadata_string") &&
            lib.bind(api.metadata_lookup, "amd_comgr_metadata_lookup") &&
            lib.bind(api.get_metadata_list_size, "amd_comgr_get_metadata_list_size") &&
            lib.bind(api.index_list_metadata, "amd_comgr_index_list_metadata");
  if (!ok)
    return fail(Errc::toolchain, fmt::format("{} lacks functions of the comgr 2.x API", lib.path()), "comgr");
  return api;
}

}  // namespace

Result<const ComgrApi*> comgr_api() {
  static std::once_flag once;
  static DynLib lib;
  static Result<ComgrApi> api = fail(Errc::internal, "comgr not loaded");
  std::call_once(once, [] { api = load_comgr(lib); });
  if (!api) return std::unexpected(api.error());
  return &*api;
}

}  // namespace ft::detail

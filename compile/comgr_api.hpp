#pragma once
// Internal: libamd_comgr opened once per process (the library the toolchain
// probe found), its functions typed from amd_comgr.h. Used by the comgr
// backend and by code-object metadata analysis.
#include <amd_comgr.h>

#include "base/error.hpp"

namespace ft::detail {

struct ComgrApi {
  decltype(&amd_comgr_status_string) status_string = nullptr;
  decltype(&amd_comgr_create_data) create_data = nullptr;
  decltype(&amd_comgr_release_data) release_data = nullptr;
  decltype(&amd_comgr_set_data) set_data = nullptr;
  decltype(&amd_comgr_set_data_name) set_data_name = nullptr;
  decltype(&amd_comgr_get_data) get_data = nullptr;
  decltype(&amd_comgr_create_data_set) create_data_set = nullptr;
  decltype(&amd_comgr_destroy_data_set) destroy_data_set = nullptr;
  decltype(&amd_comgr_data_set_add) data_set_add = nullptr;
  decltype(&amd_comgr_action_data_count) action_data_count = nullptr;
  decltype(&amd_comgr_action_data_get_data) action_data_get_data = nullptr;
  decltype(&amd_comgr_create_action_info) create_action_info = nullptr;
  decltype(&amd_comgr_destroy_action_info) destroy_action_info = nullptr;
  decltype(&amd_comgr_action_info_set_isa_name) action_info_set_isa_name = nullptr;
  decltype(&amd_comgr_action_info_set_language) action_info_set_language = nullptr;
  decltype(&amd_comgr_action_info_set_option_list) action_info_set_option_list = nullptr;
  decltype(&amd_comgr_action_info_set_logging) action_info_set_logging = nullptr;
  decltype(&amd_comgr_do_action) do_action = nullptr;
  decltype(&amd_comgr_get_data_metadata) get_data_metadata = nullptr;
  decltype(&amd_comgr_destroy_metadata) destroy_metadata = nullptr;
  decltype(&amd_comgr_get_metadata_kind) get_metadata_kind = nullptr;
  decltype(&amd_comgr_get_metadata_string) get_metadata_string = nullptr;
  decltype(&amd_comgr_metadata_lookup) metadata_lookup = nullptr;
  decltype(&amd_comgr_get_metadata_list_size) get_metadata_list_size = nullptr;
  decltype(&amd_comgr_index_list_metadata) index_list_metadata = nullptr;

  // "AMD_COMGR_STATUS_ERROR" etc.
  const char* describe(amd_comgr_status_t s) const;
};

// Loaded on first use; Errc::toolchain when comgr is missing or incomplete.
Result<const ComgrApi*> comgr_api();

}  // namespace ft::detail

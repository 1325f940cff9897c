/* The callers of tests/abi/old_caller.c, one per earlier header
 * (tests/abi/headers/vN): a layer through that header's calls, judged against
 * the reference kernels. Includes no flytune_runtime.h (each caller has its own). */
#ifndef FT_ABI_OLD_CALLER_H
#define FT_ABI_OLD_CALLER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ft_runtime;

typedef struct ft_abi_result {
  int status;          /* FT_OK, the failing call's ft_status, or -1 (a setup call failed) */
  int bucket;          /* the plan's bucket */
  double rel_l2;       /* of y against ft_plan_reference's */
  char message[768];   /* the failing call and ft_runtime_last_error */
} ft_abi_result;

#define FT_ABI_DECLARE(n)                                                                      \
  int ft_abi_caller_v##n(struct ft_runtime* rt, const char* key, int tokens, ft_abi_result* r); \
  size_t ft_abi_buffers_size_v##n(void);
FT_ABI_DECLARE(1)
FT_ABI_DECLARE(2)
FT_ABI_DECLARE(3)
FT_ABI_DECLARE(4)
FT_ABI_DECLARE(5)
FT_ABI_DECLARE(6)
#undef FT_ABI_DECLARE

#ifdef __cplusplus
}
#endif

#endif

/* SPDX-License-Identifier: MIT */
/* attn_status: the pinned error codes every fallible attn function returns. */
#ifndef ATTN_STATUS_H
#define ATTN_STATUS_H

#include "attn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Result of every fallible attn call. The numeric values are pinned forever
 * (new codes are only appended). On any non-OK status the call has written
 * nothing to its outputs. A call with several faults reports the first in
 * this order: NULL or malformed views, dtypes, shapes and ranges (options
 * included), aliasing, the workspace (docs/reliability.md).
 */
typedef enum attn_status {
    ATTN_OK = 0,           /* success */
    ATTN_EINVAL = 1,       /* invalid argument: NULL pointer, bad enum, bad config or
                              option, a misaligned slab or workspace */
    ATTN_EDTYPE = 2,       /* unsupported or mixed element types */
    ATTN_ESHAPE = 3,       /* shapes do not match or do not broadcast */
    ATTN_ESTRIDE = 4,      /* a stride the operation cannot accept */
    ATTN_EALIAS = 5,       /* an output overlaps an input where not allowed, or a caller
                              workspace overlaps an argument */
    ATTN_ERANGE = 6,       /* an index or length outside its range (a per-batch length
                              such as kv_len, a slice), or a size that overflows
                              int64/size_t or exceeds INT_MAX for BLAS */
    ATTN_EWORKSPACE = 7,   /* the workspace passed is too small */
    ATTN_ENOMEM = 8,       /* convenience allocation (work == NULL) failed */
    ATTN_ELAPACK = 9,      /* a LAPACKE routine reported info != 0 */
    ATTN_EUNSUPPORTED = 10,/* valid request this build or algorithm cannot do */
    ATTN_EMPI = 11,        /* an MPI call failed or ranks disagree */
    ATTN_EIO = 12,         /* a file cannot be opened, read or mapped */
    ATTN_EFORMAT = 13,     /* a file is not a valid safetensors file */
    ATTN_ENOTFOUND = 14    /* a named tensor is absent from a file */
} attn_status;

/** Number of status codes, for iterating over them in tests. */
#define ATTN_STATUS_COUNT 15

/**
 * A short English description of status s, e.g. "shape mismatch".
 * Never NULL: unknown values give "unknown attn status". Since 0.1.
 */
ATTN_API const char *attn_strerror(attn_status s);

/** The enum constant's name, e.g. "ATTN_ESHAPE". Never NULL. Since 0.1. */
ATTN_API const char *attn_status_name(attn_status s);

#ifdef __cplusplus
}
#endif
#endif /* ATTN_STATUS_H */

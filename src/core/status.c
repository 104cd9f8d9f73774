/* SPDX-License-Identifier: MIT */
/* Status strings, version queries and the convenience-workspace helper. */
#include <stdlib.h>

#include "core/internal.h"

static const struct {
    const char *name, *text;
} status_table[ATTN_STATUS_COUNT] = {
    [ATTN_OK] = {"ATTN_OK", "success"},
    [ATTN_EINVAL] = {"ATTN_EINVAL", "invalid argument"},
    [ATTN_EDTYPE] = {"ATTN_EDTYPE", "unsupported or mismatched dtype"},
    [ATTN_ESHAPE] = {"ATTN_ESHAPE", "shape mismatch"},
    [ATTN_ESTRIDE] = {"ATTN_ESTRIDE", "unsupported stride"},
    [ATTN_EALIAS] = {"ATTN_EALIAS", "output overlaps an input"},
    [ATTN_ERANGE] = {"ATTN_ERANGE", "length or size out of range"},
    [ATTN_EWORKSPACE] = {"ATTN_EWORKSPACE", "workspace too small"},
    [ATTN_ENOMEM] = {"ATTN_ENOMEM", "out of memory"},
    [ATTN_ELAPACK] = {"ATTN_ELAPACK", "LAPACK routine failed"},
    [ATTN_EUNSUPPORTED] = {"ATTN_EUNSUPPORTED", "not supported"},
    [ATTN_EMPI] = {"ATTN_EMPI", "MPI error"},
    [ATTN_EIO] = {"ATTN_EIO", "cannot open, read or map the file"},
    [ATTN_EFORMAT] = {"ATTN_EFORMAT", "not a valid safetensors file"},
    [ATTN_ENOTFOUND] = {"ATTN_ENOTFOUND", "tensor not found"},
};

const char *attn_strerror(attn_status s) {
    if ((unsigned)s < ATTN_STATUS_COUNT)
        return status_table[s].text;
    return "unknown attn status";
}

const char *attn_status_name(attn_status s) {
    if ((unsigned)s < ATTN_STATUS_COUNT)
        return status_table[s].name;
    return "ATTN_UNKNOWN";
}

const char *attn_version_string(void) { return ATTN_VERSION_STRING; }
int attn_version_number(void) { return ATTN_VERSION_NUMBER; }

attn_status attn__work_acquire(void **work, size_t *size, size_t need, void **owned) {
    *owned = NULL;
    if (*work == NULL && *size == 0) {
        if (need == 0)
            return ATTN_OK;
        size_t rounded = attn__align64(need);
        if (rounded < need)
            return ATTN_ERANGE;
        void *p = aligned_alloc(64, rounded);
        if (!p)
            return ATTN_ENOMEM;
        *work = *owned = p;
        *size = rounded;
        return ATTN_OK;
    }
    if (*work == NULL || *size < need)
        return ATTN_EWORKSPACE;
    /* the one alignment rule (docs/reliability.md): what malloc returns is enough */
    if (need > 0 && (uintptr_t)*work % ATTN__WORK_ALIGN != 0)
        return ATTN_EINVAL;
    return ATTN_OK;
}

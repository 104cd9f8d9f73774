/* SPDX-License-Identifier: MIT */
/* Fuzz target: attn_safetensors_open on arbitrary bytes, then views and the MHA binder. */
#include <jansson.h>
#include <unistd.h>

#include "fuzz_common.h"

/* Names the seed corpus uses (an nn.MultiheadAttention) and a few short ones. */
static const char *const names[] = {
    "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias", "a", "b", "",
    "__metadata__"};

/* The file libFuzzer's input is written to: one per process, rewritten every run. */
static char path[64];

static void write_input(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/attn_fuzz_st_XXXXXX");
        int fd = mkstemp(path);
        FZ_REQUIRE(fd >= 0, "mkstemp");
        close(fd);
    }
    FILE *fp = fopen(path, "wb");
    FZ_REQUIRE(fp && fwrite(data, 1, size, fp) == size && fclose(fp) == 0, "writing %s", path);
}

/*
 * Where the harness finds tensor `name` itself: the header length and the entry's
 * data_offsets[0], read with its own JSON pass over the input (-1: not found).
 */
static int64_t own_offset(const uint8_t *data, size_t size, const char *name) {
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k)
        n = n << 8 | data[k];
    json_t *root = json_loadb((const char *)data + 8, (size_t)n, 0, NULL);
    const json_t *off =
        json_array_get(json_object_get(json_object_get(root, name), "data_offsets"), 0);
    int64_t r = json_is_integer(off) ? 8 + (int64_t)n + json_integer_value(off) : -1;
    json_decref(root);
    (void)size;
    return r;
}

/* Every element of a view, summed (reads each byte the view claims). */
static double touch(const attn_view *v) {
    if (!v->data)
        return 0;
    int64_t idx[ATTN_MAX_DIMS] = {0}, n = 1;
    for (int k = 0; k < v->ndim; ++k)
        n *= v->shape[k];
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t off = 0;
        for (int k = 0; k < v->ndim; ++k)
            off += idx[k] * v->stride[k];
        s += v->dtype == ATTN_F32 ? ((const float *)v->data)[off]
                                  : ((const double *)v->data)[off];
        for (int k = v->ndim - 1; k >= 0 && ++idx[k] == v->shape[k]; --k)
            idx[k] = 0;
    }
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    attn_safetensors *f = (attn_safetensors *)&f;
    attn_status s = attn_safetensors_open(path, &f);
    FZ_REQUIRE(s == ATTN_OK || s == ATTN_EFORMAT || s == ATTN_ENOMEM, "open: %s",
               attn_status_name(s));
    if (s != ATTN_OK) {
        FZ_REQUIRE(f == NULL, "open failed with %s but *out is not NULL", attn_status_name(s));
        return 0;
    }
    volatile double sink = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
        attn_view v, v0;
        memset(&v, 0x5A, sizeof v);
        v0 = v;
        s = attn_safetensors_view(f, names[i], &v);
        FZ_REQUIRE(s == ATTN_OK || s == ATTN_ENOTFOUND || s == ATTN_EDTYPE ||
                       s == ATTN_ESHAPE || s == ATTN_EFORMAT,
                   "view %s: %s", names[i], attn_status_name(s));
        if (s != ATTN_OK) {
            FZ_REQUIRE(!memcmp(&v, &v0, sizeof v), "view %s wrote on %s", names[i],
                       attn_status_name(s));
            continue;
        }
        /* the view holds exactly the input's bytes at the entry's offset */
        int64_t off = own_offset(data, size, names[i]), n = 1;
        for (int k = 0; k < v.ndim; ++k)
            n *= v.shape[k];
        size_t bytes = (size_t)n * attn_dtype_size(v.dtype);
        FZ_REQUIRE(off >= 0 && (uint64_t)off + bytes <= size, "view %s outside the file",
                   names[i]);
        FZ_REQUIRE(bytes == 0 || !memcmp(v.data, data + off, bytes),
                   "view %s is not the file's bytes", names[i]);
        sink += touch(&v);
    }
    /* the MHA binder for a few small configs: a status, nothing written on error */
    for (int c = 0; c < 4; ++c) {
        attn_mha_config mc = {.dtype = c & 1 ? ATTN_F64 : ATTN_F32,
                              .d_model = 2,
                              .heads = 1,
                              .d_kv = c & 2 ? 3 : 0,
                              .bias = c < 2};
        attn_mha_params p, p0;
        memset(&p, 0x33, sizeof p);
        p0 = p;
        s = attn_mha_params_from_torch(&mc, f, NULL, &p);
        FZ_REQUIRE(s == ATTN_OK || s == ATTN_ENOTFOUND || s == ATTN_EDTYPE ||
                       s == ATTN_ESHAPE || s == ATTN_EFORMAT,
                   "mha binder: %s", attn_status_name(s));
        if (s != ATTN_OK) {
            FZ_REQUIRE(!memcmp(&p, &p0, sizeof p), "mha binder wrote on %s",
                       attn_status_name(s));
            continue;
        }
        attn_view *all[8] = {&p.wq, &p.wk, &p.wv, &p.wo, &p.bq, &p.bk, &p.bv, &p.bo};
        for (int i = 0; i < (mc.bias ? 8 : 4); ++i)
            sink += touch(all[i]);
    }
    (void)sink;
    attn_safetensors_close(f);
    return 0;
}

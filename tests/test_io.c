/* SPDX-License-Identifier: MIT */
/* Check suite for io.h: safetensors files from PyTorch, hostile files, the binders. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layer_util.h"

/*
 * cblas_dgemm interposed (as test_hostile does): the shared library's calls
 * resolve here first, are counted, and go on to OpenBLAS. The count shows
 * whether Q, K and V bound from in_proj_weight run as one GEMM.
 */
static volatile int io_dgemms;
typedef void (*io_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                            const double *, int, double, double *, int);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
    static io_dgemm_fn next;
    if (!next)
        *(void **)&next = dlsym(RTLD_NEXT, "cblas_dgemm");
    __atomic_add_fetch(&io_dgemms, 1, __ATOMIC_RELAXED);
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#define TOL(dt) ((dt) == ATTN_F64 ? 1e-12 : 1e-5)

static char st_path_buf[1024];
static const char *st_path(const char *name) {
    snprintf(st_path_buf, sizeof st_path_buf, "%s/%s", ATTN_TEST_DATA, name);
    return st_path_buf;
}

static attn_safetensors *st_open(const char *name) {
    attn_safetensors *f = NULL;
    attn_status s = attn_safetensors_open(st_path(name), &f);
    ck_assert_msg(s == ATTN_OK, "%s: %s", name, attn_status_name(s));
    ck_assert_ptr_nonnull(f);
    return f;
}

/* Open file descriptors of this process (a refused file must not leave one open). */
static int fd_count(void) {
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* ---- hand-made files ----------------------------------------------------------- */

static char tmp_dir[256];

static void tmp_setup(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/attn_test_io_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void tmp_teardown(void) {
    DIR *d = opendir(tmp_dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(tmp_dir);
}

/*
 * Write tmp_dir/name: the little-endian header length hlen (UINT64_MAX: the
 * JSON's length padded with spaces to a multiple of 8), the JSON, then
 * data_bytes bytes counting 0, 1, 2, ... (mod 256). Returns the path.
 */
static char file_buf[512];
static const char *write_st(const char *name, const char *json, uint64_t hlen,
                            size_t data_bytes) {
    snprintf(file_buf, sizeof file_buf, "%s/%s", tmp_dir, name);
    FILE *fp = fopen(file_buf, "wb");
    ck_assert_ptr_nonnull(fp);
    size_t jl = strlen(json), pad = hlen == UINT64_MAX ? (8 - jl % 8) % 8 : 0;
    uint64_t n = hlen == UINT64_MAX ? jl + pad : hlen;
    unsigned char le[8];
    for (int k = 0; k < 8; ++k)
        le[k] = (unsigned char)(n >> (8 * k));
    ck_assert_uint_eq(fwrite(le, 1, 8, fp), 8);
    ck_assert_uint_eq(fwrite(json, 1, jl, fp), jl);
    for (size_t i = 0; i < pad; ++i)
        fputc(' ', fp);
    for (size_t i = 0; i < data_bytes; ++i)
        fputc((int)(i & 255), fp);
    ck_assert_int_eq(fclose(fp), 0);
    return file_buf;
}

/* Raw bytes (for files shorter than a header length). */
static const char *write_raw(const char *name, const void *bytes, size_t n) {
    snprintf(file_buf, sizeof file_buf, "%s/%s", tmp_dir, name);
    FILE *fp = fopen(file_buf, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(bytes, 1, n, fp), n);
    ck_assert_int_eq(fclose(fp), 0);
    return file_buf;
}

/* ---- attn_safetensors_open ----------------------------------------------------- */

START_TEST(so_fixtures_open) {
    const char *names[] = {
        "st_enc_post_relu_f64.safetensors", "st_enc_pre_gelu_f64.safetensors",
        "st_enc_post_gelu_f32.safetensors", "st_enc_pre_relu_f32.safetensors",
        "st_dec_post_gelu_f64.safetensors", "st_dec_pre_relu_f32.safetensors",
        "st_mha_f64.safetensors",           "st_mha_kdim_f32.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i)
        attn_safetensors_close(st_open(names[i]));
    attn_safetensors_close(NULL); /* a no-op */
}
END_TEST

START_TEST(so_errors) {
    int fds = fd_count();
    attn_safetensors *f = (attn_safetensors *)&f;
    ck_assert_int_eq(attn_safetensors_open(NULL, &f), ATTN_EINVAL);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(attn_safetensors_open(st_path("st_mha_f64.safetensors"), NULL),
                     ATTN_EINVAL);
    f = (attn_safetensors *)&f;
    ck_assert_int_eq(attn_safetensors_open(st_path("no_such_file.safetensors"), &f), ATTN_EIO);
    ck_assert_ptr_null(f);
    f = (attn_safetensors *)&f;
    ck_assert_int_eq(attn_safetensors_open(ATTN_TEST_DATA, &f), ATTN_EIO); /* a directory */
    ck_assert_ptr_null(f);
    f = (attn_safetensors *)&f;
    ck_assert_int_eq(attn_safetensors_open("/dev/zero", &f), ATTN_EIO); /* a device */
    ck_assert_ptr_null(f);
    ck_assert_int_eq(fd_count(), fds);
}
END_TEST

/* One hostile file: its header (or raw bytes) and the status open must give. */
typedef struct hostile {
    const char *what, *json;
    uint64_t hlen;     /* 0: padded JSON length (write_st's UINT64_MAX) */
    size_t data_bytes; /* data area after the header */
    attn_status want;
} hostile;

#define T2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
static const hostile hostiles[] = {
    {"header length past the end", "{}", 100, 0, ATTN_EFORMAT},
    {"header length 2^64 - 1", "{}", UINT64_MAX - 1, 8, ATTN_EFORMAT},
    {"header length 2^63", "{}", UINT64_C(1) << 63, 8, ATTN_EFORMAT},
    {"header length 2^64 - 8", "{}", UINT64_MAX - 7, 8, ATTN_EFORMAT},
    {"header length 0", "", 0, 16, ATTN_EFORMAT},
    {"not JSON", "hello world", 0, 0, ATTN_EFORMAT},
    {"truncated JSON", "{\"a\":" T2 "[0,", 0, 8, ATTN_EFORMAT},
    {"JSON array", "[1, 2, 3]", 0, 0, ATTN_EFORMAT},
    {"JSON string", "\"tensor\"", 0, 0, ATTN_EFORMAT},
    {"JSON number", "42", 0, 0, ATTN_EFORMAT},
    {"JSON null", "null", 0, 0, ATTN_EFORMAT},
    {"entry not an object", "{\"a\":[1,2]}", 0, 8, ATTN_EFORMAT},
    {"entry without dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     ATTN_EFORMAT},
    {"entry without shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 0, 8,
     ATTN_EFORMAT},
    {"entry without offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8, ATTN_EFORMAT},
    {"unknown dtype", "{\"a\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     ATTN_EFORMAT},
    {"lower-case dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0,
     8, ATTN_EFORMAT},
    {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
     ATTN_EFORMAT},
    {"negative extent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0,
     8, ATTN_EFORMAT},
    {"fractional extent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
     0, 8, ATTN_EFORMAT},
    {"extent a string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
     0, 8, ATTN_EFORMAT},
    {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 0,
     8, ATTN_EFORMAT},
    {"shape overflows int64",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,0]}}",
     0, 8, ATTN_EFORMAT},
    {"bytes overflow int64",
     "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0, 8,
     ATTN_EFORMAT},
    {"extent past JSON integers",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 0,
     8, ATTN_EFORMAT},
    {"shape disagrees with offsets", "{\"a\":" T2 "[0,12]}}", 0, 16, ATTN_EFORMAT},
    {"empty shape with data",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", 0, 8, ATTN_EFORMAT},
    {"offsets past the data", "{\"a\":" T2 "[8,16]}}", 0, 12, ATTN_EFORMAT},
    {"offsets far past the data", "{\"a\":" T2 "[9223372036854775800,9223372036854775808]}}", 0,
     8, ATTN_EFORMAT},
    {"offsets reversed", "{\"a\":" T2 "[8,0]}}", 0, 8, ATTN_EFORMAT},
    {"negative offset", "{\"a\":" T2 "[-8,0]}}", 0, 8, ATTN_EFORMAT},
    {"one offset", "{\"a\":" T2 "[0]}}", 0, 8, ATTN_EFORMAT},
    {"three offsets", "{\"a\":" T2 "[0,8,16]}}", 0, 16, ATTN_EFORMAT},
    {"offsets not integers", "{\"a\":" T2 "[\"0\",\"8\"]}}", 0, 8, ATTN_EFORMAT},
    {"overlapping entries", "{\"a\":" T2 "[0,8]},\"b\":" T2 "[4,12]}}", 0, 16, ATTN_EFORMAT},
    {"one entry inside another",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":" T2 "[4,12]}}", 0,
     16, ATTN_EFORMAT},
    {"the same bytes twice", "{\"a\":" T2 "[0,8]},\"b\":" T2 "[0,8]}}", 0, 8, ATTN_EFORMAT},
    {"duplicate names", "{\"a\":" T2 "[0,8]},\"a\":" T2 "[8,16]}}", 0, 16, ATTN_EFORMAT},
    {"metadata not an object", "{\"__metadata__\":5,\"a\":" T2 "[0,8]}}", 0, 8, ATTN_EFORMAT},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, 0, ATTN_EFORMAT},
    {"NUL in a name", "{\"a\\u0000b\":" T2 "[0,8]}}", 0, 8, ATTN_EFORMAT},
    {"trailing garbage", "{} x", 0, 0, ATTN_EFORMAT},
    /* controls: the same builders make valid files */
    {"valid: empty header", "{}", 0, 0, ATTN_OK},
    {"valid: two entries, metadata",
     "{\"__metadata__\":{\"format\":\"pt\"},\"a\":" T2 "[0,8]},\"b\":" T2 "[8,16]}}", 0, 16,
     ATTN_OK},
    {"valid: gaps and unsorted", "{\"b\":" T2 "[16,24]},\"a\":" T2 "[0,8]}}", 0, 32, ATTN_OK},
    {"valid: empty tensors share an offset",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
     "\"b\":{\"dtype\":\"F64\",\"shape\":[4,0],\"data_offsets\":[8,8]},\"c\":" T2 "[0,8]}}",
     0, 8, ATTN_OK},
};

START_TEST(so_hostile_files) {
    int fds = fd_count();
    for (size_t i = 0; i < sizeof hostiles / sizeof *hostiles; ++i) {
        const hostile *h = &hostiles[i];
        char name[32];
        snprintf(name, sizeof name, "h%zu.safetensors", i);
        const char *path =
            write_st(name, h->json, h->hlen ? h->hlen : UINT64_MAX, h->data_bytes);
        attn_safetensors *f = (attn_safetensors *)&f;
        attn_status s = attn_safetensors_open(path, &f);
        ck_assert_msg(s == h->want, "%s: %s, want %s", h->what, attn_status_name(s),
                      attn_status_name(h->want));
        if (s == ATTN_OK) {
            ck_assert_ptr_nonnull(f);
            attn_safetensors_close(f);
        } else {
            ck_assert_msg(f == NULL, "%s: *out not NULL", h->what);
        }
    }
    /* a FIFO with no writer: refused at once, not waited on */
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp_dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    attn_safetensors *ff = (attn_safetensors *)&ff;
    ck_assert_int_eq(attn_safetensors_open(fifo, &ff), ATTN_EIO);
    ck_assert_ptr_null(ff);
    /* files shorter than the 8-byte length, and a length that only just fits */
    static const unsigned char bytes[16] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    for (size_t n = 0; n <= 10; ++n) {
        attn_safetensors *f = (attn_safetensors *)&f;
        attn_status s = attn_safetensors_open(write_raw("short", bytes, n), &f);
        ck_assert_msg(s == (n == 10 ? ATTN_OK : ATTN_EFORMAT), "%zu bytes: %s", n,
                      attn_status_name(s));
        ck_assert(s == ATTN_OK ? f != NULL : f == NULL);
        attn_safetensors_close(f);
    }
    /* a header over the 100 MB cap, in a sparse file that holds it */
    const char *path = write_st("big", "{}", 100000008, 0);
    ck_assert_int_eq(truncate(path, 8 + 100000008), 0);
    attn_safetensors *f = (attn_safetensors *)&f;
    ck_assert_int_eq(attn_safetensors_open(path, &f), ATTN_EFORMAT);
    ck_assert_ptr_null(f);
    /* a truncated copy of a real file: every prefix is refused */
    FILE *fp = fopen(st_path("st_mha_kdim_f32.safetensors"), "rb");
    ck_assert_ptr_nonnull(fp);
    static unsigned char whole[4096];
    size_t n = fread(whole, 1, sizeof whole, fp);
    fclose(fp);
    ck_assert_uint_gt(n, 200);
    for (size_t cut = 0; cut < n; cut += (cut < 16 ? 1 : 37)) {
        f = (attn_safetensors *)&f;
        attn_status s = attn_safetensors_open(write_raw("cut", whole, cut), &f);
        ck_assert_msg(s == ATTN_EFORMAT, "cut at %zu: %s", cut, attn_status_name(s));
        ck_assert_ptr_null(f);
    }
    f = NULL;
    ck_assert_int_eq(attn_safetensors_open(write_raw("cut", whole, n), &f), ATTN_OK);
    attn_safetensors_close(f);
    ck_assert_int_eq(fd_count(), fds);
}
END_TEST

/* ---- attn_safetensors_view ------------------------------------------------------- */

/* The view's elements equal the fixture's copy of the tensor, written by PyTorch. */
static void check_probe(attn_safetensors *f, fx_file *fx, const char *name, const char *probe,
                        attn_dtype dt) {
    attn_view v;
    ck_assert_int_eq(attn_safetensors_view(f, name, &v), ATTN_OK);
    ck_assert_int_eq(v.dtype, dt);
    fx_tensor *t = fx_get(fx, probe);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(v.ndim, t->ndim);
    int64_t stride = 1;
    for (int k = v.ndim - 1; k >= 0; --k) { /* row-major */
        ck_assert_int_eq(v.shape[k], t->shape[k]);
        ck_assert_int_eq(v.stride[k], stride);
        stride *= v.shape[k];
    }
    lt want = lt_from_fx(t, ATTN_F64);
    tu_check_close(&v, &want.v, 0, 0, name); /* exact: the same bits */
    lt_free(&want);
}

START_TEST(sv_values) {
    struct {
        const char *file, *fixture, *name, *probe;
        attn_dtype dt;
    } c[] = {
        {"st_enc_post_relu_f64", "st_enc_post_relu_f64.txt",
         "layers.1.self_attn.in_proj_weight", "probe_in_proj_weight", ATTN_F64},
        {"st_enc_post_relu_f64", "st_enc_post_relu_f64.txt", "layers.2.linear1.weight",
         "probe_linear1_weight", ATTN_F64},
        {"st_enc_post_gelu_f32", "st_enc_post_gelu_f32.txt", "norm.bias", "probe_norm_bias",
         ATTN_F32},
        {"st_enc_pre_relu_f32", "st_enc_pre_relu_f32.txt", "layers.1.self_attn.in_proj_weight",
         "probe_in_proj_weight", ATTN_F32},
        {"st_dec_pre_relu_f32", "st_dec_pre_relu_f32.txt",
         "layers.1.multihead_attn.in_proj_weight", "probe_in_proj_weight", ATTN_F32},
        {"st_dec_post_gelu_f64", "st_dec_post_gelu_f64.txt", "layers.0.linear2.weight",
         "probe_linear2_weight", ATTN_F64},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; ++i) {
        char fn[128];
        snprintf(fn, sizeof fn, "%s.safetensors", c[i].file);
        attn_safetensors *f = st_open(fn);
        fx_file *fx = fx_load(c[i].fixture);
        ck_assert_ptr_nonnull(fx);
        check_probe(f, fx, c[i].name, c[i].probe, c[i].dt);
        fx_free(fx);
        attn_safetensors_close(f);
    }
}
END_TEST

START_TEST(sv_dtypes_shapes_errors) {
    /* F32 (2) at 0, F16 (2) at 8, a 0-dim F64 at 16, I64 (1) at 24, BF16 (2) at 32,
       a 5-D F32 at 40, an F64 (1) at 49 (not 8-aligned), an empty F32 (0, 3) at 57 */
    const char *json =
        "{\"f32\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]},"
        "\"scalar\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[16,24]},"
        "\"i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[32,36]},"
        "\"five\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[40,48]},"
        "\"odd\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[49,57]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[57,57]}}";
    attn_safetensors *f = NULL;
    ck_assert_int_eq(attn_safetensors_open(write_st("types", json, UINT64_MAX, 64), &f),
                     ATTN_OK);
    attn_view v, v0;
    memset(&v, 0xA5, sizeof v);
    v0 = v;
    ck_assert_int_eq(attn_safetensors_view(f, "f16", &v), ATTN_EDTYPE);
    ck_assert_int_eq(attn_safetensors_view(f, "bf16", &v), ATTN_EDTYPE);
    ck_assert_int_eq(attn_safetensors_view(f, "i64", &v), ATTN_EDTYPE);
    ck_assert_int_eq(attn_safetensors_view(f, "five", &v), ATTN_ESHAPE);
    ck_assert_int_eq(attn_safetensors_view(f, "odd", &v), ATTN_EFORMAT);
    ck_assert_int_eq(attn_safetensors_view(f, "missing", &v), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_safetensors_view(f, "f3", &v), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_safetensors_view(f, "f322", &v), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_safetensors_view(f, "", &v), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_safetensors_view(NULL, "f32", &v), ATTN_EINVAL);
    ck_assert_int_eq(attn_safetensors_view(f, NULL, &v), ATTN_EINVAL);
    ck_assert_int_eq(attn_safetensors_view(f, "f32", NULL), ATTN_EINVAL);
    ck_assert_int_eq(memcmp(&v, &v0, sizeof v), 0); /* nothing written */

    ck_assert_int_eq(attn_safetensors_view(f, "f32", &v), ATTN_OK);
    ck_assert_int_eq(v.dtype, ATTN_F32);
    ck_assert_int_eq(v.ndim, 1);
    ck_assert_int_eq(v.shape[0], 2);
    float fv[2];
    memcpy(fv, (unsigned char[]){0, 1, 2, 3, 4, 5, 6, 7}, 8); /* the bytes write_st wrote */
    ck_assert(((float *)v.data)[0] == fv[0] && ((float *)v.data)[1] == fv[1]);
    const char *base = v.data;
    ck_assert_int_eq(attn_safetensors_view(f, "scalar", &v), ATTN_OK);
    ck_assert_int_eq(v.ndim, 1);
    ck_assert_int_eq(v.shape[0], 1);
    ck_assert_ptr_eq(v.data, base + 16); /* a view into the mapping, no copy */
    ck_assert_int_eq(attn_safetensors_view(f, "empty", &v), ATTN_OK);
    ck_assert_int_eq(v.ndim, 2);
    ck_assert_int_eq(v.shape[0], 0);
    ck_assert_int_eq(v.shape[1], 3);
    attn_safetensors_close(f);
}
END_TEST

/* ---- the binders: whole PyTorch models ------------------------------------------- */

/* Copy a fixture tensor into an owned view of dtype dt. */
static lt fx_lt(fx_file *fx, const char *name, attn_dtype dt) {
    return lt_from_fx(fx_get(fx, name), dt);
}

/* A PyTorch case: its fixture name.txt and its weights name.safetensors; the dtype. */
static attn_dtype case_open(const char *name, fx_file **fx, attn_safetensors **f) {
    char fn[128];
    snprintf(fn, sizeof fn, "%s.txt", name);
    *fx = fx_load(fn);
    ck_assert_ptr_nonnull(*fx);
    snprintf(fn, sizeof fn, "%s.safetensors", name);
    *f = st_open(fn);
    return fx_meta(*fx, "f64", 0) ? ATTN_F64 : ATTN_F32;
}

static void run_encoder_case(const char *name) {
    fx_file *fx;
    attn_safetensors *f;
    attn_dtype dt = case_open(name, &fx, &f);
    int64_t B = fx_meta(fx, "B", 0), T = fx_meta(fx, "T", 0), C = fx_meta(fx, "C", 0);
    int L = (int)fx_meta(fx, "L", 0);
    attn_encoder_config cfg = {
        .mha = {.dtype = dt, .d_model = C, .heads = fx_meta(fx, "H", 0), .bias = true},
        .ffn = {.dtype = dt,
                .d_model = C,
                .d_ff = fx_meta(fx, "F", 0),
                .act = fx_meta(fx, "relu", 0) ? ATTN_ACT_RELU : ATTN_ACT_GELU_ERF,
                .bias = true},
        .eps = 1e-5,
        .norm = fx_meta(fx, "norm_first", 0) ? ATTN_PRE_NORM : ATTN_POST_NORM,
        .ln_affine = true};
    lt x = fx_lt(fx, "x", dt), want = fx_lt(fx, "out", dt);
    lt a = lt_new(dt, 3, (int64_t[]){B, T, C}), b = lt_new(dt, 3, (int64_t[]){B, T, C});
    /* one workspace for every layer: they share one shape */
    size_t ws = attn_encoder_workspace_size(&cfg, &x.v, NULL, NULL);
    ck_assert_uint_gt(ws, 0);
    void *work = slab_new(ws);
    const attn_view *in = &x.v;
    attn_view *out = &a.v;
    for (int l = 0; l < L; ++l) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        attn_encoder_params p;
        ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, prefix, &p), ATTN_OK);
        ck_assert_int_eq(attn_encoder_forward(&cfg, &p, in, NULL, out, NULL, work, ws),
                         ATTN_OK);
        in = out;
        out = out == &a.v ? &b.v : &a.v;
    }
    attn_view g, be;
    ck_assert_int_eq(attn_safetensors_view(f, "norm.weight", &g), ATTN_OK);
    ck_assert_int_eq(attn_safetensors_view(f, "norm.bias", &be), ATTN_OK);
    ck_assert_int_eq(attn_layernorm(1e-5, in, &g, &be, out, NULL, NULL), ATTN_OK);
    tu_check_close(out, &want.v, TOL(dt), TOL(dt), name);

    /* layer 0 alone, causal, through the decoder binder without cross-attention */
    attn_decoder_config dc = {
        .self_attn = cfg.mha, .ffn = cfg.ffn, .eps = 1e-5, .norm = cfg.norm, .ln_affine = true};
    attn_decoder_params dp;
    ck_assert_int_eq(attn_decoder_params_from_torch(&dc, f, "layers.0.", &dp), ATTN_OK);
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    ck_assert_int_eq(
        attn_decoder_forward(&dc, &dp, &x.v, NULL, &causal, NULL, &a.v, NULL, NULL, 0),
        ATTN_OK);
    lt want0 = fx_lt(fx, "out_l0_causal", dt);
    tu_check_close(&a.v, &want0.v, TOL(dt), TOL(dt), "decoder-only layer 0");
    lt_free(&want0);

    free(work);
    lt_free(&x), lt_free(&want), lt_free(&a), lt_free(&b);
    attn_safetensors_close(f);
    fx_free(fx);
}

START_TEST(ept_encoder_stacks) {
    run_encoder_case("st_enc_post_relu_f64");
    run_encoder_case("st_enc_pre_gelu_f64");
    run_encoder_case("st_enc_post_gelu_f32");
    run_encoder_case("st_enc_pre_relu_f32");
}
END_TEST

START_TEST(ept_views_not_copies) {
    attn_safetensors *f = st_open("st_enc_post_relu_f64.safetensors");
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
        .ffn =
            {.dtype = ATTN_F64, .d_model = 8, .d_ff = 16, .act = ATTN_ACT_RELU, .bias = true},
        .norm = ATTN_POST_NORM,
        .ln_affine = true};
    attn_encoder_params p;
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, "layers.1.", &p), ATTN_OK);
    attn_view w, b, w1, n2;
    ck_assert_int_eq(attn_safetensors_view(f, "layers.1.self_attn.in_proj_weight", &w),
                     ATTN_OK);
    ck_assert_int_eq(attn_safetensors_view(f, "layers.1.self_attn.in_proj_bias", &b), ATTN_OK);
    ck_assert_int_eq(attn_safetensors_view(f, "layers.1.linear1.weight", &w1), ATTN_OK);
    ck_assert_int_eq(attn_safetensors_view(f, "layers.1.norm2.weight", &n2), ATTN_OK);
    const double *W = w.data, *Bv = b.data;
    /* wq, wk, wv: the three (C, C) row blocks of in_proj_weight, transposed and adjacent */
    const attn_view *qkv[3] = {&p.mha.wq, &p.mha.wk, &p.mha.wv};
    const attn_view *bqkv[3] = {&p.mha.bq, &p.mha.bk, &p.mha.bv};
    for (int i = 0; i < 3; ++i) {
        ck_assert_ptr_eq(qkv[i]->data, W + i * 64);
        ck_assert_int_eq(qkv[i]->ndim, 2);
        ck_assert_int_eq(qkv[i]->shape[0], 8);
        ck_assert_int_eq(qkv[i]->shape[1], 8);
        ck_assert_int_eq(qkv[i]->stride[0], 1);
        ck_assert_int_eq(qkv[i]->stride[1], 8);
        ck_assert_ptr_eq(bqkv[i]->data, Bv + i * 8);
        ck_assert_int_eq(bqkv[i]->shape[0], 8);
    }
    ck_assert_ptr_eq(p.ffn.w1.data, w1.data); /* linear1 (F, C) as w1 (C, F) */
    ck_assert_int_eq(p.ffn.w1.shape[0], 8);
    ck_assert_int_eq(p.ffn.w1.shape[1], 16);
    ck_assert_int_eq(p.ffn.w1.stride[0], 1);
    ck_assert_int_eq(p.ffn.w1.stride[1], 8);
    ck_assert_int_eq(p.mha.wo.stride[0], 1);
    ck_assert_ptr_eq(p.ln2_g.data, n2.data);

    /* the adjacent blocks make Q, K, V one GEMM: two fewer than with wk moved apart */
    lt x = lt_new(ATTN_F64, 3, (int64_t[]){2, 5, 8});
    uint64_t seed = 7;
    tu_fill(&x.v, &seed, 1.0);
    lt y1 = lt_new(ATTN_F64, 3, x.v.shape), y2 = lt_new(ATTN_F64, 3, x.v.shape);
    lt wk = lt_new(ATTN_F64, 2, (int64_t[]){8, 8}); /* row-major: strides (8, 1) */
    ck_assert_int_eq(attn_view_copy(&p.mha.wk, &wk.v), ATTN_OK);
    attn_mha_params apart = p.mha;
    apart.wk = wk.v;
    attn_sdpa_opts one = {.threads = 1};
    int n0 = io_dgemms;
    ck_assert_int_eq(attn_mha_forward(&cfg.mha, &p.mha, &x.v, NULL, &one, &y1.v, NULL, NULL, 0),
                     ATTN_OK);
    int fused = io_dgemms - n0;
    n0 = io_dgemms;
    ck_assert_int_eq(attn_mha_forward(&cfg.mha, &apart, &x.v, NULL, &one, &y2.v, NULL, NULL, 0),
                     ATTN_OK);
    int separate = io_dgemms - n0;
    ck_assert_int_gt(fused, 0);
    ck_assert_msg(separate == fused + 2, "GEMMs: %d bound from the file, %d with wk apart",
                  fused, separate);
    tu_check_close(&y1.v, &y2.v, 1e-14, 1e-14, "fused and separate QKV");
    lt_free(&x), lt_free(&y1), lt_free(&y2), lt_free(&wk);
    attn_safetensors_close(f);
}
END_TEST

START_TEST(ept_errors) {
    attn_safetensors *f = st_open("st_enc_post_relu_f64.safetensors");
    attn_encoder_config cfg = {
        .mha = {.dtype = ATTN_F64, .d_model = 8, .heads = 2, .bias = true},
        .ffn =
            {.dtype = ATTN_F64, .d_model = 8, .d_ff = 16, .act = ATTN_ACT_RELU, .bias = true},
        .norm = ATTN_POST_NORM,
        .ln_affine = true};
    attn_encoder_params p, p0;
    memset(&p, 0x3C, sizeof p);
    p0 = p;
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, "layers.3.", &p), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, "", &p), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, NULL, &p), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, "layers.0", &p), ATTN_ENOTFOUND);
    attn_encoder_config c = cfg;
    c.mha.dtype = c.ffn.dtype = ATTN_F32;
    ck_assert_int_eq(attn_encoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_EDTYPE);
    c = cfg;
    c.ffn.d_ff = 12;
    ck_assert_int_eq(attn_encoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_ESHAPE);
    c = cfg;
    c.mha.heads = 4, c.mha.d_head = 4; /* in_proj would be (48, 8) */
    ck_assert_int_eq(attn_encoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_ESHAPE);
    c = cfg;
    c.mha.d_model = 7;
    ck_assert_int_eq(attn_encoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_EINVAL);
    ck_assert_int_eq(attn_encoder_params_from_torch(NULL, f, "layers.0.", &p), ATTN_EINVAL);
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, NULL, "layers.0.", &p), ATTN_EINVAL);
    ck_assert_int_eq(attn_encoder_params_from_torch(&cfg, f, "layers.0.", NULL), ATTN_EINVAL);
    ck_assert_int_eq(memcmp(&p, &p0, sizeof p), 0); /* untouched on every error */
    /* without biases and affine norms the other tensors are still bound */
    c = cfg;
    c.mha.bias = c.ffn.bias = c.ln_affine = false;
    ck_assert_int_eq(attn_encoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_OK);
    ck_assert_ptr_null(p.ln1_g.data);
    ck_assert_ptr_null(p.mha.bq.data);
    ck_assert_ptr_nonnull(p.mha.wq.data);
    attn_safetensors_close(f);
}
END_TEST

/* A file whose one tensor has the wrong dtype, shape or is absent: each binder refuses. */
START_TEST(ept_mis_shaped_tensors) {
    attn_mha_config mc = {.dtype = ATTN_F32, .d_model = 2, .heads = 1, .bias = true};
    struct {
        const char *what, *json;
        attn_status want;
    } c[] = {
        {"valid",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[48,72]},"
         "\"out_proj.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[72,88]},"
         "\"out_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[88,96]}}",
         ATTN_OK},
        {"in_proj transposed",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[2,6],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[48,72]},"
         "\"out_proj.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[72,88]},"
         "\"out_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[88,96]}}",
         ATTN_ESHAPE},
        {"bias 2-D",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F32\",\"shape\":[1,6],\"data_offsets\":[48,72]},"
         "\"out_proj.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[72,88]},"
         "\"out_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[88,96]}}",
         ATTN_ESHAPE},
        {"out_proj F16",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[48,72]},"
         "\"out_proj.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[72,80]},"
         "\"out_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[88,96]}}",
         ATTN_EDTYPE},
        {"bias F64",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F64\",\"shape\":[6],\"data_offsets\":[48,96]},"
         "\"out_proj.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[96,112]},"
         "\"out_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[112,120]}}",
         ATTN_EDTYPE},
        {"no out_proj.bias",
         "{\"in_proj_weight\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]},"
         "\"in_proj_bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[48,72]},"
         "\"out_proj.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[72,88]}}",
         ATTN_ENOTFOUND},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; ++i) {
        attn_safetensors *f = NULL;
        ck_assert_int_eq(attn_safetensors_open(write_st("mha", c[i].json, UINT64_MAX, 128), &f),
                         ATTN_OK);
        attn_mha_params p, p0;
        memset(&p, 0x77, sizeof p);
        p0 = p;
        attn_status s = attn_mha_params_from_torch(&mc, f, NULL, &p);
        ck_assert_msg(s == c[i].want, "%s: %s", c[i].what, attn_status_name(s));
        if (s != ATTN_OK)
            ck_assert_int_eq(memcmp(&p, &p0, sizeof p), 0);
        attn_safetensors_close(f);
    }
}
END_TEST

/* ---- decoder stacks --------------------------------------------------------------- */

static void run_decoder_case(const char *name) {
    fx_file *fx;
    attn_safetensors *f;
    attn_dtype dt = case_open(name, &fx, &f);
    int64_t B = fx_meta(fx, "B", 0), T = fx_meta(fx, "T", 0), C = fx_meta(fx, "C", 0);
    int L = (int)fx_meta(fx, "L", 0);
    attn_mha_config mc = {
        .dtype = dt, .d_model = C, .heads = fx_meta(fx, "H", 0), .bias = true};
    attn_decoder_config cfg = {
        .self_attn = mc,
        .cross = mc,
        .ffn = {.dtype = dt,
                .d_model = C,
                .d_ff = fx_meta(fx, "F", 0),
                .act = fx_meta(fx, "relu", 0) ? ATTN_ACT_RELU : ATTN_ACT_GELU_ERF,
                .bias = true},
        .eps = 1e-5,
        .norm = fx_meta(fx, "norm_first", 0) ? ATTN_PRE_NORM : ATTN_POST_NORM,
        .ln_affine = true};
    lt x = fx_lt(fx, "x", dt), m = fx_lt(fx, "memory", dt), want = fx_lt(fx, "out", dt);
    lt a = lt_new(dt, 3, (int64_t[]){B, T, C}), b = lt_new(dt, 3, (int64_t[]){B, T, C});
    attn_sdpa_opts causal = {.causal = ATTN_CAUSAL_TOP_LEFT};
    size_t ws = attn_decoder_workspace_size(&cfg, &x.v, &m.v, &causal, NULL);
    ck_assert_uint_gt(ws, 0);
    void *work = slab_new(ws);
    const attn_view *in = &x.v;
    attn_view *out = &a.v;
    for (int l = 0; l < L; ++l) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        attn_decoder_params p;
        ck_assert_int_eq(attn_decoder_params_from_torch(&cfg, f, prefix, &p), ATTN_OK);
        ck_assert_int_eq(
            attn_decoder_forward(&cfg, &p, in, &m.v, &causal, NULL, out, NULL, work, ws),
            ATTN_OK);
        in = out;
        out = out == &a.v ? &b.v : &a.v;
    }
    attn_view g, be;
    ck_assert_int_eq(attn_safetensors_view(f, "norm.weight", &g), ATTN_OK);
    ck_assert_int_eq(attn_safetensors_view(f, "norm.bias", &be), ATTN_OK);
    ck_assert_int_eq(attn_layernorm(1e-5, in, &g, &be, out, NULL, NULL), ATTN_OK);
    tu_check_close(out, &want.v, TOL(dt), TOL(dt), name);

    /* the binder's errors: a missing norm3, a cross config of another width */
    attn_decoder_params p, p0;
    memset(&p, 0x42, sizeof p);
    p0 = p;
    ck_assert_int_eq(attn_decoder_params_from_torch(&cfg, f, "layers.2.", &p), ATTN_ENOTFOUND);
    attn_decoder_config c = cfg;
    c.cross.d_kv = C + 2; /* PyTorch's separate k_proj_weight: absent here */
    ck_assert_int_eq(attn_decoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_ENOTFOUND);
    c = cfg;
    c.self_attn.dtype = c.cross.dtype = c.ffn.dtype = dt == ATTN_F64 ? ATTN_F32 : ATTN_F64;
    ck_assert_int_eq(attn_decoder_params_from_torch(&c, f, "layers.0.", &p), ATTN_EDTYPE);
    ck_assert_int_eq(attn_decoder_params_from_torch(NULL, f, "layers.0.", &p), ATTN_EINVAL);
    ck_assert_int_eq(memcmp(&p, &p0, sizeof p), 0);

    free(work);
    lt_free(&x), lt_free(&m), lt_free(&want), lt_free(&a), lt_free(&b);
    attn_safetensors_close(f);
    fx_free(fx);
}

START_TEST(dpt_decoder_stacks) {
    run_decoder_case("st_dec_post_gelu_f64");
    run_decoder_case("st_dec_pre_relu_f32");
}
END_TEST

/* ---- nn.MultiheadAttention --------------------------------------------------------- */

static void run_mha_case(const char *name) {
    fx_file *fx;
    attn_safetensors *f;
    attn_dtype dt = case_open(name, &fx, &f);
    attn_mha_config c = {.dtype = dt,
                         .d_model = fx_meta(fx, "C", 0),
                         .heads = fx_meta(fx, "H", 0),
                         .d_kv = fx_meta(fx, "Ckv", 0),
                         .bias = true};
    attn_mha_params p;
    ck_assert_int_eq(attn_mha_params_from_torch(&c, f, NULL, &p), ATTN_OK);
    lt x = fx_lt(fx, "x", dt), m = fx_lt(fx, "memory", dt), want = fx_lt(fx, "out", dt);
    lt out = lt_new(dt, 3, want.v.shape);
    ck_assert_int_eq(attn_mha_forward(&c, &p, &x.v, &m.v, NULL, &out.v, NULL, NULL, 0),
                     ATTN_OK);
    tu_check_close(&out.v, &want.v, TOL(dt), TOL(dt), name);
    ck_assert_int_eq(attn_mha_params_from_torch(&c, f, "self_attn.", &p), ATTN_ENOTFOUND);
    ck_assert_int_eq(attn_mha_params_from_torch(NULL, f, NULL, &p), ATTN_EINVAL);
    lt_free(&x), lt_free(&m), lt_free(&want), lt_free(&out);
    attn_safetensors_close(f);
    fx_free(fx);
}

START_TEST(mpt_multihead_attention) {
    run_mha_case("st_mha_f64");
    run_mha_case("st_mha_kdim_f32");
}
END_TEST

START_TEST(io_statuses_pinned) {
    ck_assert_int_eq(ATTN_EIO, 12);
    ck_assert_int_eq(ATTN_EFORMAT, 13);
    ck_assert_int_eq(ATTN_ENOTFOUND, 14);
    ck_assert_str_eq(attn_status_name(ATTN_EFORMAT), "ATTN_EFORMAT");
    ck_assert_str_eq(attn_strerror(ATTN_ENOTFOUND), "tensor not found");
    ck_assert_str_ne(attn_strerror(ATTN_EIO), "unknown attn status");
}
END_TEST

int main(void) {
    Suite *s = suite_create("io");
    struct {
        const char *name;
        const TTest *t;
        bool tmp;
    } cases[] = {
        {"attn_safetensors_open", so_fixtures_open, false},
        {"attn_safetensors_open", so_errors, false},
        {"attn_safetensors_open", so_hostile_files, true},
        {"attn_safetensors_view", sv_values, false},
        {"attn_safetensors_view", sv_dtypes_shapes_errors, true},
        {"attn_encoder_params_from_torch", ept_encoder_stacks, false},
        {"attn_encoder_params_from_torch", ept_views_not_copies, false},
        {"attn_encoder_params_from_torch", ept_errors, false},
        {"attn_mha_params_from_torch", ept_mis_shaped_tensors, true},
        {"attn_decoder_params_from_torch", dpt_decoder_stacks, false},
        {"attn_mha_params_from_torch", mpt_multihead_attention, false},
        {"attn_strerror", io_statuses_pinned, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
        TCase *tc = tcase_create(cases[i].name);
        if (cases[i].tmp)
            tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].t);
        suite_add_tcase(s, tc);
    }
    return tu_run(s);
}

/* SPDX-License-Identifier: MIT */
/* Check suite for attn_view: constructors, algebra, and every error path. */
#include "testutil.h"

static float buf[4096];

/* A sentinel view: on error the output must still compare equal to it. */
static attn_view sentinel(void) {
    attn_view v;
    memset(&v, 0xA5, sizeof v);
    return v;
}
#define ASSERT_UNTOUCHED(v)                                                     \
    do {                                                                        \
        attn_view s_ = sentinel();                                              \
        ck_assert_msg(memcmp(&(v), &s_, sizeof s_) == 0, "output was written"); \
    } while (0)

static attn_view mk(int ndim, const int64_t *shape) {
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, ndim, shape), ATTN_OK);
    return v;
}

START_TEST(vi_init_rowmajor) {
    attn_view v = mk(3, (int64_t[]){2, 3, 4});
    ck_assert_int_eq(v.ndim, 3);
    ck_assert_int_eq(v.stride[0], 12);
    ck_assert_int_eq(v.stride[1], 4);
    ck_assert_int_eq(v.stride[2], 1);
    ck_assert_int_eq(attn_view_numel(&v), 24);
    ck_assert(attn_view_is_contiguous(&v));
    ck_assert_int_eq(attn_view_check(&v), ATTN_OK);
}
END_TEST

START_TEST(vi_init_errors) {
    attn_view v = sentinel();
    int64_t sh[5] = {2, 2, 2, 2, 2};
    ck_assert_int_eq(attn_view_init(NULL, ATTN_F32, buf, 1, sh), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 0, sh), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 5, sh), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 1, NULL), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, NULL, 1, sh), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init(&v, (attn_dtype)9, buf, 1, sh), ATTN_EDTYPE);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 2, (int64_t[]){2, -1}), ATTN_ESHAPE);
    /* 2^62 elements overflow the byte size; 2^32 * 2^32 overflows numel */
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, buf, 1, (int64_t[]){INT64_C(1) << 62}),
                     ATTN_ERANGE);
    ck_assert_int_eq(attn_view_init(&v, ATTN_F32, buf, 2,
                                    (int64_t[]){INT64_C(1) << 32, INT64_C(1) << 32}),
                     ATTN_ERANGE);
    ASSERT_UNTOUCHED(v);
}
END_TEST

START_TEST(vi_init_empty_and_null) {
    attn_view v;
    ck_assert_int_eq(attn_view_init(&v, ATTN_F64, NULL, 2, (int64_t[]){0, 5}), ATTN_OK);
    ck_assert_int_eq(attn_view_numel(&v), 0);
    ck_assert_int_eq(attn_view_init(&v, ATTN_U8, buf, 1, (int64_t[]){7}), ATTN_OK);
    ck_assert_int_eq(attn_dtype_size(ATTN_U8), 1);
    ck_assert_int_eq(attn_dtype_size(ATTN_F64), 8);
    ck_assert_int_eq(attn_dtype_size((attn_dtype)0), 0);
}
END_TEST

START_TEST(vis_strided) {
    attn_view v = sentinel();
    /* a Fortran 3x4 array with lda 5 */
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf, 2, (int64_t[]){3, 4},
                                            (int64_t[]){1, 5}), ATTN_OK);
    ck_assert(!attn_view_is_contiguous(&v));
    v = sentinel();
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf, 2, (int64_t[]){3, 4}, NULL),
                     ATTN_EINVAL);
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf, 2,
                                            (int64_t[]){3, 4},
                                            (int64_t[]){INT64_MAX / 2, 1}), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf, 1, (int64_t[]){3},
                                            (int64_t[]){INT64_MIN}), ATTN_ERANGE);
    ASSERT_UNTOUCHED(v);
    /* negative and zero strides are valid */
    ck_assert_int_eq(attn_view_init_strided(&v, ATTN_F32, buf + 10, 2, (int64_t[]){3, 4},
                                            (int64_t[]){0, -1}), ATTN_OK);
}
END_TEST

START_TEST(vc_check) {
    attn_view v = mk(2, (int64_t[]){3, 3});
    v.ndim = 7;
    ck_assert_int_eq(attn_view_check(&v), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_check(NULL), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_numel(&v), 0);
    ck_assert(!attn_view_is_contiguous(&v));
}
END_TEST

START_TEST(vsl_slice) {
    attn_view v = mk(2, (int64_t[]){6, 8}), s = sentinel();
    ck_assert_int_eq(attn_view_slice(&v, 1, 2, 7, 2, &s), ATTN_OK);
    ck_assert_int_eq(s.shape[1], 3); /* 2, 4, 6 */
    ck_assert_int_eq(s.stride[1], 2);
    ck_assert_ptr_eq(s.data, buf + 2);
    ck_assert_int_eq(attn_view_slice(&v, 0, 6, 6, 1, &s), ATTN_OK);
    ck_assert_int_eq(s.shape[0], 0);
    /* a huge step (fuzzer finding): one element, stride kept, no overflow */
    ck_assert_int_eq(attn_view_slice(&v, 1, 3, 8, INT64_MAX, &s), ATTN_OK);
    ck_assert_int_eq(s.shape[1], 1);
    ck_assert_int_eq(s.stride[1], 1);
    ck_assert_ptr_eq(s.data, buf + 3);
    ck_assert_int_eq(attn_view_slice(&v, 1, 0, 8, INT64_MAX / 2, &s), ATTN_OK);
    ck_assert_int_eq(s.shape[1], 1);
    attn_view o = sentinel();
    ck_assert_int_eq(attn_view_slice(&v, 2, 0, 1, 1, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_slice(&v, 0, 0, 1, 0, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_slice(&v, 0, -1, 1, 1, &o), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_slice(&v, 0, 3, 2, 1, &o), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_slice(&v, 0, 0, 7, 1, &o), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_slice(&v, 0, 0, 1, 1, NULL), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vse_select) {
    attn_view v = mk(3, (int64_t[]){2, 3, 4}), s;
    ck_assert_int_eq(attn_view_select(&v, 1, 2, &s), ATTN_OK);
    ck_assert_int_eq(s.ndim, 2);
    ck_assert_int_eq(s.shape[0], 2);
    ck_assert_int_eq(s.shape[1], 4);
    ck_assert_ptr_eq(s.data, buf + 8);
    attn_view o = sentinel(), one = mk(1, (int64_t[]){4});
    ck_assert_int_eq(attn_view_select(&v, 1, 3, &o), ATTN_ERANGE);
    ck_assert_int_eq(attn_view_select(&v, 3, 0, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_select(&one, 0, 0, &o), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vp_permute_transpose) {
    attn_view v = mk(4, (int64_t[]){2, 3, 4, 5}), p;
    ck_assert_int_eq(attn_view_permute(&v, (int[]){0, 2, 1, 3}, &p), ATTN_OK);
    ck_assert_int_eq(p.shape[1], 4);
    ck_assert_int_eq(p.stride[1], 5);
    ck_assert_int_eq(p.shape[2], 3);
    ck_assert_int_eq(p.stride[2], 20);
    attn_view t;
    ck_assert_int_eq(attn_view_transpose(&v, 1, 2, &t), ATTN_OK);
    ck_assert_int_eq(memcmp(&t, &p, sizeof t), 0);
    attn_view o = sentinel();
    ck_assert_int_eq(attn_view_permute(&v, (int[]){0, 0, 1, 3}, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_permute(&v, (int[]){0, 1, 2, 4}, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_permute(&v, NULL, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_transpose(&v, 0, 4, &o), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vsp_split_merge) {
    /* (B, T, H*D) -> (B, T, H, D) -> permute -> (B, H, T, D), all without copies */
    attn_view x = mk(3, (int64_t[]){2, 5, 12}), s, h, m;
    ck_assert_int_eq(attn_view_split(&x, 2, 4, &s), ATTN_OK);
    ck_assert_int_eq(s.ndim, 4);
    ck_assert_int_eq(s.shape[2], 3);
    ck_assert_int_eq(s.stride[2], 4);
    ck_assert_int_eq(s.shape[3], 4);
    ck_assert_int_eq(s.stride[3], 1);
    ck_assert_int_eq(attn_view_permute(&s, (int[]){0, 2, 1, 3}, &h), ATTN_OK);
    ck_assert_int_eq(h.stride[1], 4);
    ck_assert_int_eq(h.stride[2], 12);
    ck_assert_int_eq(attn_view_merge(&s, 2, &m), ATTN_OK);
    ck_assert_int_eq(memcmp(&m, &x, sizeof m), 0);
    attn_view o = sentinel();
    ck_assert_int_eq(attn_view_merge(&h, 1, &o), ATTN_ESTRIDE); /* heads-major needs a copy */
    ck_assert_int_eq(attn_view_split(&x, 2, 5, &o), ATTN_ESHAPE);
    ck_assert_int_eq(attn_view_split(&x, 2, 0, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_split(&s, 0, 1, &o), ATTN_EINVAL); /* already 4-D */
    ck_assert_int_eq(attn_view_merge(&x, 2, &o), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vb_broadcast) {
    attn_view bias = mk(1, (int64_t[]){4}), b;
    ck_assert_int_eq(attn_view_broadcast(&bias, 3, (int64_t[]){2, 3, 4}, &b), ATTN_OK);
    ck_assert_int_eq(b.stride[0], 0);
    ck_assert_int_eq(b.stride[1], 0);
    ck_assert_int_eq(b.stride[2], 1);
    attn_view col = mk(2, (int64_t[]){3, 1});
    ck_assert_int_eq(attn_view_broadcast(&col, 2, (int64_t[]){3, 7}, &b), ATTN_OK);
    ck_assert_int_eq(b.stride[1], 0);
    attn_view o = sentinel();
    ck_assert_int_eq(attn_view_broadcast(&bias, 2, (int64_t[]){3, 5}, &o), ATTN_ESHAPE);
    ck_assert_int_eq(attn_view_broadcast(&col, 1, (int64_t[]){3}, &o), ATTN_EINVAL);
    ck_assert_int_eq(attn_view_broadcast(&col, 2, NULL, &o), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vf_flip_values) {
    for (int i = 0; i < 12; ++i) buf[i] = (float)i;
    attn_view v = mk(2, (int64_t[]){3, 4}), f;
    ck_assert_int_eq(attn_view_flip(&v, 0, &f), ATTN_OK);
    ck_assert_int_eq(f.stride[0], -4);
    ck_assert(tu_get(&f, (int64_t[]){0, 1}) == 9.0);
    ck_assert(tu_get(&f, (int64_t[]){2, 3}) == 3.0);
    attn_view o = sentinel();
    ck_assert_int_eq(attn_view_flip(&v, 2, &o), ATTN_EINVAL);
    ASSERT_UNTOUCHED(o);
}
END_TEST

START_TEST(vco_copy) {
    float src[12], dst[12];
    for (int i = 0; i < 12; ++i) src[i] = (float)i, dst[i] = -1;
    attn_view s, d, st;
    attn_view_init(&s, ATTN_F32, src, 2, (int64_t[]){3, 4});
    attn_view_init_strided(&d, ATTN_F32, dst, 2, (int64_t[]){3, 4}, (int64_t[]){1, 3});
    ck_assert_int_eq(attn_view_copy(&s, &d), ATTN_OK);
    ck_assert(dst[1] == 4.0f && dst[3] == 1.0f);
    ck_assert_int_eq(attn_view_transpose(&s, 0, 1, &st), ATTN_OK);
    ck_assert_int_eq(attn_view_copy(&s, &s), ATTN_EALIAS);
    attn_view bc, d64, dsh;
    attn_view_init_strided(&bc, ATTN_F32, dst, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    ck_assert_int_eq(attn_view_copy(&s, &bc), ATTN_ESTRIDE);
    attn_view_init(&d64, ATTN_F64, dst, 1, (int64_t[]){6});
    attn_view_init(&dsh, ATTN_F32, dst, 2, (int64_t[]){4, 3});
    ck_assert_int_eq(attn_view_copy(&s, &d64), ATTN_EDTYPE);
    ck_assert_int_eq(attn_view_copy(&s, &dsh), ATTN_ESHAPE);
    ck_assert_int_eq(attn_view_copy(&s, &st), ATTN_ESHAPE);
    ck_assert_int_eq(attn_view_copy(NULL, &d), ATTN_EINVAL);
}
END_TEST

START_TEST(vo_overlaps) {
    attn_view a = mk(2, (int64_t[]){2, 4}), b, c;
    attn_view_init(&b, ATTN_F32, buf + 8, 1, (int64_t[]){4});
    attn_view_init(&c, ATTN_F32, buf + 7, 1, (int64_t[]){4});
    ck_assert(!attn_view_overlaps(&a, &b));
    ck_assert(attn_view_overlaps(&a, &c));
    attn_view f;
    attn_view_flip(&b, 0, &f);
    ck_assert(!attn_view_overlaps(&a, &f));
    ck_assert(attn_view_overlaps(&b, &f));
}
END_TEST

START_TEST(vs_status_strings) {
    for (int s = 0; s < ATTN_STATUS_COUNT; ++s) {
        ck_assert_ptr_nonnull(attn_strerror((attn_status)s));
        ck_assert_str_ne(attn_strerror((attn_status)s), "unknown attn status");
        ck_assert_int_eq(strncmp(attn_status_name((attn_status)s), "ATTN_", 5), 0);
    }
    ck_assert_str_eq(attn_strerror((attn_status)99), "unknown attn status");
    ck_assert_str_eq(attn_status_name(ATTN_EALIAS), "ATTN_EALIAS");
    ck_assert_int_eq(ATTN_OK, 0);
    ck_assert_int_eq(ATTN_EMPI, 11); /* pinned values */
    ck_assert_str_eq(attn_version_string(), ATTN_VERSION_STRING);
    ck_assert_int_eq(attn_version_number(), ATTN_VERSION_NUMBER);
}
END_TEST

int main(void) {
    Suite *s = suite_create("view");
    struct { const char *name; const TTest *t; } cases[] = {
        {"attn_view_init", vi_init_rowmajor}, {"attn_view_init", vi_init_errors},
        {"attn_view_init", vi_init_empty_and_null}, {"attn_view_init_strided", vis_strided},
        {"attn_view_check", vc_check}, {"attn_view_slice", vsl_slice},
        {"attn_view_select", vse_select}, {"attn_view_permute", vp_permute_transpose},
        {"attn_view_split", vsp_split_merge}, {"attn_view_broadcast", vb_broadcast},
        {"attn_view_flip", vf_flip_values}, {"attn_view_copy", vco_copy},
        {"attn_view_overlaps", vo_overlaps}, {"attn_strerror", vs_status_strings},
    };
    TCase *tc = NULL;
    const char *last = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (strcmp(cases[i].name, last) != 0) {
            tc = tcase_create(cases[i].name);
            suite_add_tcase(s, tc);
            last = cases[i].name;
        }
        _tcase_add_test(tc, cases[i].t, 0, 0, 0, 1);
    }
    return tu_run(s);
}

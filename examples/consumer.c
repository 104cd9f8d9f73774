/* SPDX-License-Identifier: MIT */
/* The smallest attn program: a view over a Fortran (column-major) array and one GEMM. */
#include <attn/attn.h>
#include <stdio.h>

int main(void) {
    /* A is 2x3 row-major; B is 3x2 stored column-major as Fortran would. */
    double a[6] = {1, 2, 3, 4, 5, 6};
    double b_fortran[6] = {1, 0, 1, 0, 1, 1}; /* columns (1,0,1) and (0,1,1) */
    double c[4] = {0};
    attn_view A, B, C;
    attn_status s = attn_view_init(&A, ATTN_F64, a, 2, (int64_t[]){2, 3});
    if (s == ATTN_OK)
        s = attn_view_init_strided(&B, ATTN_F64, b_fortran, 2, (int64_t[]){3, 2},
                                   (int64_t[]){1, 3});
    if (s == ATTN_OK)
        s = attn_view_init(&C, ATTN_F64, c, 2, (int64_t[]){2, 2});
    if (s == ATTN_OK)
        s = attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0, &A, &B, 0.0, &C, NULL, 0);
    if (s != ATTN_OK) {
        fprintf(stderr, "attn: %s\n", attn_strerror(s));
        return 1;
    }
    printf("attn %s: A*B = [[%g, %g], [%g, %g]]\n", attn_version_string(), c[0], c[1], c[2],
           c[3]);
    /* expected [[4, 5], [10, 11]] */
    return (c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11) ? 0 : 1;
}

/* SPDX-License-Identifier: MIT */
/* Reader for the plain-text fixtures written by scripts/fixture_io.py. */
#ifndef ATTN_FIXTURE_H
#define ATTN_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx_tensor {
    char     name[64];
    int      ndim;
    int64_t  shape[4];
    int64_t  n;
    double  *data;
} fx_tensor;

typedef struct fx_file {
    int        ntensors, nmeta;
    fx_tensor  t[64];
    char       meta_key[32][64];
    long long  meta_val[32];
} fx_file;

/* Load ATTN_TEST_DATA/<name>; returns NULL (and prints why) on failure. */
static inline fx_file *fx_load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ATTN_TEST_DATA, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fixture %s: cannot open\n", path);
        return NULL;
    }
    fx_file *fx = calloc(1, sizeof *fx);
    char word[64];
    while (fscanf(f, "%63s", word) == 1) {
        if (word[0] == '#') {
            int c;
            while ((c = fgetc(f)) != '\n' && c != EOF) {}
        } else if (!strcmp(word, "meta") && fx->nmeta < 32) {
            if (fscanf(f, "%63s %lld", fx->meta_key[fx->nmeta], &fx->meta_val[fx->nmeta]) != 2)
                break;
            fx->nmeta++;
        } else if (!strcmp(word, "tensor") && fx->ntensors < 64) {
            fx_tensor *t = &fx->t[fx->ntensors++];
            if (fscanf(f, "%63s %d", t->name, &t->ndim) != 2 || t->ndim < 0 || t->ndim > 4)
                break;
            t->n = 1;
            for (int k = 0; k < t->ndim; ++k) {
                long long d;
                if (fscanf(f, "%lld", &d) != 1) break;
                t->shape[k] = d;
                t->n *= d;
            }
            t->data = malloc((size_t)(t->n ? t->n : 1) * sizeof(double));
            for (int64_t i = 0; i < t->n; ++i)
                if (fscanf(f, "%lf", &t->data[i]) != 1) break;
        }
    }
    fclose(f);
    return fx;
}

/* The tensor called name, or NULL when the fixture has none. */
static inline fx_tensor *fx_find(fx_file *fx, const char *name) {
    for (int i = 0; i < fx->ntensors; ++i)
        if (!strcmp(fx->t[i].name, name)) return &fx->t[i];
    return NULL;
}

/* Like fx_find, but a missing tensor is reported (the caller's assert then fails). */
static inline fx_tensor *fx_get(fx_file *fx, const char *name) {
    fx_tensor *t = fx_find(fx, name);
    if (!t) fprintf(stderr, "fixture: no tensor %s\n", name);
    return t;
}

static inline long long fx_meta(const fx_file *fx, const char *key, long long dflt) {
    for (int i = 0; i < fx->nmeta; ++i)
        if (!strcmp(fx->meta_key[i], key)) return fx->meta_val[i];
    return dflt;
}

static inline void fx_free(fx_file *fx) {
    if (!fx) return;
    for (int i = 0; i < fx->ntensors; ++i) free(fx->t[i].data);
    free(fx);
}

#endif

/* SPDX-License-Identifier: MIT */
/* Symbol export and attribute macros for the public attn API. */
#ifndef ATTN_EXPORT_H
#define ATTN_EXPORT_H

#if defined(_WIN32) && defined(ATTN_BUILDING_DLL)
#define ATTN_API __declspec(dllexport)
#elif defined(_WIN32) && defined(ATTN_USING_DLL)
#define ATTN_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ATTN_NODISCARD __attribute__((warn_unused_result))
#else
#define ATTN_NODISCARD
#endif

#endif /* ATTN_EXPORT_H */

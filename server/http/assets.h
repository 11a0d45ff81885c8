/* assets.h - the playground page's static files, embedded in the binary.
 *
 * server/http/assets.c compiles the files of server/http/static/ into the read-only
 * data of attnd (an .incbin per file), so the binary serves the page at
 * GET / without reading the file system and without any build tool beyond
 * the C compiler and the assembler it drives.
 *
 * Contract:
 *   assets_lookup(path, &data, &len, &content_type)
 *     path          the request path exactly as the HTTP layer sees it,
 *                   without a query string: "/", "/index.html", "/app.js",
 *                   "/tensors.js", "/style.css" ("/" is index.html) or "/openapi.json"
 *                   (deploy/openapi.json).  Matching is exact
 *                   and case-sensitive; NULL is not found.
 *     returns 0     when path names an embedded asset; then *data points at
 *                   its bytes (static storage, valid for the life of the
 *                   process, never freed, not NUL-terminated), *len is its
 *                   size in bytes and *content_type a static MIME type with
 *                   charset, e.g. "text/html; charset=utf-8".  Any of the
 *                   out pointers may be NULL when the caller needs no value.
 *     returns ATTND_ENOTFOUND (core/attnd_err.h) for any other path; the
 *                   out values are then left untouched.
 *
 * No globals are written, no allocation, no I/O: safe from any thread.
 * The bytes are the files as they were when assets.o was compiled; the
 * Makefile makes assets.o depend on the files of server/http/static/ and on
 * deploy/openapi.json, so an edit rebuilds it.
 */
#ifndef ATTND_ASSETS_H
#define ATTND_ASSETS_H

#include <stddef.h>

int assets_lookup(const char *path, const unsigned char **data, size_t *len,
                  const char **content_type);

#endif /* ATTND_ASSETS_H */

/* assets.c - embeds server/http/static/ into the binary; see assets.h.
 *
 * Each file is pulled into .rodata by the assembler's .incbin directive,
 * between a start and an end symbol.  The path is relative to the directory
 * the compiler runs in: the Makefile builds from the repository root.  The
 * symbols are hidden, so they never clash with or leak into another object
 * outside the binary.
 */
#include "server/http/assets.h"

#include <string.h>

#include "core/attnd_err.h"

#define ATTND_INCBIN(sym, file)                                              \
  __asm__(".pushsection .rodata\n"                                           \
          ".balign 16\n"                                                     \
          ".globl " #sym "_start\n"                                          \
          ".hidden " #sym "_start\n"                                         \
          ".type " #sym "_start, @object\n"                                  \
          #sym "_start:\n"                                                   \
          ".incbin \"" file "\"\n"                                           \
          ".globl " #sym "_end\n"                                            \
          ".hidden " #sym "_end\n"                                           \
          #sym "_end:\n"                                                     \
          ".byte 0\n"                                                        \
          ".size " #sym "_start, " #sym "_end - " #sym "_start + 1\n"       \
          ".popsection\n");                                                  \
  extern const unsigned char sym##_start[];                                  \
  extern const unsigned char sym##_end[]

ATTND_INCBIN(attnd_asset_index_html, "server/http/static/index.html");
ATTND_INCBIN(attnd_asset_app_js, "server/http/static/app.js");
ATTND_INCBIN(attnd_asset_tensors_js, "server/http/static/tensors.js");
ATTND_INCBIN(attnd_asset_style_css, "server/http/static/style.css");
/* The OpenAPI document of every route, served as GET /openapi.json. */
ATTND_INCBIN(attnd_asset_openapi_json, "deploy/openapi.json");

typedef struct asset {
  const char *path;
  const unsigned char *start;
  const unsigned char *end;
  const char *content_type;
} asset;

static const asset ASSETS[] = {
    {"/", attnd_asset_index_html_start, attnd_asset_index_html_end,
     "text/html; charset=utf-8"},
    {"/index.html", attnd_asset_index_html_start, attnd_asset_index_html_end,
     "text/html; charset=utf-8"},
    {"/app.js", attnd_asset_app_js_start, attnd_asset_app_js_end,
     "text/javascript; charset=utf-8"},
    {"/tensors.js", attnd_asset_tensors_js_start, attnd_asset_tensors_js_end,
     "text/javascript; charset=utf-8"},
    {"/style.css", attnd_asset_style_css_start, attnd_asset_style_css_end,
     "text/css; charset=utf-8"},
    {"/openapi.json", attnd_asset_openapi_json_start,
     attnd_asset_openapi_json_end, "application/json"},
};

int assets_lookup(const char *path, const unsigned char **data, size_t *len,
                  const char **content_type) {
  if (path == NULL) return ATTND_ENOTFOUND;
  for (size_t i = 0; i < sizeof ASSETS / sizeof ASSETS[0]; i++) {
    const asset *a = &ASSETS[i];
    if (strcmp(path, a->path) != 0) continue;
    if (data) *data = a->start;
    if (len) *len = (size_t)(a->end - a->start);
    if (content_type) *content_type = a->content_type;
    return 0;
  }
  return ATTND_ENOTFOUND;
}

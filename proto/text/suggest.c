/* suggest.c - "did you mean ...?" for names a client got wrong.
 *
 * A request that names a field, parameter or datatype attnd does not know
 * is refused (an ignored name would answer something other than what was
 * asked); the message then offers the nearest known name, when one is
 * near enough, and lists the names attnd knows at that place.
 *
 * Nearness is the Damerau-Levenshtein distance in its restricted form
 * (optimal string alignment): the fewest insertions, deletions,
 * substitutions and swaps of two adjacent characters that turn one name
 * into the other, ASCII case ignored, so "causl", "casual", "Query" and
 * "vaild_lens" all find their name.  A name is near enough when that
 * distance is at most a third of its length (at least 1, at most 3):
 * "seeed" finds "seed", "timeout_us" is not taken for "timeout".
 *
 * Everything here runs on the error path only; nothing allocates. */
#include <stdio.h>
#include <string.h>

#include "proto/text/text.h"

/* Longer names are never near any name attnd knows. */
#define NAME_MAX_LEN 64

static unsigned char lower(char c) {
  return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a')
                              : (unsigned char)c;
}

static int min3(int a, int b, int c) {
  int m = a < b ? a : b;
  return m < c ? m : c;
}

int proto__edit_distance(const char *a, const char *b) {
  /* three rows of the (|a|+1) x (|b|+1) table: i-2, i-1, i */
  int rows[3][NAME_MAX_LEN + 1];
  size_t la = strlen(a), lb = strlen(b);
  if (la > NAME_MAX_LEN || lb > NAME_MAX_LEN)
    return -1;
  for (size_t j = 0; j <= lb; j++)
    rows[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int *cur = rows[i % 3], *up = rows[(i - 1) % 3], *up2 = rows[(i + 1) % 3];
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cost = lower(a[i - 1]) != lower(b[j - 1]);
      cur[j] = min3(up[j] + 1, cur[j - 1] + 1, up[j - 1] + cost);
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]) && up2[j - 2] + 1 < cur[j])
        cur[j] = up2[j - 2] + 1; /* two adjacent characters swapped */
    }
  }
  return rows[la % 3][lb];
}

int proto__suggest(const char *name, const char *const *names, int n) {
  int best = -1, best_d = 0;
  for (int i = 0; i < n; i++) {
    int len = (int)strlen(names[i]), allowed = len / 3;
    if (allowed < 1)
      allowed = 1;
    if (allowed > 3)
      allowed = 3;
    int d = proto__edit_distance(name, names[i]);
    if (d >= 0 && d <= allowed && (best < 0 || d < best_d)) {
      best = i;
      best_d = d;
    }
  }
  return best;
}

size_t proto__names_join(char *s, size_t cap, const char *const *names,
                         int n) {
  size_t o = 0;
  if (cap)
    s[0] = '\0';
  for (int i = 0; i < n && o < cap; i++)
    o += (size_t)snprintf(s + o, cap - o, i ? ", %s" : "%s", names[i]);
  return o < cap ? o : (cap ? cap - 1 : 0);
}

void proto__hint(char *s, size_t cap, const char *name,
                 const char *const *cand, int ncand, const char *label,
                 const char *const *list, int nlist) {
  int k = proto__suggest(name, cand, ncand);
  size_t o = 0;
  if (!cap)
    return;
  s[0] = '\0';
  if (k >= 0)
    o = (size_t)snprintf(s, cap, "did you mean '%s'? ", cand[k]);
  if (o < cap)
    o += (size_t)snprintf(s + o, cap - o, "%s: ", label);
  if (o < cap)
    proto__names_join(s + o, cap - o, list, nlist);
}

void proto__quote_name(const char *name, char *s, size_t cap) {
  size_t i = 0, max = 40;
  if (cap < 4)
    max = 0;
  else if (max > cap - 4)
    max = cap - 4;
  for (; name[i] && i < max; i++) {
    unsigned char c = (unsigned char)name[i];
    s[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (name[i] && cap >= 4)
    memcpy(s + i, "...", 3), i += 3;
  if (cap)
    s[i] = '\0';
}

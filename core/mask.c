/* mask.c - which keys a query may attend to, and turning raw scores into
 * masked, finite scores.
 *
 * valid_lens, causal and window each bound the keys of row i to an
 * interval, so their AND is one interval [lo, hi) per row; it is what lets
 * both paths skip key ranges without looking at them.  The boolean mask is
 * element-wise and is applied inside that interval only.
 */
#include "attn_impl.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* [lo, hi) for query row i before the element-wise mask.  Causal and
 * the window count within the row's sequence (t's offsets and lengths:
 * the whole problem unless packed); the interval never leaves it. */
static void row_interval(const attn_problem *p, const attn__task *t, int i,
                         int *lo, int *hi) {
  int64_t il = (int64_t)i - t->qoff, shift = (int64_t)t->lk - t->lq;
  int64_t l = 0, h = t->lk;
  if (p->valid_lens) {
    int64_t idx = p->valid_lens_per_query ? (int64_t)t->b * p->Lq + i : t->b;
    /* proto/ guarantees [0, Lk]; clamping keeps a bad caller in bounds. */
    h = min64(h, max64(0, p->valid_lens[idx]));
  }
  if (p->causal == ATTN_CAUSAL_UPPER_LEFT)
    h = min64(h, il + 1);
  else if (p->causal == ATTN_CAUSAL_LOWER_RIGHT)
    h = min64(h, il + shift + 1);
  if (p->has_window) {
    int64_t c = p->window_align == ATTN_WINDOW_LOWER_RIGHT ? il + shift : il;
    if (p->window_left >= 0) l = max64(l, c - p->window_left);
    if (p->window_right >= 0) h = min64(h, c + p->window_right + 1);
  }
  if (l > t->lk) l = t->lk; /* an empty row; keeps koff + l within Lk */
  if (h < l) h = l;
  *lo = (int)(t->koff + l);
  *hi = (int)(t->koff + h);
}

void attn__row_intervals(const attn_problem *p, const attn__task *t, int *lo,
                         int *hi, int *klo, int *khi) {
  int ulo = p->Lk, uhi = 0;
  for (int r = 0; r < t->rows; r++) {
    row_interval(p, t, t->i0 + r, &lo[r], &hi[r]);
    if (lo[r] >= hi[r]) continue;
    if (lo[r] < ulo) ulo = lo[r];
    if (hi[r] > uhi) uhi = hi[r];
  }
  *klo = ulo;
  *khi = uhi;
}

void attn__run_keys(const int *lo, const int *hi, int rows, int *a,
                    int *z) {
  *a = INT32_MAX;
  *z = 0;
  for (int r = 0; r < rows; r++) {
    if (lo[r] >= hi[r]) continue;
    if (lo[r] < *a) *a = lo[r];
    if (hi[r] > *z) *z = hi[r];
  }
}

int attn__run_width(int a, int z, int j0, int n, int first) {
  if (a < z && a < j0 + n && z > j0) return (z < j0 + n ? z : j0 + n) - j0;
  return first ? 1 : 0;
}

void attn__row_span(const attn_problem *p, const attn__task *t, int i,
                    int lo, int hi, int j0, int n, float *flags,
                    attn__span *sp) {
  /* [lo, hi) in block coordinates, clipped to [0, n]; an empty row may
   * have lo beyond the block or even beyond Lk. */
  int a = lo > j0 ? lo - j0 : 0;
  int z = hi - j0 < n ? hi - j0 : n;
  if (a > n) a = n;
  if (z < a) z = a;
  sp->a = a;
  sp->z = z;
  sp->allowed = z - a;
  sp->flags = NULL;
  if (!p->mask || a == z) return;
  const int64_t *ms = p->mask_stride;
  const uint8_t *m = p->mask + t->b * ms[0] + t->h * ms[1] + i * ms[2];
  int count = 0;
  for (int c = a; c < z; c++) {
    int ok = m[(int64_t)(j0 + c) * ms[3]] != 0;
    flags[c] = ok ? 1.0f : 0.0f;
    count += ok;
  }
  sp->allowed = count;
  sp->flags = flags;
}

int attn__row_count(const attn_problem *p, const attn__task *t, int i,
                    int lo, int hi) {
  if (hi <= lo) return 0;
  if (!p->mask) return hi - lo;
  const int64_t *ms = p->mask_stride;
  const uint8_t *m = p->mask + t->b * ms[0] + t->h * ms[1] + i * ms[2];
  int count = 0;
  for (int j = lo; j < hi; j++) count += m[(int64_t)j * ms[3]] != 0;
  return count;
}

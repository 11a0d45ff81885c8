/* printer_exhaustive.cc - every float32 through every printer attnd has
 * (make printer-exhaustive; not part of the daemon).
 *
 * All 2^32 bit patterns, 65536 at a time, are printed as a list by each
 * printer this CPU runs (proto__num_fmt_f32_list_width: 8 at a time with
 * AVX-512F, 4 with AVX2, and one at a time), and each list must equal the
 * reference text byte for byte.  The reference is written here, digit by
 * digit, from Dragonbox's public jkj::dragonbox::to_decimal (the shortest
 * digits, the closest when there are several), in the layout fpconv.h
 * documents for proto__fmt_f32: "null" for infinities and NaN, "0" for
 * either zero, plain for decimal exponents -5..8, d.ddde-X otherwise.
 * Each reference text must also read back (glibc strtof, correctly
 * rounded) as the float it came from.
 *
 * One thread per CPU (ATTND_EXHAUSTIVE_THREADS overrides), taking blocks
 * in turn; a progress line every 1/32 of the range and a summary line at
 * the end.  Exits 1 on any mismatch (the first few are printed), 0
 * otherwise.
 *
 *   printer-exhaustive [first-block last-block]   (blocks 0..65535) */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <dragonbox/dragonbox.h>

#include "proto/text/fpconv.h"

namespace {

constexpr uint32_t BLOCK = 65536;       /* floats per block */
constexpr uint32_t BLOCKS = 65536;      /* blocks in 2^32 */
constexpr int REPORT_LIMIT = 20;        /* mismatches printed */

/* The text proto__fmt_f32 documents for x, laid out plainly. */
int reference(char *s, float x) {
  if (!std::isfinite(x)) {
    std::memcpy(s, "null", 5);
    return 4;
  }
  if (x == 0.0f) {
    std::memcpy(s, "0", 2);
    return 1;
  }
  auto dec = jkj::dragonbox::to_decimal(x);
  char d[12];
  int n = 0;
  for (uint32_t v = dec.significand; v; v /= 10)
    d[n++] = (char)('0' + v % 10);
  std::reverse(d, d + n);
  int e = dec.exponent + n - 1; /* the leading digit's exponent */
  char *o = s;
  if (dec.is_negative)
    *o++ = '-';
  if (e >= -5 && e <= 8) {
    if (e < 0) { /* 0.000ddd */
      *o++ = '0';
      *o++ = '.';
      for (int i = 0; i < -e - 1; i++)
        *o++ = '0';
      for (int i = 0; i < n; i++)
        *o++ = d[i];
    } else if (n <= e + 1) { /* an integer */
      for (int i = 0; i < n; i++)
        *o++ = d[i];
      for (int i = n; i <= e; i++)
        *o++ = '0';
    } else { /* ddd.ddd */
      for (int i = 0; i < n; i++) {
        if (i == e + 1)
          *o++ = '.';
        *o++ = d[i];
      }
    }
  } else { /* d.ddde-X */
    *o++ = d[0];
    if (n > 1)
      *o++ = '.';
    for (int i = 1; i < n; i++)
      *o++ = d[i];
    o += std::snprintf(o, 8, "e%d", e);
  }
  *o = '\0';
  return (int)(o - s);
}

/* 1 when text s reads back as x (zero as zero, whichever sign). */
bool reads_back(const char *s, float x) {
  if (!std::isfinite(x))
    return std::strcmp(s, "null") == 0;
  float y = std::strtof(s, nullptr);
  if (x == 0.0f)
    return y == 0.0f;
  uint32_t a, b;
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  return a == b;
}

struct shared {
  std::atomic<uint32_t> next;
  uint32_t last;                 /* one past the last block */
  std::atomic<uint64_t> done{0}; /* floats checked */
  std::atomic<uint64_t> mismatches{0};
  std::mutex out;                /* stdout */
  int widths[3];
  int nwidths;
};

void report(shared *sh, const char *what, uint32_t bits, int width,
            const char *got, size_t got_len, const char *want) {
  uint64_t k = sh->mismatches.fetch_add(1);
  if (k >= REPORT_LIMIT)
    return;
  std::lock_guard<std::mutex> lock(sh->out);
  std::printf("MISMATCH %s: bits 0x%08x, width %d: got \"%.*s\", want "
              "\"%s\"\n", what, bits, width, (int)got_len, got, want);
  std::fflush(stdout);
}

/* Finds and reports the floats whose text in one width's list differs
 * from their reference. */
void locate(shared *sh, uint32_t base, int width, const char *text,
            const std::vector<char> &refs) {
  const char *p = text;
  for (uint32_t i = 0; i < BLOCK; i++) {
    const char *q = std::strchr(p, ',');
    size_t len = q ? (size_t)(q - p) : std::strlen(p);
    const char *want = &refs[(size_t)i * PROTO__F32_MAX];
    if (len != std::strlen(want) || std::memcmp(p, want, len))
      report(sh, "printer", base + i, width, p, len, want);
    if (!q)
      break;
    p = q + 1;
  }
}

void worker(shared *sh) {
  std::vector<float> x(BLOCK);
  std::vector<char> want(BLOCK * (PROTO__F32_MAX + 1) + 1);
  std::vector<char> got(BLOCK * (PROTO__F32_MAX + 1) + 1);
  std::vector<char> refs(BLOCK * PROTO__F32_MAX);
  for (;;) {
    uint32_t b = sh->next.fetch_add(1);
    if (b >= sh->last)
      return;
    uint32_t base = b * BLOCK;
    char *o = want.data();
    for (uint32_t i = 0; i < BLOCK; i++) {
      uint32_t bits = base + i;
      std::memcpy(&x[i], &bits, 4);
      char *r = &refs[(size_t)i * PROTO__F32_MAX];
      int n = reference(r, x[i]);
      if (!reads_back(r, x[i]))
        report(sh, "reference does not read back", bits, 0, r, (size_t)n,
               "the same float");
      if (i)
        *o++ = ',';
      std::memcpy(o, r, (size_t)n);
      o += n;
    }
    *o = '\0';
    size_t want_len = (size_t)(o - want.data());
    for (int w = 0; w < sh->nwidths; w++) {
      size_t len = proto__num_fmt_f32_list_width(got.data(), x.data(), BLOCK,
                                                 sh->widths[w]);
      if (len != want_len || std::memcmp(got.data(), want.data(), len + 1))
        locate(sh, base, sh->widths[w], got.data(), refs);
    }
    sh->done.fetch_add(BLOCK);
  }
}

}  // namespace

int main(int argc, char **argv) {
  shared sh;
  uint32_t first = 0;
  sh.last = BLOCKS;
  if (argc == 3) { /* a range of blocks, for a quick look */
    first = (uint32_t)std::strtoul(argv[1], nullptr, 0);
    sh.last = (uint32_t)std::strtoul(argv[2], nullptr, 0) + 1;
    if (first >= sh.last || sh.last > BLOCKS) {
      std::fprintf(stderr, "printer-exhaustive: blocks are 0..%u\n",
                   BLOCKS - 1);
      return 2;
    }
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: printer-exhaustive [first-block "
                         "last-block]\n");
    return 2;
  }
  sh.next = first;
  int vb = proto__vector_bytes();
  sh.nwidths = 0;
  if (vb >= 64)
    sh.widths[sh.nwidths++] = 8;
  if (vb >= 32)
    sh.widths[sh.nwidths++] = 4;
  sh.widths[sh.nwidths++] = 1;

  unsigned threads = std::thread::hardware_concurrency();
  if (const char *t = std::getenv("ATTND_EXHAUSTIVE_THREADS"))
    threads = (unsigned)std::atoi(t);
  if (threads < 1)
    threads = 1;

  uint64_t total = (uint64_t)(sh.last - first) * BLOCK;
  std::printf("printer-exhaustive: %llu floats, printers of width",
              (unsigned long long)total);
  for (int w = 0; w < sh.nwidths; w++)
    std::printf(" %d", sh.widths[w]);
  std::printf(" (this CPU's), %u threads\n", threads);
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; i++)
    pool.emplace_back(worker, &sh);
  uint64_t step = total / 32 ? total / 32 : total, shown = 0;
  while (sh.done.load() < total) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    uint64_t d = sh.done.load();
    if (d / step > shown / step || d == total) {
      shown = d;
      double s = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(sh.out);
      std::printf("printer-exhaustive: %5.1f%% (%llu floats), %llu "
                  "mismatches, %.0f s\n", 100.0 * (double)d / (double)total,
                  (unsigned long long)d,
                  (unsigned long long)sh.mismatches.load(), s);
      std::fflush(stdout);
    }
  }
  for (auto &t : pool)
    t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           t0).count();
  uint64_t bad = sh.mismatches.load();
  std::printf("printer-exhaustive: %s: %llu floats x %d printers, %llu "
              "mismatches, %.0f s on %u threads\n", bad ? "FAILED" : "ok",
              (unsigned long long)total, sh.nwidths,
              (unsigned long long)bad, s, threads);
  return bad ? 1 : 0;
}

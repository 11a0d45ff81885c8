/* amx.c - asks Linux for AMX's tile data (see amx.h). */
#include "server/amx.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

/* asm/prctl.h's values and CPUID.(7, 0):EDX's AMX bits, spelt here
 * since not every compiler's headers have them (clang 14's cpuid.h). */
#define AMX_REQ_XCOMP_PERM 0x1023
#define AMX_XTILECFG 17
#define AMX_XTILEDATA 18
#define AMX_CPUID_BF16 (1u << 22)
#define AMX_CPUID_TILE (1u << 24)

/* XCR0, the state components the OS enables (needs OSXSAVE). */
static uint64_t amx_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

/* 1 when CPUID has AMX-TILE and AMX-BF16 (valgrind's CPUID has not). */
static int amx_cpu(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return 0;
  return (d & AMX_CPUID_TILE) && (d & AMX_CPUID_BF16);
}

/* 1 when the OS saves the tile state (XCR0 bits 17 and 18). */
static int amx_os(void) {
  unsigned a, b, c, d;
  uint64_t want = (1ull << AMX_XTILECFG) | (1ull << AMX_XTILEDATA);
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
    return 0;
  return (amx_xcr0() & want) == want;
}

int amx_request(char *why, size_t n) {
  if (n) why[0] = '\0';
  if (!amx_cpu())
    return 0;
  if (!amx_os()) {
    snprintf(why, n, "the CPU has AMX but the OS does not enable its "
             "state (XCR0)");
    return 0;
  }
  if (syscall(SYS_arch_prctl, AMX_REQ_XCOMP_PERM, AMX_XTILEDATA) != 0) {
    snprintf(why, n, "the kernel refused the tile-data permission "
             "(arch_prctl ARCH_REQ_XCOMP_PERM: %s)", strerror(errno));
    return 0;
  }
  return 1;
}
#else
int amx_request(char *why, size_t n) {
  if (n) why[0] = '\0';
  return 0;
}
#endif

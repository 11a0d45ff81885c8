/* shm.c - the registry of client shared memory regions (see shm.h).
 *
 * DESIGN
 *
 * Threads: HTTP threads register, unregister, ask for the status, and
 * acquire and release the regions their requests name; they read inputs
 * (shm_region_read) while decoding.  Workers, and HTTP threads running a
 * request inline, write outputs (shm_region_check, shm_region_write).
 *
 * What is shared, and how:
 * - reg->mu guards reg->regions (an array sorted by name), reg->bytes,
 *   and each region's holds and registered fields.  It is a leaf lock:
 *   nothing else is locked while it is held, and no callback runs under
 *   it.  Opening the object happens outside it (a register checks the
 *   name and the limits before and again after).
 * - A region's name, key, offset, byte_size and fd never change between
 *   its registration and its end, so a thread holding the region reads
 *   them, and does I/O on fd, without the lock.  A region ends (fd
 *   closed, memory freed) only when it is unregistered and unheld, so
 *   never under a holder.
 * - pread and pwrite take their own offsets: holders share fd freely.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../proto/mem.h"

#define ERR(...) (snprintf(err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

struct shm_region {
  char *name, *key;         /* in the same allocation as the region */
  uint64_t offset, byte_size;
  int fd;
  struct shm_registry *reg;
  size_t holds;             /* reg->mu: requests holding the region */
  int registered;           /* reg->mu: 0 once unregistered */
};

struct shm_registry {
  pthread_mutex_t mu;
  struct shm_region **regions; /* mu: sorted by name */
  size_t n, cap;               /* mu */
  uint64_t bytes;              /* mu: byte sizes of all regions */
  size_t max_regions;
  uint64_t max_bytes;
};

struct shm_registry *shm_new(size_t max_regions, uint64_t max_bytes) {
  struct shm_registry *reg = calloc(1, sizeof *reg);
  if (!reg)
    return NULL;
  pthread_mutex_init(&reg->mu, NULL);
  reg->max_regions = max_regions;
  reg->max_bytes = max_bytes;
  return reg;
}

static void shm_close(struct shm_region *r) {
  close(r->fd);
  mem_free(r);
}

void shm_free(struct shm_registry *reg) {
  if (!reg)
    return;
  for (size_t i = 0; i < reg->n; i++)
    shm_close(reg->regions[i]);
  mem_free(reg->regions);
  pthread_mutex_destroy(&reg->mu);
  free(reg);
}

/* The index of name in reg->regions, or of where it would go (*found 0).
 * Under reg->mu. */
static size_t shm_find(const struct shm_registry *reg, const char *name,
                       int *found) {
  size_t lo = 0, hi = reg->n;
  *found = 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(reg->regions[mid]->name, name);
    if (c == 0) {
      *found = 1;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Removes regions[i] and ends it.  Under reg->mu. */
static void shm_remove(struct shm_registry *reg, size_t i) {
  struct shm_region *r = reg->regions[i];
  memmove(&reg->regions[i], &reg->regions[i + 1],
          (reg->n - i - 1) * sizeof *reg->regions);
  reg->n--;
  reg->bytes -= r->byte_size;
  shm_close(r);
}

/* ---- registering ------------------------------------------------------- */

/* What a register may not do whatever the object: take a name in use or
 * pass a limit.  Under reg->mu; returns 0 with *at, where name goes. */
static int shm_admit(struct shm_registry *reg, const char *name,
                     uint64_t byte_size, size_t *at, char *err) {
  int found;
  *at = shm_find(reg, name, &found);
  if (found)
    return ERR("shared memory region '%s' already in manager", name);
  if (reg->n >= reg->max_regions)
    return ERR("cannot register shared memory region '%s': %zu regions are "
               "registered, the server's limit (--shm-max-regions)", name,
               reg->n);
  if (byte_size > reg->max_bytes - reg->bytes)
    return ERR("cannot register shared memory region '%s': its %llu bytes "
               "would bring the registered regions past the server's limit "
               "of %llu bytes (--shm-max-mb; %llu registered)", name,
               (unsigned long long)byte_size,
               (unsigned long long)reg->max_bytes,
               (unsigned long long)reg->bytes);
  return 0;
}

static int shm_admit_locked(struct shm_registry *reg, const char *name,
                            uint64_t byte_size, size_t *at, char *err) {
  pthread_mutex_lock(&reg->mu);
  int rc = shm_admit(reg, name, byte_size, at, err);
  pthread_mutex_unlock(&reg->mu);
  return rc;
}

/* Opens key and checks that [offset, offset + byte_size) lies in it, in
 * Triton's order and words (which name the key, or the region).  Returns
 * the descriptor, or -1 with the message in err. */
static int shm_open_object(const char *name, const char *key,
                           uint64_t offset, uint64_t byte_size, char *err) {
  long page = sysconf(_SC_PAGESIZE);
  struct stat st;
  int fd = shm_open(key, O_RDWR, 0600);
  if (fd < 0) {
    (void)ERR("Unable to open shared memory region: '%s' (%s)", key,
        strerror(errno));
    return -1;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
    (void)ERR("Invalid shared memory region: '%s'", key);
    goto err;
  }
  if (offset > (uint64_t)st.st_size ||
      byte_size > (uint64_t)st.st_size - offset) {
    (void)ERR("failed to register shared memory region '%s': invalid args "
        "(offset %llu + byte_size %llu is past the end of '%s', which "
        "holds %lld bytes)", name, (unsigned long long)offset,
        (unsigned long long)byte_size, key, (long long)st.st_size);
    goto err;
  }
  if (byte_size == 0 || (page > 0 && offset % (uint64_t)page)) {
    (void)ERR("failed to register shared memory region '%s': unable to process "
        "address space: Invalid argument (byte_size must be above 0 and "
        "offset a multiple of the page size, %ld)", name, page);
    goto err;
  }
  return fd;
err:
  close(fd);
  return -1;
}

static struct shm_region *shm_region_new(const char *name, const char *key,
                                         uint64_t offset,
                                         uint64_t byte_size, int fd) {
  size_t ln = strlen(name) + 1, lk = strlen(key) + 1;
  struct shm_region *r = mem_malloc(sizeof *r + ln + lk);
  if (!r)
    return NULL;
  r->name = (char *)(r + 1);
  r->key = r->name + ln;
  memcpy(r->name, name, ln);
  memcpy(r->key, key, lk);
  r->offset = offset;
  r->byte_size = byte_size;
  r->fd = fd;
  r->holds = 0;
  r->registered = 1;
  return r;
}

/* Makes room for one more region.  Under reg->mu. */
static int shm_grow(struct shm_registry *reg) {
  size_t cap = reg->cap ? reg->cap * 2 : 8;
  struct shm_region **a;
  if (reg->n < reg->cap)
    return 0;
  if (!(a = mem_realloc(reg->regions, cap * sizeof *a)))
    return ATTND_ENOMEM;
  reg->regions = a;
  reg->cap = cap;
  return 0;
}

int shm_register(struct shm_registry *reg, const char *name, const char *key,
                 uint64_t offset, uint64_t byte_size,
                 char err[PROTO_ERR_MAX]) {
  struct shm_region *r;
  size_t at;
  int fd, rc;
  if ((rc = shm_admit_locked(reg, name, byte_size, &at, err)))
    return rc;
  if ((fd = shm_open_object(name, key, offset, byte_size, err)) < 0)
    return ATTND_EINVAL;
  if (!(r = shm_region_new(name, key, offset, byte_size, fd))) {
    close(fd);
    return ATTND_ENOMEM;
  }
  r->reg = reg;
  /* Again: another register may have taken the name meanwhile. */
  pthread_mutex_lock(&reg->mu);
  if (!(rc = shm_admit(reg, name, byte_size, &at, err)) &&
      !(rc = shm_grow(reg))) {
    memmove(&reg->regions[at + 1], &reg->regions[at],
            (reg->n - at) * sizeof *reg->regions);
    reg->regions[at] = r;
    reg->n++;
    reg->bytes += byte_size;
  }
  pthread_mutex_unlock(&reg->mu);
  if (rc)
    shm_close(r);
  return rc;
}

/* Unregisters regions[*i]; advances *i past it unless it was removed.
 * Under reg->mu. */
static void shm_unregister_at(struct shm_registry *reg, size_t *i) {
  struct shm_region *r = reg->regions[*i];
  r->registered = 0;
  if (r->holds == 0)
    shm_remove(reg, *i);
  else
    ++*i;
}

void shm_unregister(struct shm_registry *reg, const char *name) {
  size_t i = 0;
  int found;
  pthread_mutex_lock(&reg->mu);
  if (name) {
    i = shm_find(reg, name, &found);
    if (found && reg->regions[i]->registered)
      shm_unregister_at(reg, &i);
  } else {
    while (i < reg->n)
      if (reg->regions[i]->registered)
        shm_unregister_at(reg, &i);
      else
        i++;
  }
  pthread_mutex_unlock(&reg->mu);
}

/* ---- status ------------------------------------------------------------ */

/* Encodes regions[from, to) under reg->mu. */
static int shm_encode(struct shm_registry *reg, size_t from, size_t to,
                      char **body, size_t *len) {
  proto_shm_status one, *all = &one;
  int rc;
  if (to - from > 1 && !(all = mem_malloc((to - from) * sizeof *all)))
    return ATTND_ENOMEM;
  for (size_t i = from; i < to; i++) {
    const struct shm_region *r = reg->regions[i];
    all[i - from] = (proto_shm_status){r->name, r->key, r->offset,
                                       r->byte_size};
  }
  rc = proto_shm_status_encode(all, to - from, body, len);
  if (all != &one)
    mem_free(all);
  return rc;
}

int shm_status(struct shm_registry *reg, const char *name, char **body,
               size_t *len, char err[PROTO_ERR_MAX]) {
  size_t i = 0;
  int found = 1, rc;
  pthread_mutex_lock(&reg->mu);
  if (name)
    i = shm_find(reg, name, &found);
  if (!found) {
    snprintf(err, PROTO_ERR_MAX, "Unable to find system shared memory "
             "region: '%s'", name);
    rc = ATTND_ENOTFOUND;
  } else {
    rc = shm_encode(reg, i, name ? i + 1 : reg->n, body, len);
  }
  pthread_mutex_unlock(&reg->mu);
  return rc;
}

size_t shm_count(struct shm_registry *reg) {
  pthread_mutex_lock(&reg->mu);
  size_t n = reg->n;
  pthread_mutex_unlock(&reg->mu);
  return n;
}

/* ---- holding, reading, writing ---------------------------------------- */

struct shm_region *shm_acquire(struct shm_registry *reg, const char *name) {
  struct shm_region *r = NULL;
  int found;
  pthread_mutex_lock(&reg->mu);
  size_t i = shm_find(reg, name, &found);
  if (found) {
    r = reg->regions[i];
    r->holds++;
  }
  pthread_mutex_unlock(&reg->mu);
  return r;
}

void shm_release(struct shm_region *r) {
  struct shm_registry *reg = r->reg;
  int found;
  pthread_mutex_lock(&reg->mu);
  if (--r->holds == 0 && !r->registered) {
    size_t i = shm_find(reg, r->name, &found);
    if (found && reg->regions[i] == r)
      shm_remove(reg, i);
  }
  pthread_mutex_unlock(&reg->mu);
}

uint64_t shm_region_size(const struct shm_region *r) { return r->byte_size; }

/* The message for an object that no longer holds what was registered. */
static int shm_shrunk(const struct shm_region *r, const char *what,
                      char *err) {
  return ERR("shared memory region '%s': the object '%s' %s (truncated "
             "after registration?)", r->name, r->key, what);
}

int shm_region_read(struct shm_region *r, uint64_t off, void *dst,
                    size_t n, char err[PROTO_ERR_MAX]) {
  char *p = dst;
  off_t at = (off_t)(r->offset + off);
  while (n > 0) {
    ssize_t got = pread(r->fd, p, n < (size_t)SSIZE_MAX ? n : SSIZE_MAX,
                        at);
    if (got < 0 && errno == EINTR)
      continue;
    if (got == 0)
      return shm_shrunk(r, "ends before the data the request names", err);
    if (got < 0)
      return ERR("shared memory region '%s': reading '%s' failed: %s",
                 r->name, r->key, strerror(errno));
    p += got;
    at += got;
    n -= (size_t)got;
  }
  return 0;
}

int shm_region_check(struct shm_region *r, uint64_t off, size_t n,
                     char err[PROTO_ERR_MAX]) {
  struct stat st;
  if (fstat(r->fd, &st) != 0)
    return ERR("shared memory region '%s': cannot stat '%s': %s", r->name,
               r->key, strerror(errno));
  if ((uint64_t)st.st_size < r->offset + off + n)
    return shm_shrunk(r, "is too short for the output", err);
  return 0;
}

int shm_region_write(struct shm_region *r, uint64_t off, const void *src,
                     size_t n, char err[PROTO_ERR_MAX]) {
  const char *p = src;
  off_t at = (off_t)(r->offset + off);
  int rc = shm_region_check(r, off, n, err);
  while (rc == 0 && n > 0) {
    ssize_t put = pwrite(r->fd, p, n < (size_t)SSIZE_MAX ? n : SSIZE_MAX,
                         at);
    if (put < 0 && errno == EINTR)
      continue;
    if (put <= 0)
      return ERR("shared memory region '%s': writing '%s' failed: %s",
                 r->name, r->key, put < 0 ? strerror(errno) : "no progress");
    p += put;
    at += put;
    n -= (size_t)put;
  }
  return rc;
}

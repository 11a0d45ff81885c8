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
 *   it.  Opening and mapping the object happen outside it (a register
 *   checks the name and the limits before and again after).
 * - A region's name, key, offset, byte_size, fd and map never change
 *   between its registration and its end, so a thread holding the region
 *   reads them, copies to and from map and calls fstat on fd, without the
 *   lock.  A region ends (unmapped, fd closed, memory freed) only when it
 *   is unregistered and unheld, so never under a holder.
 * - The bytes behind map are the client's and change under attnd at any
 *   time, and vanish when the client truncates the object (SIGBUS).  They
 *   are touched only inside a guard that turns that SIGBUS into an error
 *   (fault.h): copied (fault_copy_from / fault_copy_to), or read in place
 *   by shm_region_run's function and, later, by the core under the
 *   computing thread's own fault_run.  Nothing read out of the mapping
 *   decides where attnd reads or writes: integer inputs are checked, and
 *   used, in the copy the caller owns; float inputs read in place can
 *   only change the numbers of their own request's answer.
 * - fd stays open for shm_region_check's fstat: the one cheap and honest
 *   way to know the object's size now, so that a request checks every
 *   output's place before writing any.
 */
#include "server/shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/mem.h"
#include "server/shm/fault.h"

#define ERR(...) (snprintf(err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

struct shm_region {
  char *name, *key;         /* in the same allocation as the region */
  uint64_t offset, byte_size;
  int fd;                   /* for fstat (shm_region_check) */
  unsigned char *map;       /* [offset, offset + byte_size) of the object */
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
  munmap(r->map, (size_t)r->byte_size);
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
 * Triton's order and words (which name the key, or the region), then maps
 * those bytes.  Returns the descriptor and sets *map, or returns -1 with
 * the message in err. */
static int shm_open_object(const char *name, const char *key,
                           uint64_t offset, uint64_t byte_size,
                           unsigned char **map, char *err) {
  void *m;
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
  /* Read-write: inputs are read and outputs written through the one
   * mapping.  MAP_SHARED: what attnd writes is the client's to read. */
  m = byte_size > SIZE_MAX ? MAP_FAILED
      : mmap(NULL, (size_t)byte_size, PROT_READ | PROT_WRITE, MAP_SHARED,
             fd, (off_t)offset);
  if (m == MAP_FAILED) {
    (void)ERR("failed to register shared memory region '%s': unable to "
        "process address space: %s", name,
        strerror(byte_size > SIZE_MAX ? ENOMEM : errno));
    goto err;
  }
  *map = m;
  return fd;
err:
  close(fd);
  return -1;
}

static struct shm_region *shm_region_new(const char *name, const char *key,
                                         uint64_t offset,
                                         uint64_t byte_size, int fd,
                                         unsigned char *map) {
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
  r->map = map;
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
  unsigned char *map;
  size_t at;
  int fd, rc;
  if ((rc = shm_admit_locked(reg, name, byte_size, &at, err)))
    return rc;
  /* Before the first mapping: a region is never copied unguarded. */
  if (fault_init() != 0) {
    (void)ERR("failed to register shared memory region '%s': unable to "
        "process address space: cannot install a SIGBUS handler", name);
    return ATTND_EINTERNAL;
  }
  if ((fd = shm_open_object(name, key, offset, byte_size, &map, err)) < 0)
    return ATTND_EINVAL;
  if (!(r = shm_region_new(name, key, offset, byte_size, fd, map))) {
    munmap(map, (size_t)byte_size);
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

/* The message for a guarded copy of [off, off + n) that faulted: the
 * object was shortened under it, or (still long enough now) the kernel
 * could not give it a page.  Only on that error path does it cost an
 * fstat. */
static int shm_faulted(const struct shm_region *r, uint64_t off, size_t n,
                       const char *shrunk, const char *verb, char *err) {
  struct stat st;
  if (fstat(r->fd, &st) == 0 &&
      (uint64_t)st.st_size >= r->offset + off + n)
    return ERR("shared memory region '%s': %s '%s' failed: a page of it "
               "faulted though the object still holds it (its file system "
               "full?)", r->name, verb, r->key);
  return shm_shrunk(r, shrunk, err);
}

int shm_region_read(struct shm_region *r, uint64_t off, void *dst,
                    size_t n, char err[PROTO_ERR_MAX]) {
  if (fault_copy_from(dst, r->map + off, n) != 0)
    return shm_faulted(r, off, n, "ends before the data the request names",
                       "reading", err);
  return 0;
}

struct shm_run {
  int (*fn)(const void *at, void *arg);
  const void *at;
  void *arg;
};

static int shm_run_one(void *arg) {
  struct shm_run *s = arg;
  return s->fn(s->at, s->arg);
}

int shm_region_run(struct shm_region *r, uint64_t off, size_t n,
                   int (*fn)(const void *at, void *arg), void *arg,
                   char err[PROTO_ERR_MAX]) {
  struct shm_run s = {fn, r->map + off, arg};
  struct fault_range range = {s.at, n};
  if (fault_run(&range, 1, shm_run_one, &s) == ATTND_EINVAL)
    return shm_faulted(r, off, n, "ends before the data the request names",
                       "reading", err);
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
  if (fault_copy_to(r->map + off, src, n) != 0)
    return shm_faulted(r, off, n, "is too short for the output", "writing",
                       err);
  return 0;
}

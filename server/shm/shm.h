/* shm.h - the registry of client shared memory regions (Triton's system
 * shared memory extension).
 *
 * A client on the same host creates a POSIX shared memory object and
 * registers part of it as a named region; inference requests then read
 * inputs from, and write outputs to, regions by name.  The registry maps
 * exactly the registered bytes of each object (MAP_SHARED, read-write)
 * and keeps its descriptor (from shm_open) for fstat.  Every access to a
 * mapping is a memcpy guarded against SIGBUS (fault.h), so an object the
 * client truncates or removes after registering it costs the request
 * that touches it an error, never the process a SIGBUS.
 *
 * What attnd copies out of a region is what it checks and computes with:
 * the client may write the region at any time, so a copy may hold any
 * mix of old and new bytes, and callers validate their copy, never the
 * mapping (a client cannot slip a NaN past the check that way).
 *
 * Lifetime, as Triton's: a request holds each region it uses
 * (shm_acquire .. shm_release).  Unregistering a region that requests
 * hold only marks it: it stays in the status, keeps its name (registering
 * the name again fails) and may still be acquired; its descriptor is
 * unmapped and closed when the last hold ends.  shm_free unmaps and
 * closes everything.
 *
 * Errors: 0, or ATTND_EINVAL / ATTND_ENOTFOUND / ATTND_ENOMEM /
 * ATTND_EINTERNAL with a message (Triton's wording, attnd's status) in
 * err where one is taken.
 *
 * Threads: every function may be called from any thread (HTTP threads
 * register, acquire and release; workers write outputs), except shm_new
 * and shm_free (the controlling thread, before and after the others).
 */
#ifndef ATTND_SHM_H
#define ATTND_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct shm_registry;
struct shm_region;

/* An empty registry that takes at most max_regions regions whose byte
 * sizes add up to at most max_bytes.  NULL when out of memory. */
struct shm_registry *shm_new(size_t max_regions, uint64_t max_bytes);

/* Unmaps and closes every region and frees the registry; NULL is fine.
 * No region may be held any longer, and no other call may run. */
void shm_free(struct shm_registry *reg);

/* Registers bytes [offset, offset + byte_size) of the object key
 * (shm_open(key, O_RDWR)) as region name, and maps them.  ATTND_EINVAL
 * when the name is taken, a limit would be passed, the object cannot be
 * opened, is not a regular object, or is smaller than offset +
 * byte_size, when offset is not a multiple of the page size or byte_size
 * is 0 (mmap refuses those), or when mmap fails ("unable to process
 * address space: <strerror>", as Triton).  ATTND_EINTERNAL when the
 * SIGBUS handler could not be installed (fault_init). */
int shm_register(struct shm_registry *reg, const char *name, const char *key,
                 uint64_t offset, uint64_t byte_size,
                 char err[PROTO_ERR_MAX]);

/* Unregisters region name, or every region when name is NULL; an unknown
 * name is no error (Triton answers 200).  See the top for held regions. */
void shm_unregister(struct shm_registry *reg, const char *name);

/* The status body of region name (a one-element array; ATTND_ENOTFOUND
 * with Triton's message when unknown), or of every region, sorted by
 * name, when name is NULL.  *body is malloc'd (free()). */
int shm_status(struct shm_registry *reg, const char *name, char **body,
               size_t *len, char err[PROTO_ERR_MAX]);

/* Holds region name for a request; NULL when no region has that name. */
struct shm_region *shm_acquire(struct shm_registry *reg, const char *name);

/* Ends a hold of shm_acquire; unmaps and closes the region when it was
 * unregistered and this was the last hold. */
void shm_release(struct shm_region *r);

/* The registered byte size of a held region. */
uint64_t shm_region_size(const struct shm_region *r);

/* Copies n bytes at offset off of held region r (off + n within its byte
 * size) into dst, with a guarded memcpy from the mapping.  ATTND_EINVAL,
 * with a message naming the region and its key, when a page of them is
 * gone (the object truncated after registration); dst then holds any
 * part of the bytes.  Bytes past the object's end but on the page that
 * holds its end read as what that page holds (zeros), as through any
 * mapping: no error, and no different from bytes the client wrote. */
int shm_region_read(struct shm_region *r, uint64_t off, void *dst,
                    size_t n, char err[PROTO_ERR_MAX]);

/* Runs fn(at, arg) where at is offset off of held region r in its
 * mapping (off + n within its byte size), with a fault in [at, at + n)
 * caught (fault_run): fn's value, or ATTND_EINVAL with shm_region_read's
 * message.  For reading an input in place; at stays valid while r is
 * held, and whoever reads it later does so under its own fault_run. */
int shm_region_run(struct shm_region *r, uint64_t off, size_t n,
                   int (*fn)(const void *at, void *arg), void *arg,
                   char err[PROTO_ERR_MAX]);

/* 0 when the object behind held region r still holds n bytes at off
 * (fstat), else ATTND_EINVAL with a message: what a caller checks for
 * every output before its first shm_region_write, so that it writes all
 * its outputs or none. */
int shm_region_check(struct shm_region *r, uint64_t off, size_t n,
                     char err[PROTO_ERR_MAX]);

/* Writes n bytes from src at offset off of held region r, with a guarded
 * memcpy into the mapping; it does not check the object's size first
 * (shm_region_check does).  ATTND_EINVAL with a message when a page of
 * them is gone (the object truncated since the check): the bytes before
 * that page may have been written, none past it, and the object keeps
 * the size the client gave it. */
int shm_region_write(struct shm_region *r, uint64_t off, const void *src,
                     size_t n, char err[PROTO_ERR_MAX]);

/* Regions registered (held and unregistered ones included). */
size_t shm_count(struct shm_registry *reg);

#endif /* ATTND_SHM_H */

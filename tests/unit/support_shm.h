/* support_shm.h - POSIX shared memory objects for the unit tests of the
 * shared memory registry (test_shm*.c).
 *
 * make_object(size) creates object /attnd-test-<pid>-<n> of size bytes,
 * byte i = i * 7, and returns its key (at most 8 a test); unlink_objects()
 * unlinks every object made so far and forgets them; forget_objects()
 * forgets them without unlinking (for a test that unlinked them itself).
 * reg_rc(reg, name, key, off, size, err) is shm_register's code. */
#ifndef ATTND_TESTS_SUPPORT_SHM_H
#define ATTND_TESTS_SUPPORT_SHM_H

#include <stdint.h>

#include "server/shm/shm.h"

const char *make_object(size_t size);
void unlink_objects(void);
void forget_objects(void);
int reg_rc(struct shm_registry *reg, const char *name, const char *key,
           uint64_t off, uint64_t size, char *err);

#endif

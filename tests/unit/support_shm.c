/* support_shm.c - see support_shm.h. */
#include "support_shm.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* The object keys a test made, unlinked at its end. */
static char keys[8][64];
static int n_keys;

const char *make_object(size_t size) {
  char *key = keys[n_keys];
  snprintf(key, sizeof keys[0], "/attnd-test-%d-%d", (int)getpid(), n_keys);
  n_keys++;
  int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
  for (size_t i = 0; i < size; i++) {
    unsigned char c = (unsigned char)(i * 7);
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)i), 1);
  }
  close(fd);
  return key;
}

void unlink_objects(void) {
  for (int i = 0; i < n_keys; i++)
    shm_unlink(keys[i]);
  n_keys = 0;
}

void forget_objects(void) { n_keys = 0; }

int reg_rc(struct shm_registry *reg, const char *name, const char *key,
           uint64_t off, uint64_t size, char *err) {
  return shm_register(reg, name, key, off, size, err);
}

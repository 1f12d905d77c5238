// libreclaim-faults.so: preloaded into a test program, it fails the Nth call
// (or, persistently, the Nth and every one after it) of a kind of call made
// while it is armed, as SQLite's OOM tests do:
//  - malloc: malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign
//    (every C and C++ allocation of the process, reclaim's and llama.cpp's);
//  - mmap: mmap (model files, ggml's and reclaim's large buffers, arenas);
//  - open: open, openat, fopen (and their 64-bit names);
//  - read: read, pread, fread.
// The program arms it around the operation under test through the two
// functions at the end, found with dlsym so that it also runs without it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

enum { F_MALLOC = 1, F_MMAP = 2, F_OPEN = 4, F_READ = 8 };

static _Atomic int g_kinds;       // armed kinds; 0: disarmed
static _Atomic long g_nth;        // the call to fail
static _Atomic int g_persistent;  // and every one after it
static _Atomic long g_calls;      // calls of the armed kinds since arming
static _Atomic long g_failed;     // failures injected since arming

static int should_fail(int kind) {
  if (!(atomic_load_explicit(&g_kinds, memory_order_relaxed) & kind)) return 0;
  const long n = atomic_fetch_add(&g_calls, 1) + 1;
  const long nth = atomic_load(&g_nth);
  if (n == nth || (atomic_load(&g_persistent) && n > nth)) {
    atomic_fetch_add(&g_failed, 1);
    return 1;
  }
  return 0;
}

// glibc's own allocator entry points: no dlsym (which allocates) needed.
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  if (should_fail(F_MALLOC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_malloc(n);
}

void* calloc(size_t a, size_t b) {
  if (should_fail(F_MALLOC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_calloc(a, b);
}

void* realloc(void* p, size_t n) {
  if (n != 0 && should_fail(F_MALLOC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_realloc(p, n);
}

void* memalign(size_t align, size_t n) {
  if (should_fail(F_MALLOC)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_memalign(align, n);
}

void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void** out, size_t align, size_t n) {
  if (should_fail(F_MALLOC)) return ENOMEM;
  void* p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

#define REAL(ret, name, ...)                                        \
  static ret (*real_##name)(__VA_ARGS__);                           \
  static ret (*get_##name(void))(__VA_ARGS__) {                     \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name);         \
    return real_##name;                                             \
  }

REAL(void*, mmap, void*, size_t, int, int, int, off_t)
REAL(int, open, const char*, int, ...)
REAL(int, openat, int, const char*, int, ...)
REAL(FILE*, fopen, const char*, const char*)
REAL(ssize_t, read, int, void*, size_t)
REAL(ssize_t, pread, int, void*, size_t, off_t)
REAL(size_t, fread, void*, size_t, size_t, FILE*)

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (should_fail(F_MMAP)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return get_mmap()(addr, len, prot, flags, fd, off);
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) { return mmap(addr, len, prot, flags, fd, off); }

// The optional third argument of open(2), read in the caller's own frame.
#define TAKE_MODE(flags, mode)                                   \
  mode_t mode = 0;                                               \
  if ((flags) & (O_CREAT | O_TMPFILE)) {                         \
    va_list ap;                                                  \
    va_start(ap, flags);                                         \
    mode = va_arg(ap, mode_t);                                   \
    va_end(ap);                                                  \
  }

int open(const char* path, int flags, ...) {
  TAKE_MODE(flags, mode)
  if (should_fail(F_OPEN)) {
    errno = EMFILE;
    return -1;
  }
  return get_open()(path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  TAKE_MODE(flags, mode)
  return open(path, flags, mode);
}

int openat(int dir, const char* path, int flags, ...) {
  TAKE_MODE(flags, mode)
  if (should_fail(F_OPEN)) {
    errno = EMFILE;
    return -1;
  }
  return get_openat()(dir, path, flags, mode);
}
int openat64(int dir, const char* path, int flags, ...) {
  TAKE_MODE(flags, mode)
  return openat(dir, path, flags, mode);
}

FILE* fopen(const char* path, const char* mode) {
  if (should_fail(F_OPEN)) {
    errno = EMFILE;
    return NULL;
  }
  return get_fopen()(path, mode);
}
FILE* fopen64(const char* path, const char* mode) { return fopen(path, mode); }

ssize_t read(int fd, void* buf, size_t n) {
  if (should_fail(F_READ)) {
    errno = EIO;
    return -1;
  }
  return get_read()(fd, buf, n);
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  if (should_fail(F_READ)) {
    errno = EIO;
    return -1;
  }
  return get_pread()(fd, buf, n, off);
}
ssize_t pread64(int fd, void* buf, size_t n, off_t off) { return pread(fd, buf, n, off); }

size_t fread(void* buf, size_t size, size_t n, FILE* f) {
  if (should_fail(F_READ)) {
    errno = EIO;
    return 0;
  }
  return get_fread()(buf, size, n, f);
}

// The control: arm with a mask of kinds (1 malloc, 2 mmap, 4 open, 8 read).
void reclaim_fault_arm(int kinds, long nth, int persistent) {
  atomic_store(&g_kinds, 0);
  atomic_store(&g_calls, 0);
  atomic_store(&g_failed, 0);
  atomic_store(&g_nth, nth);
  atomic_store(&g_persistent, persistent);
  atomic_store(&g_kinds, kinds);
}

// Disarms; returns the calls seen and sets *failed to the failures injected.
long reclaim_fault_disarm(long* failed) {
  atomic_store(&g_kinds, 0);
  if (failed) *failed = atomic_load(&g_failed);
  return atomic_load(&g_calls);
}

/* One measurement for tools/bench/dir_workers.py: what handing a write to another thread costs when neither side
 * runs Python. A thread of this library waits on an eventfd, makes the pwrite it is given and rings a second
 * eventfd; the caller (the bench's event loop, through ctypes, so with the GIL released) rings the first and waits
 * on the second. Same file, same bytes and same rate as the DirWorker it is set beside. Not used by kjbod. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int to_thread = -1, to_caller = -1;
static const void *job_buf;
static size_t job_len;
static off_t job_at;
static int job_fd;
static ssize_t job_result;

static void *writer(void *unused) {
    (void)unused;
    for (;;) {
        uint64_t n;
        if (read(to_thread, &n, sizeof n) != sizeof n)
            continue;
        ssize_t r = pwrite(job_fd, job_buf, job_len, job_at);
        job_result = r < 0 ? -errno : r;
        n = 1;
        while (write(to_caller, &n, sizeof n) < 0 && errno == EINTR)
            ;
    }
    return NULL;
}

/* 0, or -errno. Starts the one writer thread. */
int native_handoff_start(void) {
    pthread_t t;
    to_thread = eventfd(0, EFD_CLOEXEC);
    to_caller = eventfd(0, EFD_CLOEXEC);
    if (to_thread < 0 || to_caller < 0)
        return -errno;
    int rc = pthread_create(&t, NULL, writer, NULL);
    if (rc)
        return -rc;
    pthread_detach(t);
    return 0;
}

/* The writer thread's pwrite(fd, buf, len, at): bytes written, or -errno. */
long native_handoff_pwrite(int fd, const void *buf, size_t len, long at) {
    uint64_t n = 1;
    job_fd = fd;
    job_buf = buf;
    job_len = len;
    job_at = at;
    if (write(to_thread, &n, sizeof n) < 0)
        return -errno;
    struct pollfd p = {.fd = to_caller, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    if (read(to_caller, &n, sizeof n) < 0)
        return -errno;
    return job_result;
}

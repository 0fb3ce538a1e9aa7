/*
 * kjbod load generator: keeps DEPTH requests in flight on each of CONNS connections to HOST:PORT for SECONDS,
 * sending a Kafka request frame (read as hex from argv) and counting size-prefixed response frames.  With several
 * frames, connection i sends frame i mod N (as N clients each sending their own request, e.g. broker heartbeats).
 * Single-threaded epoll, so the client costs little CPU next to the server under test.
 *
 * usage: loadgen HOST PORT CONNS DEPTH SECONDS HEXFRAME [HEXFRAME ...]
 * prints: responses=<n> seconds=<s> rps=<r> errors=<e>
 *
 * Idempotent producers (LOADGEN_BATCH_AT=<offset of a record batch in every frame>): connection i is producer
 * id (the frame's + i), epoch as in the frame, and each request it sends carries the next sequence numbers (from
 * 0, advanced by the batch's record count), the batch's CRC-32C recomputed.  LOADGEN_ERROR_AT=<offset in a
 * response, after its size, of an int16 error code>: a response with a non-zero code there counts as an error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    int inflight;
    unsigned char *burst; /* this connection's own copies of its frame (idempotent mode) */
    int32_t next_seq;
    size_t have;     /* bytes buffered of the current response */
    uint32_t need;   /* size of the current response body, 0 = reading the size */
    unsigned char buf[1 << 16];
} conn_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static uint32_t crc_table[256];

static void crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const unsigned char *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; p++, n--) c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32 ^ 0xFFFFFFFFu;
}

static uint32_t crc32c(const unsigned char *p, size_t n) {
    if (__builtin_cpu_supports("sse4.2")) return crc32c_hw(p, n);
    uint32_t c = 0xFFFFFFFFu;
    for (; n; p++, n--) c = crc_table[(c ^ *p) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The next `count` frames of an idempotent connection: its sequence numbers, its CRCs. Batch layout: length at
 * 8, CRC at 17 (of everything from 21), producer id at 43, base sequence at 53, record count at 57. */
static void stamp(conn_t *c, size_t flen, long batch_at, int count) {
    for (int d = 0; d < count; d++) {
        unsigned char *b = c->burst + flen * (size_t)d + batch_at;
        size_t end = 12 + get32(b + 8);
        put32(b + 53, (uint32_t)c->next_seq);
        c->next_seq = (int32_t)(((uint32_t)c->next_seq + get32(b + 57)) & 0x7FFFFFFFu);
        put32(b + 17, crc32c(b + 21, end - 21));
    }
}

static int send_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s HOST PORT CONNS DEPTH SECONDS HEXFRAME [HEXFRAME ...]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), conns = atoi(argv[3]), depth = atoi(argv[4]);
    double seconds = atof(argv[5]);
    int nframes = argc - 6;
    if (conns <= 0 || depth <= 0) return 2;
    unsigned char **bursts = calloc((size_t)nframes, sizeof(unsigned char *));
    size_t *flens = calloc((size_t)nframes, sizeof(size_t));
    for (int f = 0; f < nframes; f++) {
        const char *hex = argv[6 + f];
        size_t hlen = strlen(hex);
        if (hlen % 2) return 2;
        size_t flen = hlen / 2;
        unsigned char *frame = malloc(flen);
        for (size_t i = 0; i < flen; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) return 2;
            frame[i] = (unsigned char)(hi * 16 + lo);
        }
        bursts[f] = malloc(flen * (size_t)depth);
        for (int d = 0; d < depth; d++) memcpy(bursts[f] + flen * (size_t)d, frame, flen);
        flens[f] = flen;
        free(frame);
    }

    const char *batch_env = getenv("LOADGEN_BATCH_AT"), *error_env = getenv("LOADGEN_ERROR_AT");
    long batch_at = batch_env ? atol(batch_env) : -1, error_at = error_env ? atol(error_env) : -1;
    crc32c_init();
    int ep = epoll_create1(0);
    conn_t *cs = calloc((size_t)conns, sizeof(conn_t));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &addr.sin_addr);
    for (int i = 0; i < conns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
            perror("connect");
            return 1;
        }
        cs[i].fd = fd;
        cs[i].burst = bursts[i % nframes];
        if (batch_at >= 0) { /* producer id: the frame's + i, in each copy of the frame */
            size_t flen = flens[i % nframes];
            if (batch_at + 61 > (long)flen) return 2;
            cs[i].burst = malloc(flen * (size_t)depth);
            memcpy(cs[i].burst, bursts[i % nframes], flen * (size_t)depth);
            for (int d = 0; d < depth; d++) {
                unsigned char *b = cs[i].burst + flen * (size_t)d + batch_at;
                uint64_t pid = ((uint64_t)get32(b + 43) << 32 | get32(b + 47)) + (uint64_t)i;
                put32(b + 43, (uint32_t)(pid >> 32));
                put32(b + 47, (uint32_t)pid);
            }
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    long responses = 0, errors = 0;
    double start = now(), end = start + seconds;
    for (int i = 0; i < conns; i++) {
        if (batch_at >= 0) stamp(&cs[i], flens[i % nframes], batch_at, depth);
        if (send_all(cs[i].fd, cs[i].burst, flens[i % nframes] * (size_t)depth) < 0) errors++;
        cs[i].inflight = depth;
    }
    struct epoll_event evs[256];
    int stopping = 0;
    for (;;) {
        double t = now();
        if (!stopping && t >= end) stopping = 1;
        if (stopping) {
            int any = 0;
            for (int i = 0; i < conns; i++) any |= cs[i].inflight > 0;
            if (!any || t > end + 5) break;
        }
        int n = epoll_wait(ep, evs, 256, 100);
        for (int k = 0; k < n; k++) {
            uint32_t ci = evs[k].data.u32;
            conn_t *c = &cs[ci];
            ssize_t r = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                errors++;
                c->inflight = 0;
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                continue;
            }
            c->have += (size_t)r;
            size_t off = 0;
            int done = 0;
            for (;;) {
                if (c->have - off < 4) break;
                uint32_t size = ((uint32_t)c->buf[off] << 24) | ((uint32_t)c->buf[off + 1] << 16) |
                                ((uint32_t)c->buf[off + 2] << 8) | c->buf[off + 3];
                if (size > sizeof c->buf - 4) { errors++; break; }
                if (c->have - off < 4 + size) break;
                if (error_at >= 0 && (size < (uint32_t)error_at + 2 || c->buf[off + 4 + error_at] ||
                                      c->buf[off + 5 + error_at]))
                    errors++;
                off += 4 + size;
                done++;
            }
            memmove(c->buf, c->buf + off, c->have - off);
            c->have -= off;
            responses += done;
            c->inflight -= done;
            if (!stopping && done > 0) {
                /* refill what came back, keeping DEPTH in flight */
                size_t flen = flens[ci % (uint32_t)nframes];
                if (batch_at >= 0) stamp(c, flen, batch_at, done);
                if (send_all(c->fd, c->burst, flen * (size_t)done) < 0) errors++;
                c->inflight += done;
            }
        }
    }
    double elapsed = now() - start;
    printf("responses=%ld seconds=%.3f rps=%.0f errors=%ld\n", responses, elapsed, responses / elapsed, errors);
    return 0;
}

/* A log dir's append writer: one thread of C code that makes the writev of an append the event loop hands it.
 *
 * Why (kjbod.storage.log's append_native, kjbod.storage.workers' native_writer): a hand-off to a DirWorker costs
 * its Python and the GIL on top of the two thread wake-ups. This thread runs no Python for a write answered in
 * time, so the event loop can hand it an append's bytes and wait a short while for the answer with the GIL
 * released, doing the append's bookkeeping itself.
 *
 * One write at a time. submit() takes the buffers (holding their Py_buffer views until the answer is in) and
 * wait() waits for the answer up to a timeout. A write given an ``on_late`` callable whose wait ran out is answered
 * by the thread itself: once the write is back it takes the GIL and calls on_late with the bytes written or the
 * OSError, so what waits on that answer (a partition's lock) depends on neither the event loop nor the dir's
 * worker. A write that fails for lack of space is first cut back to ``truncate_to``, as an append's partial write
 * is. A writer whose thread is stuck in the kernel (a hung disk) is never used again; the process's exit ends the
 * thread. hold() is a test seam: while held, the thread takes a submitted write but does not start it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

enum { IDLE = 0, QUEUED = 1, DONE = 2 };

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t job;  /* the thread waits for a write (or quit, or the hold lifted) */
    pthread_cond_t done; /* the caller waits for the answer (and Writer_init for the thread's id) */
    int state;
    int quit;
    int hold;
    long tid;           /* the thread's id (to place it on a CPU), set as it starts */
    int fd;
    struct iovec *iov;
    int niov;
    off_t truncate_to;  /* where a write that runs out of space is cut back to (-1: not) */
    Py_buffer *views;   /* held from submit() until the answer is in */
    Py_ssize_t nviews;
    PyObject *on_late;  /* a reference while a write is in flight, or NULL */
    int late;           /* a wait ran out: the thread answers on_late itself */
    long long written;
    int err;
} Shared;

typedef struct {
    PyObject_HEAD
    Shared *s;
} Writer;

/* With the GIL. */
static void release_views(Shared *s) {
    for (Py_ssize_t i = 0; i < s->nviews; i++)
        PyBuffer_Release(&s->views[i]);
    free(s->views);
    s->views = NULL;
    s->nviews = 0;
}

static void free_shared(Shared *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->job);
    pthread_cond_destroy(&s->done);
    free(s->iov);
    free(s);
}

/* Write every iovec, continuing after short writes (a signal, a nearly full disk): bytes written; *err the errno
 * that stopped it, or 0. */
static long long write_all(int fd, struct iovec *iov, int niov, int *err) {
    long long total = 0;
    *err = 0;
    while (niov > 0) {
        int n = niov > IOV_MAX ? IOV_MAX : niov;
        ssize_t r = writev(fd, iov, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            return total;
        }
        total += r;
        size_t left = (size_t)r;
        while (niov > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0 && left) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return total;
}

/* The OSError for errno ``err``, as an object (with the GIL; NULL if even that failed). */
static PyObject *os_error(int err) {
    PyObject *args = Py_BuildValue("(is)", err, strerror(err));
    if (args == NULL)
        return NULL;
    PyObject *e = PyObject_Call(PyExc_OSError, args, NULL);
    Py_DECREF(args);
    return e;
}

/* On the writer thread: a late write's answer to on_late, with the GIL taken for it. on_late must not raise; if
 * it does, the error is printed and dropped. */
static void answer_late(Shared *s, PyObject *on_late, long long written, int err) {
    PyGILState_STATE g = PyGILState_Ensure();
    release_views(s);
    PyObject *outcome = err ? os_error(err) : PyLong_FromLongLong(written);
    if (outcome != NULL) {
        PyObject *r = PyObject_CallOneArg(on_late, outcome);
        if (r == NULL)
            PyErr_WriteUnraisable(on_late);
        Py_XDECREF(r);
        Py_DECREF(outcome);
    } else {
        PyErr_WriteUnraisable(on_late);
    }
    Py_DECREF(on_late);
    PyGILState_Release(g);
}

static void *writer_thread(void *arg) {
    Shared *s = arg;
    pthread_mutex_lock(&s->mu);
    s->tid = (long)syscall(SYS_gettid);
    pthread_cond_broadcast(&s->done);
    for (;;) {
        while (!s->quit && (s->state != QUEUED || s->hold))
            pthread_cond_wait(&s->job, &s->mu);
        if (s->state != QUEUED)
            break; /* quit, nothing in flight */
        int fd = s->fd, niov = s->niov;
        struct iovec *iov = s->iov;
        off_t truncate_to = s->truncate_to;
        pthread_mutex_unlock(&s->mu);
        int err;
        long long written = write_all(fd, iov, niov, &err);
        if ((err == ENOSPC || err == EDQUOT) && truncate_to >= 0) {
            while (ftruncate(fd, truncate_to) < 0 && errno == EINTR) /* a partial write leaves nothing behind */
                ;
        }
        pthread_mutex_lock(&s->mu);
        if (s->late && s->on_late != NULL && !s->quit) {
            PyObject *on_late = s->on_late;
            s->on_late = NULL;
            s->late = 0;
            pthread_mutex_unlock(&s->mu);
            answer_late(s, on_late, written, err);
            pthread_mutex_lock(&s->mu);
            s->state = IDLE;
        } else {
            s->written = written;
            s->err = err;
            s->state = DONE;
            pthread_cond_signal(&s->done);
        }
        if (s->quit)
            break; /* the Writer is gone: what it held (views, on_late) stays held */
    }
    pthread_mutex_unlock(&s->mu);
    free_shared(s);
    return NULL;
}

static int Writer_init(Writer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return -1;
    if (self->s != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is already started");
        return -1;
    }
    Shared *s = calloc(1, sizeof(Shared));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->job, NULL);
    pthread_cond_init(&s->done, &attr);
    pthread_condattr_destroy(&attr);
    pthread_t t;
    pthread_attr_t tattr;
    pthread_attr_init(&tattr);
    pthread_attr_setdetachstate(&tattr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&tattr, 256 * 1024);
    int rc = pthread_create(&t, &tattr, writer_thread, s);
    pthread_attr_destroy(&tattr);
    if (rc != 0) {
        free_shared(s);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&s->mu);
    while (s->tid == 0)
        pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    Py_END_ALLOW_THREADS
    self->s = s;
    return 0;
}

static void Writer_dealloc(Writer *self) {
    Shared *s = self->s;
    if (s != NULL) {
        pthread_mutex_lock(&s->mu);
        if (s->state != QUEUED) { /* an answer never collected: nothing reads the buffers any more */
            release_views(s);
            Py_CLEAR(s->on_late);
        } /* else the thread may still read them: they stay held (a leak, only for a write that never came back) */
        s->quit = 1;
        s->hold = 0;
        pthread_cond_signal(&s->job);
        pthread_mutex_unlock(&s->mu);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Shared *started(Writer *self) {
    if (self->s == NULL)
        PyErr_SetString(PyExc_RuntimeError, "the writer is not started");
    return self->s;
}

static PyObject *Writer_submit(Writer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "buffers", "truncate_to", "on_late", NULL};
    int fd;
    PyObject *buffers;
    long long truncate_to = -1;
    PyObject *on_late = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO|LO", kwlist, &fd, &buffers, &truncate_to, &on_late))
        return NULL;
    Shared *s = started(self);
    if (s == NULL)
        return NULL;
    if (on_late != Py_None && !PyCallable_Check(on_late)) {
        PyErr_SetString(PyExc_TypeError, "on_late must be callable");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    int busy = s->state != IDLE;
    pthread_mutex_unlock(&s->mu);
    if (busy) {
        PyErr_SetString(PyExc_RuntimeError, "a write is already in flight");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT_MAX) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return NULL;
    }
    Py_buffer *views = calloc(n ? n : 1, sizeof(Py_buffer));
    struct iovec *iov = malloc((n ? n : 1) * sizeof(struct iovec));
    if (views == NULL || iov == NULL) {
        free(views);
        free(iov);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &views[i], PyBUF_SIMPLE) < 0) {
            for (Py_ssize_t j = 0; j < i; j++)
                PyBuffer_Release(&views[j]);
            free(views);
            free(iov);
            Py_DECREF(seq);
            return NULL;
        }
        iov[i].iov_base = views[i].buf;
        iov[i].iov_len = (size_t)views[i].len;
    }
    Py_DECREF(seq);
    if (on_late != Py_None)
        Py_INCREF(on_late);
    pthread_mutex_lock(&s->mu);
    free(s->iov);
    s->iov = iov;
    s->niov = (int)n;
    s->views = views;
    s->nviews = n;
    s->fd = fd;
    s->truncate_to = (off_t)truncate_to;
    s->on_late = on_late != Py_None ? on_late : NULL;
    s->late = 0;
    s->state = QUEUED;
    pthread_cond_signal(&s->job);
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static PyObject *Writer_wait(Writer *self, PyObject *args) {
    double timeout;
    if (!PyArg_ParseTuple(args, "d", &timeout))
        return NULL;
    Shared *s = started(self);
    if (s == NULL)
        return NULL;
    pthread_mutex_lock(&s->mu);
    int nothing = s->state == IDLE || s->late;
    pthread_mutex_unlock(&s->mu);
    if (nothing) {
        PyErr_SetString(PyExc_RuntimeError, "no write in flight to wait for");
        return NULL;
    }
    int got;
    long long written = 0;
    int err = 0;
    PyObject *unused = NULL;
    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline;
    if (timeout >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        long long ns = deadline.tv_nsec + (long long)(timeout * 1e9);
        deadline.tv_sec += ns / 1000000000LL;
        deadline.tv_nsec = ns % 1000000000LL;
    }
    pthread_mutex_lock(&s->mu);
    while (s->state != DONE) {
        if (timeout < 0)
            pthread_cond_wait(&s->done, &s->mu);
        else if (pthread_cond_timedwait(&s->done, &s->mu, &deadline) == ETIMEDOUT)
            break;
    }
    got = s->state == DONE;
    if (got) {
        written = s->written;
        err = s->err;
        unused = s->on_late; /* answered here: on_late is not called */
        s->on_late = NULL;
        s->state = IDLE;
    } else if (s->on_late != NULL) {
        s->late = 1;
    }
    pthread_mutex_unlock(&s->mu);
    Py_END_ALLOW_THREADS
    if (!got)
        Py_RETURN_NONE;
    Py_XDECREF(unused);
    release_views(s);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(written);
}

static PyObject *Writer_hold(Writer *self, PyObject *args) {
    int hold;
    if (!PyArg_ParseTuple(args, "p", &hold))
        return NULL;
    Shared *s = started(self);
    if (s == NULL)
        return NULL;
    pthread_mutex_lock(&s->mu);
    s->hold = hold;
    pthread_cond_signal(&s->job);
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static PyObject *Writer_in_flight(Writer *self, void *closure) {
    (void)closure;
    Shared *s = self->s;
    if (s == NULL)
        Py_RETURN_FALSE;
    pthread_mutex_lock(&s->mu);
    int busy = s->state != IDLE;
    pthread_mutex_unlock(&s->mu);
    return PyBool_FromLong(busy);
}

static PyObject *Writer_native_id(Writer *self, void *closure) {
    (void)closure;
    if (self->s == NULL)
        Py_RETURN_NONE;
    return PyLong_FromLong(self->s->tid);
}

static PyMethodDef Writer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Writer_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(fd, buffers, truncate_to=-1, on_late=None): the thread writes the buffers to fd at its position (one "
     "write in flight at a time); a write that runs out of space is cut back to truncate_to; with on_late, a write "
     "whose wait ran out is answered by on_late(bytes written, or the OSError), called on the writer's thread."},
    {"wait", (PyCFunction)Writer_wait, METH_VARARGS,
     "wait(timeout_s): bytes written, or None if not done within timeout_s (negative: no limit; a write with "
     "on_late is then answered there, and cannot be waited for again); OSError if the write failed. The GIL is "
     "released while it waits."},
    {"hold", (PyCFunction)Writer_hold, METH_VARARGS,
     "hold(flag): tests only; while held, a submitted write is not started."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Writer_getset[] = {
    {"in_flight", (getter)Writer_in_flight, NULL, "a write was submitted and its answer is not in", NULL},
    {"native_id", (getter)Writer_native_id, NULL, "the writer thread's id (as threading.get_native_id)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kjbod.storage._nativewrite.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A log dir's append writer thread (see the module's comment).",
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
    .tp_init = (initproc)Writer_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nativewrite", "A log dir's append writer thread, in C.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nativewrite(void) {
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

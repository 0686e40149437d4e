/* trace.c: the Chrome Trace Event JSON writer, one event per line,
 * streamed through a large stdio buffer into "<path>.tmp-XXXXXX" and
 * renamed onto <path> when closed.  A <path> ending in ".gz" is written
 * gzip-compressed: the stdio stream is a glibc cookie stream whose writes
 * go through zlib's deflate to the file, so nothing is held in memory
 * beyond the buffers.  A <path> that exists and is not a
 * regular file (/dev/null, /dev/full, a FIFO) is written in place instead:
 * renaming onto it would replace the device or pipe with a regular file.
 *
 * Invariant: the file on disk is always the prefix of one valid document
 * '{"traceEvents":[' event (',\n' event)* ... and only ps_trace_close()
 * appends the tail and gives it its final name, so <path> either does not
 * exist (or keeps its old content) or holds a complete trace.  The text
 * written depends only on the calls made, so equal calls give equal bytes. */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define TRACE_BUFFER_BYTES (1 << 20)
/* zlib level 1: gzip -1 takes 0.5 s on the default experiment's 37 MB
 * trace here, for a file 12.6x smaller; -6 takes 1.15 s for 17.8x, more
 * than the run itself. */
#define TRACE_GZIP_LEVEL 1
#define GZ_OUT_BYTES (1 << 16)

struct PsTrace {
  FILE *f;
  int fd;         /* under f; for a gzip trace, closed by f's cookie */
  gboolean gzip;
  char *path;     /* final name */
  char *tmp_path; /* what is being written, or NULL when path is written in place */
  char *buf;      /* stdio's buffer, freed after fclose */
  uint64_t events;
  int write_errno; /* first failure while streaming, 0 if none */
  int slot;        /* in tmp_slots, or -1 */
};

/* Temporary files of traces being written, for ps_trace_remove_unfinished
 * (a signal handler): fixed slots, so the handler reads no memory that may
 * be freed under it; a slot is marked free before its path changes. */
#define TMP_SLOTS 8
#define TMP_PATH_MAX 4096
static char tmp_slots[TMP_SLOTS][TMP_PATH_MAX];
static volatile sig_atomic_t tmp_used[TMP_SLOTS];
static GMutex tmp_lock;
/* Set while a thread, its fatal signals blocked, creates a temporary file
 * and registers it: a handler running on another thread waits it out. */
static atomic_int tmp_creating;

static int tmp_register(const char *path)
{
  if (strlen(path) >= TMP_PATH_MAX)
    return -1;
  g_mutex_lock(&tmp_lock);
  int slot = -1;
  for (int i = 0; i < TMP_SLOTS && slot < 0; i++)
    if (!tmp_used[i]) {
      memcpy(tmp_slots[i], path, strlen(path) + 1);
      tmp_used[i] = 1;
      slot = i;
    }
  g_mutex_unlock(&tmp_lock);
  return slot;
}

static void tmp_unregister(int slot)
{
  if (slot >= 0)
    tmp_used[slot] = 0;
}

void ps_trace_remove_unfinished(void)
{
  while (atomic_load(&tmp_creating) > 0)
    ; /* microseconds: the creating thread cannot be stopped by this signal */
  for (int i = 0; i < TMP_SLOTS; i++)
    if (tmp_used[i])
      unlink(tmp_slots[i]);
}

/* ------------------------------------------------------- gzip stream */

/* A cookie stream's state: deflate into out, out written to fd. */
typedef struct {
  int fd;
  z_stream z;
  unsigned char out[GZ_OUT_BYTES];
} GzSink;

/* Writes all of buf to fd; -1 with errno set on failure. */
static int write_all(int fd, const unsigned char *buf, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO;
      return -1;
    }
    buf += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Deflates the pending input with `flush`, writing what comes out. */
static int gz_pump(GzSink *g, int flush)
{
  do {
    g->z.next_out = g->out;
    g->z.avail_out = sizeof g->out;
    int rc = deflate(&g->z, flush);
    if (rc == Z_STREAM_ERROR) {
      errno = EIO;
      return -1;
    }
    if (write_all(g->fd, g->out, sizeof g->out - g->z.avail_out) != 0)
      return -1;
  } while (g->z.avail_out == 0);
  return 0;
}

static ssize_t gz_write(void *cookie, const char *buf, size_t size)
{
  GzSink *g = cookie;
  g->z.next_in = (Bytef *)buf;
  g->z.avail_in = (uInt)size; /* stdio hands over at most its buffer */
  return gz_pump(g, Z_NO_FLUSH) == 0 ? (ssize_t)size : -1;
}

/* Ends the gzip member (trailer with CRC and length), syncs and closes
 * the file; -1 with errno of the first failure. */
static int gz_close(void *cookie)
{
  GzSink *g = cookie;
  int rc = gz_pump(g, Z_FINISH);
  int err = rc ? errno : 0;
  if (!rc && fsync(g->fd) != 0 && errno != EINVAL && errno != EROFS) {
    rc = -1;
    err = errno;
  }
  if (close(g->fd) != 0 && !rc) {
    rc = -1;
    err = errno;
  }
  deflateEnd(&g->z);
  g_free(g);
  errno = err;
  return rc;
}

/* A write-only stream that gzips into fd, closing fd when closed; NULL
 * (fd left open) when zlib or stdio cannot set it up. */
static FILE *gz_stream(int fd)
{
  GzSink *g = g_new0(GzSink, 1);
  g->fd = fd;
  /* windowBits 15 + 16: a gzip header and trailer, not zlib's */
  if (deflateInit2(&g->z, TRACE_GZIP_LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    g_free(g);
    errno = ENOMEM;
    return NULL;
  }
  cookie_io_functions_t io = {.write = gz_write, .close = gz_close};
  FILE *f = fopencookie(g, "w", io);
  if (!f) {
    deflateEnd(&g->z);
    g_free(g);
  }
  return f;
}

gboolean ps_trace_path_is_gzip(const char *path)
{
  g_return_val_if_fail(path != NULL, FALSE);
  return g_str_has_suffix(path, ".gz");
}

int64_t ps_trace_written_bytes(const char *path, int64_t json_bytes)
{
  g_return_val_if_fail(path != NULL, json_bytes);
  /* (PS_TRACE_GZIP_RATIO: the smallest measured, so an upper side) */
  return ps_trace_path_is_gzip(path) ? json_bytes / PS_TRACE_GZIP_RATIO : json_bytes;
}

/* ------------------------------------------------------------- writer */

/* Remembers the first write failure; stdio's error flag is sticky, so
 * checking it once per event is enough to catch any failed write. */
static void note_error(PsTrace *t)
{
  if (ferror(t->f) && t->write_errno == 0)
    t->write_errno = errno ? errno : EIO;
}

PsTrace *ps_trace_open(const char *path, GError **error)
{
  g_return_val_if_fail(path != NULL && *path != '\0', NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);

  /* a device or a pipe is written in place (a directory is left to fail
   * at the rename) */
  GStatBuf st;
  gboolean in_place =
      g_stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  char *tmp_path = NULL;
  int fd, open_errno, slot = -1;
  if (in_place) {
    fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY); /* a FIFO waits for its reader */
    open_errno = errno;
  } else {
    /* no SIGINT or SIGTERM handled between creating the temporary file and
     * registering it, here or on another thread, or the handler would
     * leave it behind */
    tmp_path = g_strdup_printf("%s.tmp-XXXXXX", path);
    sigset_t saved_mask;
    ps_fatal_signals_hold(&saved_mask);
    atomic_fetch_add(&tmp_creating, 1);
    fd = g_mkstemp_full(tmp_path, O_WRONLY | O_CLOEXEC, 0666);
    open_errno = errno;
    if (fd >= 0)
      slot = tmp_register(tmp_path);
    atomic_fetch_sub(&tmp_creating, 1);
    ps_fatal_signals_restore(&saved_mask);
  }
  if (fd < 0) {
    int err = open_errno;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot create the trace file: %s", path, g_strerror(err));
    g_free(tmp_path);
    return NULL;
  }
  gboolean gzip = ps_trace_path_is_gzip(path);
  FILE *f = gzip ? gz_stream(fd) : fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    if (tmp_path)
      g_unlink(tmp_path);
    tmp_unregister(slot);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot open the trace file for writing: %s", path, g_strerror(err));
    g_free(tmp_path);
    return NULL;
  }
  PsTrace *t = g_new0(PsTrace, 1);
  t->f = f;
  t->fd = fd;
  t->gzip = gzip;
  t->path = g_strdup(path);
  t->tmp_path = tmp_path;
  t->slot = slot;
  t->buf = g_malloc(TRACE_BUFFER_BYTES);
  setvbuf(f, t->buf, _IOFBF, TRACE_BUFFER_BYTES);
  fputs("{\"traceEvents\":[", f);
  note_error(t);
  return t;
}

/* Writes s as the body of a JSON string: quotes, backslashes and control
 * characters escaped, bytes that are not UTF-8 replaced by U+FFFD. */
static void put_escaped(PsTrace *t, const char *s)
{
  FILE *f = t->f;
  const char *p = s;
  const char *end = s + strlen(s);
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c < 0x80) {
      switch (c) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\b': fputs("\\b", f); break;
      case '\f': fputs("\\f", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (c < 0x20)
          fprintf(f, "\\u%04x", c);
        else
          putc(c, f);
      }
      p++;
      continue;
    }
    gunichar u = g_utf8_get_char_validated(p, end - p);
    if (u == (gunichar)-1 || u == (gunichar)-2) { /* invalid or cut short */
      fputs("\\ufffd", f);
      p++;
      continue;
    }
    const char *after = g_utf8_next_char(p);
    fwrite(p, 1, (size_t)(after - p), f);
    p = after;
  }
}

static void put_string(PsTrace *t, const char *s)
{
  putc('"', t->f);
  put_escaped(t, s);
  putc('"', t->f);
}

/* Picoseconds to the nearest nanosecond (halves up): the finest time
 * catapult resolves (it compares slice bounds rounded to its display
 * unit, ns at best), so every time in the file is a whole nanosecond. */
static inline int64_t ns_of(ps_time_t ps)
{
  return ps / 1000 + (ps % 1000 >= 500); /* ps + 500 could overflow */
}

/* A time as microseconds with exactly three decimals (whole ns). */
static void put_time(PsTrace *t, ps_time_t ps)
{
  int64_t ns = ns_of(ps);
  fprintf(t->f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

/* Shortest of %.15g and %.17g that reads back as the same double,
 * independent of the locale. */
static void put_double(PsTrace *t, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  int saved = errno; /* strtod clears it; a failed write before must keep its cause */
  g_ascii_formatd(buf, sizeof buf, "%.15g", v);
  if (g_ascii_strtod(buf, NULL) != v)
    g_ascii_formatd(buf, sizeof buf, "%.17g", v);
  errno = saved;
  fputs(buf, t->f);
}

/* The double a viewer reads for put_time(ps)'s text. */
static double time_as_read(ps_time_t ps)
{
  char buf[32];
  int64_t ns = ns_of(ps);
  g_snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return g_ascii_strtod(buf, NULL);
}

/* A duration as the largest double d with ts + d <= end - 8 ulp(end) in
 * double arithmetic on the values a viewer reads, so back-to-back slices
 * never overlap by a rounding error, whatever the viewer does first:
 * speedscope subtracts each thread's first timestamp before adding dur,
 * catapult divides by 1000, and either costs up to about two ulps (a
 * viewer that finds a slice ending after its successor began nests or
 * drops it).  The gap left is far below a picosecond up to 10^5 s. */
static void put_duration(PsTrace *t, ps_time_t start, ps_time_t dur)
{
  int saved = errno; /* strtod clears it; a failed write before must keep its cause */
  double s = time_as_read(start), e = time_as_read(start + dur);
  errno = saved;
  double target = e - 8 * (nextafter(e, INFINITY) - e);
  double d = target - s;
  if (d <= 0) {
    put_double(t, 0.0);
    return;
  }
  while (d > 0 && s + d > target)
    d = nextafter(d, 0);
  while (s + d < target && s + nextafter(d, INFINITY) <= target)
    d = nextafter(d, INFINITY);
  put_double(t, d);
}

/* Starts an event: the separator, then {"ph":"<ph>","pid":P */
static void begin_event(PsTrace *t, char ph, int pid)
{
  fprintf(t->f, "%s{\"ph\":\"%c\",\"pid\":%d", t->events ? ",\n" : "\n", ph, pid);
  t->events++;
}

static void end_event(PsTrace *t)
{
  putc('}', t->f);
  note_error(t);
}

static void put_metadata(PsTrace *t, int pid, const int *tid, const char *what,
                         const char *name, const int *sort_index)
{
  begin_event(t, 'M', pid);
  if (tid)
    fprintf(t->f, ",\"tid\":%d", *tid);
  fprintf(t->f, ",\"name\":\"%s\",\"args\":{", what);
  if (name) {
    fputs("\"name\":", t->f);
    put_string(t, name);
  } else {
    fprintf(t->f, "\"sort_index\":%d", *sort_index);
  }
  putc('}', t->f);
  end_event(t);
}

void ps_trace_process(PsTrace *t, int pid, const char *name, int sort_index)
{
  g_return_if_fail(t != NULL && name != NULL);
  put_metadata(t, pid, NULL, "process_name", name, NULL);
  put_metadata(t, pid, NULL, "process_sort_index", NULL, &sort_index);
}

void ps_trace_thread(PsTrace *t, int pid, int tid, const char *name, int sort_index)
{
  g_return_if_fail(t != NULL && name != NULL);
  put_metadata(t, pid, &tid, "thread_name", name, NULL);
  put_metadata(t, pid, &tid, "thread_sort_index", NULL, &sort_index);
}

void ps_trace_process_labels(PsTrace *t, int pid, const char *labels)
{
  g_return_if_fail(t != NULL && labels != NULL);
  begin_event(t, 'M', pid);
  fputs(",\"name\":\"process_labels\",\"args\":{\"labels\":", t->f);
  put_string(t, labels);
  fputs("}", t->f);
  end_event(t);
}

gboolean ps_trace_drops(ps_time_t start, ps_time_t dur)
{
  return dur > 0 && ns_of(start + dur) == ns_of(start);
}

gboolean ps_trace_complete(PsTrace *t, int pid, int tid, const char *name, const char *cat,
                           ps_time_t start, ps_time_t dur, const char *args_json)
{
  g_return_val_if_fail(t != NULL && name != NULL, FALSE);
  g_return_val_if_fail(start >= 0, FALSE);
  g_return_val_if_fail(dur >= 0, FALSE);
  if (ps_trace_drops(start, dur))
    return FALSE; /* shorter than the file's nanosecond: a viewer would nest it */
  begin_event(t, 'X', pid);
  fprintf(t->f, ",\"tid\":%d,\"name\":", tid);
  put_string(t, name);
  if (cat) {
    fputs(",\"cat\":", t->f);
    put_string(t, cat);
  }
  fputs(",\"ts\":", t->f);
  put_time(t, start);
  fputs(",\"dur\":", t->f);
  put_duration(t, start, dur);
  if (args_json) {
    fputs(",\"args\":", t->f);
    fputs(args_json, t->f);
  }
  end_event(t);
  return TRUE;
}

void ps_trace_counter(PsTrace *t, int pid, const char *name, ps_time_t time, double value)
{
  g_return_if_fail(t != NULL && name != NULL);
  g_return_if_fail(time >= 0);
  g_return_if_fail(isfinite(value)); /* JSON has no NaN or infinity */
  begin_event(t, 'C', pid);
  fputs(",\"name\":", t->f);
  put_string(t, name);
  fputs(",\"ts\":", t->f);
  put_time(t, time);
  fputs(",\"args\":{\"value\":", t->f);
  put_double(t, value);
  putc('}', t->f);
  end_event(t);
}

/* Flows are matched by (cat, name, id) in both Catapult and Perfetto, so
 * the category is fixed and the id is written as a hex string (exact in
 * JavaScript beyond 2^53). */
static void put_flow(PsTrace *t, char ph, int pid, int tid, const char *name, uint64_t id,
                     ps_time_t time)
{
  begin_event(t, ph, pid);
  fprintf(t->f, ",\"tid\":%d,\"name\":", tid);
  put_string(t, name);
  fprintf(t->f, ",\"cat\":\"flow\",\"id\":\"0x%" PRIx64 "\",\"ts\":", id);
  put_time(t, time);
  if (ph == 'f')
    fputs(",\"bp\":\"e\"", t->f);
  end_event(t);
}

void ps_trace_flow_start(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                         ps_time_t time)
{
  g_return_if_fail(t != NULL && name != NULL);
  g_return_if_fail(time >= 0);
  put_flow(t, 's', pid, tid, name, id, time);
}

void ps_trace_flow_end(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                       ps_time_t time)
{
  g_return_if_fail(t != NULL && name != NULL);
  g_return_if_fail(time >= 0);
  put_flow(t, 'f', pid, tid, name, id, time);
}

void ps_trace_flow_step(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                        ps_time_t time)
{
  g_return_if_fail(t != NULL && name != NULL);
  g_return_if_fail(time >= 0);
  put_flow(t, 't', pid, tid, name, id, time);
}

void ps_trace_instant(PsTrace *t, int pid, int tid, const char *name, ps_time_t time)
{
  g_return_if_fail(t != NULL && name != NULL);
  g_return_if_fail(time >= 0);
  begin_event(t, 'i', pid);
  fprintf(t->f, ",\"tid\":%d,\"name\":", tid);
  put_string(t, name);
  fputs(",\"s\":\"t\",\"ts\":", t->f);
  put_time(t, time);
  end_event(t);
}

uint64_t ps_trace_events(const PsTrace *t)
{
  g_return_val_if_fail(t != NULL, 0);
  return t->events;
}

static void trace_free(PsTrace *t)
{
  tmp_unregister(t->slot);
  g_free(t->buf);
  g_free(t->path);
  g_free(t->tmp_path);
  g_free(t);
}

gboolean ps_trace_close(PsTrace *t, GError **error)
{
  g_return_val_if_fail(t != NULL, FALSE);
  g_return_val_if_fail(error == NULL || *error == NULL, FALSE);
  fputs("\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"podsim\"}}\n", t->f);
  note_error(t);
  int err = t->write_errno;
  if (!err && fflush(t->f) != 0)
    err = errno ? errno : EIO;
  if (!err && ferror(t->f))
    err = EIO;
  /* (a gzip stream syncs when closed, after its last bytes) */
  if (!err && !t->gzip && fsync(t->fd) != 0 && errno != EINVAL && errno != EROFS)
    err = errno;
  if (fclose(t->f) != 0 && !err)
    err = errno ? errno : EIO;
  t->f = NULL;
  if (err) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot write the trace: %s", t->path, g_strerror(err));
    if (t->tmp_path)
      g_unlink(t->tmp_path);
    trace_free(t);
    return FALSE;
  }
  if (t->tmp_path && g_rename(t->tmp_path, t->path) != 0) {
    err = errno;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot rename the finished trace from %s: %s", t->path, t->tmp_path,
                g_strerror(err));
    g_unlink(t->tmp_path);
    trace_free(t);
    return FALSE;
  }
  trace_free(t);
  return TRUE;
}

void ps_trace_abort(PsTrace *t)
{
  if (!t)
    return;
  fclose(t->f);
  if (t->tmp_path)
    g_unlink(t->tmp_path);
  trace_free(t);
}

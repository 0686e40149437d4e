/* trace.h: Chrome Trace Event JSON writer, streamed to disk.
 *
 * Loads in Perfetto (ui.perfetto.dev) and chrome://tracing.  Events are
 * written as they come, never held in memory; the file is written under a
 * temporary name in the same directory and renamed when closed, so a
 * failed run never leaves a half-written trace.  Times are whole
 * nanoseconds (microseconds with three decimals, picoseconds rounded to
 * the nearest ns): catapult compares slice bounds rounded to the ns, so
 * finer structure would nest touching slices there; a complete event
 * shorter than its nanosecond is not written.  A complete event's
 * duration is the largest double d for which ts + d stays 8 ulps
 * short of its end's timestamp in double arithmetic (within 12 ulps of the
 * exact duration), so slices that touch never overlap in a viewer, even
 * one that shifts or scales the times first (speedscope, catapult).
 * A path ending in ".gz" is written gzip-compressed as it streams (both
 * viewers open such a file as they do the JSON).
 * Invariant: after ps_trace_close() returns TRUE the file is a complete,
 * valid JSON object {"traceEvents": [...], "displayTimeUnit": "ns", ...}. */
#ifndef PS_TRACE_H
#define PS_TRACE_H

#include "../common/common.h"

typedef struct PsTrace PsTrace;

/* JSON bytes per gzip byte at the writer's compression level: the
 * smallest ratio measured on the shipped experiments' traces, rounded
 * down (6.86 for gpipe-amoebanet; 8.6 gpipe-transformer, 10.9
 * vit-pipeline, 12.6 default, up to 18.9; 8.3 and 11.1 with
 * --trace-links). */
#define PS_TRACE_GZIP_RATIO 6

/* Whether a trace at path is written gzip-compressed (it ends in ".gz"). */
gboolean ps_trace_path_is_gzip(const char *path);
/* About how many bytes a trace of json_bytes of JSON takes on disk at
 * path: json_bytes, or its gzip size for a ".gz" path. */
int64_t ps_trace_written_bytes(const char *path, int64_t json_bytes);

/* (transfer full) NULL with an error naming the path if it cannot be
 * created. */
PsTrace *ps_trace_open(const char *path, GError **error);

/* Metadata: names and ordering of processes (pid) and threads (tid). */
void ps_trace_process(PsTrace *t, int pid, const char *name, int sort_index);
void ps_trace_thread(PsTrace *t, int pid, int tid, const char *name, int sort_index);
/* A process's labels (the format's "process_labels"), shown beside its
 * name, e.g. "slice 1". */
void ps_trace_process_labels(PsTrace *t, int pid, const char *labels);

/* A complete event (ph "X").  args_json is NULL or the text of a JSON
 * object, e.g. "{\"layer\":\"dense1\"}", copied as is.  FALSE when it is
 * not written: it starts and ends in the same nanosecond of the file (a
 * flow must not bind to it then). */
gboolean ps_trace_complete(PsTrace *t, int pid, int tid, const char *name, const char *cat,
                           ps_time_t start, ps_time_t dur, const char *args_json);
/* Whether ps_trace_complete would leave out a slice of [start, start +
 * dur): it starts and ends in the same nanosecond of the file. */
gboolean ps_trace_drops(ps_time_t start, ps_time_t dur);
/* A counter sample (ph "C") for track `name` of process pid. */
void ps_trace_counter(PsTrace *t, int pid, const char *name, ps_time_t time, double value);
/* Flow events tying a send to its receive: ph "s" at the source, ph "f"
 * (binding to the enclosing slice) at the destination, same id. */
void ps_trace_flow_start(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                         ps_time_t time);
void ps_trace_flow_end(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                       ps_time_t time);
/* A step of a flow between its start and end (ph "t"), binding to the
 * slice that encloses `time` on (pid, tid). */
void ps_trace_flow_step(PsTrace *t, int pid, int tid, const char *name, uint64_t id,
                        ps_time_t time);
/* An instant event (ph "i", thread scope). */
void ps_trace_instant(PsTrace *t, int pid, int tid, const char *name, ps_time_t time);

uint64_t ps_trace_events(const PsTrace *t);

/* Removes the temporary files of traces still being written.  Async-signal
 * safe: for a SIGINT/SIGTERM handler, so an interrupted run leaves no
 * "<path>.tmp-XXXXXX" behind (the final <path> is untouched). */
void ps_trace_remove_unfinished(void);

/* Finishes the JSON, flushes, renames into place.  Frees t either way.
 * FALSE (and the temporary removed) on an I/O error. */
gboolean ps_trace_close(PsTrace *t, GError **error);
/* Removes the temporary file and frees t. */
void ps_trace_abort(PsTrace *t);

#endif

/* sweep-private.h: what sweep.c and sweep-mpi.c share: a sweep's points,
 * outcomes, output file, progress and processes, and the steps of each
 * that the MPI driver (sweep-mpi.c) runs on every rank.
 *
 * Invariant: only the writer (rank 0's calling thread) touches an Output
 * or a Progress; worker threads only run points and push their Outcomes
 * onto Sweep.done. */
#ifndef PS_SWEEP_PRIVATE_H
#define PS_SWEEP_PRIVATE_H

#include "cli/cli-common.h"

#include <json-c/json.h>
#include <stdio.h>

typedef enum { FORMAT_CSV, FORMAT_JSONL } Format;

/* What became of one point; made by a worker, consumed by the writer. */
/* One --vary option: its key and values. */
typedef struct {
  char *key;
  GPtrArray *values; /* char *: as given, or a range's expansion */
} Vary;

typedef struct {
  guint index;
  json_object *flat; /* the summary, flattened, without varied or wall-clock keys; NULL if failed */
  char *error;       /* NULL if it ran */
  double wall_s;
} Outcome;

typedef struct {
  const char *experiment;
  char **sets;        /* NULL-terminated, may be NULL */
  GPtrArray *varies;  /* Vary * */
  guint n_points;
  GMutex data_lock;   /* guards datasets */
  GHashTable *datasets; /* "train|test\n" data_dir -> PsDataset (owned) */
  GAsyncQueue *done;  /* Outcome * */
} Sweep;

/* The output file as the writer sees it. */
typedef struct {
  const char *path;
  Format format;
  FILE *f;
  GPtrArray *columns;   /* CSV: the header's names, NULL until known */
  GHashTable *finished; /* point key -> GINT_TO_POINTER(1 ok, 2 failed), rows in the file */
  gboolean warned_dropped;
  gint64 cut_at;        /* >= 0: the length to cut the file to before writing (its last
                           row cut short by an interrupted write), else -1 */
  gboolean add_newline; /* its whole last row lacks only its newline */
} Output;

/* The writer's count of the points back, drawn on a terminal. */
typedef struct {
  gboolean tty;
  guint total, done, failed;
  gint64 t0;
} Progress;

/* The command line, read and checked. */
typedef struct {
  char **vary_args, **sets; /* NULL-terminated; sets may be NULL */
  char *out_path, *format_name;
  const char *experiment;   /* in argv */
  int jobs;                 /* >= 1 */
  gboolean dry_run;
  Format format;
} Options;

/* The processes one sweep runs on: rank 0 alone, unless an MPI launcher
 * started several (then rank 0 reads and writes the file and hands out the
 * points, and every rank, rank 0 too, runs points on its own threads). */
typedef struct {
  int rank, size;
  gboolean mpi;     /* MPI_Init was called */
  gboolean started; /* rank 0 told the others to go (or to stop) */
  int *threads;     /* rank 0: each rank's --jobs, once started */
} Ranks;

void ps_sweep_outcome_free(Outcome *o);
/* The whole of text as strict JSON, or FALSE; *out may be NULL (JSON null).
 * (transfer full) */
gboolean ps_sweep_parse_json_value(const char *text, json_object **out);
/* A GThreadPool's function: runs point GPOINTER_TO_UINT(data) - 1 of the
 * Sweep user_data and pushes its Outcome onto its done queue. */
void ps_sweep_pool_run(gpointer data, gpointer user_data);
/* Appends o's row; FALSE if it could not be written. */
gboolean ps_sweep_output_row(Output *out, const Sweep *sw, const Outcome *o, GError **error);
/* sweep-output.c: reads what an earlier sweep left in out's file (its
 * finished points; cut_at, add_newline), changing nothing. */
gboolean ps_sweep_output_read(Output *out, const Sweep *sw, GError **error);
/* Opens out's file to append, first dropping a cut last row or ending a
 * whole one. */
gboolean ps_sweep_output_open(Output *out, GError **error);
/* The CSV header from the first point that ran. */
gboolean ps_sweep_output_header(Output *out, const Sweep *sw, const Outcome *first,
                                GError **error);
/* A JSON value's canonical text, and a cell's (its number as JSON prints
 * it, else the text): the keys rows and points are matched by.
 * (transfer full) */
char *ps_sweep_canonical_json(json_object *v);
char *ps_sweep_canonical_text(const char *text);
/* Point index's value of its k-th varied key. */
const char *ps_sweep_point_value(const Sweep *sw, guint index, guint k);
/* The --vary index of key, or -1. */
int ps_sweep_vary_index(const Sweep *sw, const char *key);
/* Counts o in and shows it (a line, or the progress bar on a terminal). */
void ps_sweep_progress_point(Progress *p, const Sweep *sw, const Outcome *o);
/* On a terminal, the progress line redrawn (elapsed time, ETA). */
void ps_sweep_progress_draw(const Progress *p);
/* Point index's varied values, "k1=v1 k2=v2".  (transfer full) */
char *ps_sweep_point_label(const Sweep *sw, guint index);
/* Fills o from the command line; 0, or PS_CLI_EXIT_INPUT after a message. */
int ps_sweep_options_parse(Options *o, int argc, char **argv);
void ps_sweep_options_clear(Options *o);
void ps_sweep_init(Sweep *sw, const Options *o);
void ps_sweep_clear(Sweep *sw);
/* The --vary options, checked against each other and against --set. */
gboolean ps_sweep_add_varies(Sweep *sw, char **vary_args, GError **error);
/* The sweep as rank 0 (or the only process) runs it; the exit status. */
int ps_sweep_lead(int argc, char **argv, Ranks *ranks);

#ifdef PS_WITH_MPI
/* sweep-mpi.c.  The subcommand under MPI: starts MPI when a launcher
 * started us, leads on rank 0 and serves on the others; the exit status. */
int ps_sweep_mpi_main(int argc, char **argv);
/* Rank 0: the others may run points; gathers their thread counts. */
void ps_sweep_mpi_start(Ranks *r, int jobs);
/* Rank 0: no rank will get another point; they exit with status. */
void ps_sweep_mpi_stop(const Ranks *r, int status);
/* Rank 0, once the CSV header is written: runs the points of todo from
 * next on over the ranks, writing each row as it comes back; FALSE if a
 * row could not be written. */
gboolean ps_sweep_mpi_lead(Sweep *sw, Output *out, const GArray *todo, guint next,
                           const Ranks *r, Progress *prog, GError **error);
/* Stops every rank at once (the others may be mid-point). */
void ps_sweep_mpi_abort(void);
#endif

#endif

/* common.h: types and conventions shared by every podsim module.
 *
 * Invariant: simulated time is always an integer count of picoseconds
 * (ps_time_t); doubles appear only at the edges (parsing, printing). */
#ifndef PS_COMMON_H
#define PS_COMMON_H

#include <glib.h>
#include <signal.h>
#include <stdint.h>

typedef int64_t ps_time_t;

#define PS_TIME_NEVER INT64_MAX
#define PS_PS_PER_S INT64_C(1000000000000)

/* Seconds (double) to picoseconds, rounded to nearest; saturates at
 * PS_TIME_NEVER for huge values. */
ps_time_t ps_time_from_s(double seconds);
double ps_time_to_s(ps_time_t t);
/* a + b for a, b >= 0, saturating at PS_TIME_NEVER (never wraps). */
static inline ps_time_t ps_time_add(ps_time_t a, ps_time_t b)
{
  ps_time_t r;
  return __builtin_add_overflow(a, b, &r) ? PS_TIME_NEVER : r;
}

/* Error domain for everything a user can get wrong: config files, command
 * line, data files.  The CLI maps it to exit status 2. */
#define PS_INPUT_ERROR (ps_input_error_quark())
GQuark ps_input_error_quark(void);

typedef enum {
  PS_INPUT_ERROR_FILE,    /* missing or unreadable file */
  PS_INPUT_ERROR_SYNTAX,  /* malformed JSON or value syntax */
  PS_INPUT_ERROR_TYPE,    /* wrong JSON type */
  PS_INPUT_ERROR_KEY,     /* unknown or missing key */
  PS_INPUT_ERROR_VALUE,   /* out of range or impossible combination */
  PS_INPUT_ERROR_DOES_NOT_FIT /* model or batch does not fit in HBM */
} PsInputError;

/* Numeric precision of matrix inputs: bf16 rounds them to bfloat16 (round
 * to nearest even) and accumulates in float32, as the MXU does. */
typedef enum { PS_PRECISION_F32, PS_PRECISION_BF16 } PsPrecision;

/* Hold SIGINT, SIGTERM and SIGHUP on the calling thread while a file named
 * "<path>.tmp-..." exists but is not yet registered or removed, so a signal
 * can neither interrupt its creation nor leave it behind; restore with the
 * mask saved.  A signal that arrives meanwhile is delivered on restore. */
void ps_fatal_signals_hold(sigset_t *saved);
void ps_fatal_signals_restore(const sigset_t *saved);

#endif

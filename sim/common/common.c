/* common.c: time conversions, the input error domain, fatal-signal holds. */
#include "common.h"

#include <math.h>
#include <pthread.h>

G_DEFINE_QUARK(ps-input-error-quark, ps_input_error)

ps_time_t ps_time_from_s(double seconds)
{
  double ps = seconds * (double)PS_PS_PER_S;
  if (!(ps < 9.2e18))
    return PS_TIME_NEVER;
  if (ps < 0)
    return -(ps_time_t)llround(-ps);
  return (ps_time_t)llround(ps);
}

double ps_time_to_s(ps_time_t t)
{
  return (double)t / (double)PS_PS_PER_S;
}

void ps_fatal_signals_hold(sigset_t *saved)
{
  sigset_t fatal;
  sigemptyset(&fatal);
  sigaddset(&fatal, SIGINT);
  sigaddset(&fatal, SIGTERM);
  sigaddset(&fatal, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &fatal, saved);
}

void ps_fatal_signals_restore(const sigset_t *saved)
{
  pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* sweep-progress.c: a sweep's progress on stderr: a line per finished
 * point (and per failure), or on a terminal one line redrawn with the
 * points done, those failed, the time elapsed and an estimate of what is
 * left. */
#include "cli/sweep-private.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>

static char *duration_text(double s)
{
  if (s < 60)
    return g_strdup_printf("%.1f s", s);
  if (s < 3600)
    return g_strdup_printf("%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  return g_strdup_printf("%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void ps_sweep_progress_draw(const Progress *p)
{
  if (!p->tty)
    return;
  double elapsed = (double)(g_get_monotonic_time() - p->t0) / 1e6;
  g_autofree char *el = duration_text(elapsed);
  g_autofree char *eta =
      p->done ? duration_text(elapsed / p->done * (p->total - p->done)) : g_strdup("?");
  fprintf(stderr, "\r\033[Ksweep: %u/%u points, %u failed, %s elapsed, ETA %s", p->done,
          p->total, p->failed, el, eta);
  fflush(stderr);
}

void ps_sweep_progress_point(Progress *p, const Sweep *sw, const Outcome *o)
{
  p->done++;
  p->failed += o->error != NULL;
  g_autofree char *label = ps_sweep_point_label(sw, o->index);
  if (!p->tty || o->error) {
    json_object *st = o->flat ? json_object_object_get(o->flat, "step_time_s") : NULL;
    g_autofree char *what =
        o->error ? g_strdup_printf("failed: %s", o->error)
                 : g_strdup_printf("step %.3f us", st ? json_object_get_double(st) * 1e6 : 0.0);
    fprintf(stderr, "%ssweep: [%u/%u] %s: %s (%.2f s)\n", p->tty ? "\r\033[K" : "", p->done,
            p->total, label, what, o->wall_s);
  }
  ps_sweep_progress_draw(p);
}

/* bench_engine.c: events per second of the engine in steady state.
 *
 * Holds 10^5 pending events; each handled event schedules one new event a
 * random (exponential-ish) delay later, so the queue size stays constant:
 * the classic "hold" model.  Reports push+pop pairs per second, both for the
 * raw heap and through the engine's handler dispatch. */
#include "engine/engine.h"

#include <stdio.h>
#include <sys/resource.h>

#define PENDING 100000

typedef struct {
  uint32_t type;
  uint64_t left;
  uint64_t rng;
} Hold;

static inline uint64_t next_rand(uint64_t *s)
{
  /* xorshift64*: cheap and deterministic */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static void hold_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  Hold *h = ctx;
  if (h->left == 0)
    return;
  h->left--;
  ps_engine_after(engine, (ps_time_t)(next_rand(&h->rng) % 2000000), h->type, ev->target, 0);
}

static double now_s(void)
{
  return (double)g_get_monotonic_time() / 1e6;
}

int main(int argc, char **argv)
{
  uint64_t ops = argc > 1 ? g_ascii_strtoull(argv[1], NULL, 10) : 30000000;

  /* Raw queues: pop the minimum, push a later one. */
  PsHeap heap;
  ps_heap_init(&heap);
  uint64_t rng = 88172645463325252ULL, seq = 0;
  for (int i = 0; i < PENDING; i++) {
    PsEvent ev = {.time = (ps_time_t)(next_rand(&rng) % 2000000), .seq = seq++};
    ps_heap_push(&heap, &ev);
  }
  double t0 = now_s();
  PsEvent ev;
  uint64_t heap_ops = ops / 4;
  for (uint64_t i = 0; i < heap_ops; i++) {
    ps_heap_pop(&heap, &ev);
    ev.time += (ps_time_t)(next_rand(&rng) % 2000000);
    ev.seq = seq++;
    ps_heap_push(&heap, &ev);
  }
  double heap_s = now_s() - t0;
  ps_heap_clear(&heap);

  PsQueue queue;
  ps_queue_init(&queue);
  rng = 88172645463325252ULL;
  seq = 0;
  for (int i = 0; i < PENDING; i++) {
    PsEvent e2 = {.time = (ps_time_t)(next_rand(&rng) % 2000000), .seq = seq++};
    ps_queue_push(&queue, &e2);
  }
  t0 = now_s();
  for (uint64_t i = 0; i < ops; i++) {
    ps_queue_pop(&queue, &ev);
    ev.time += (ps_time_t)(next_rand(&rng) % 2000000);
    ev.seq = seq++;
    ps_queue_push(&queue, &ev);
  }
  double queue_s = now_s() - t0;
  ps_queue_clear(&queue);

  /* Through the engine: dispatch to a handler that schedules the next. */
  PsEngine *engine = ps_engine_new();
  Hold hold = {0, ops, 88172645463325252ULL};
  hold.type = ps_engine_register(engine, "hold", hold_handler, &hold);
  for (int i = 0; i < PENDING; i++)
    ps_engine_at(engine, (ps_time_t)(next_rand(&hold.rng) % 2000000), hold.type, (uint32_t)i, 0);
  t0 = now_s();
  uint64_t ran = ps_engine_run(engine, PS_TIME_NEVER);
  double engine_s = now_s() - t0;
  ps_engine_free(engine);

  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("engine bench: %d pending events, %" G_GUINT64_FORMAT " hold operations\n", PENDING, ops);
  printf("  4-ary heap     push+pop: %5.1f M/s (%.2f s)\n", heap_ops / heap_s / 1e6, heap_s);
  printf("  calendar queue push+pop: %5.1f M/s (%.2f s)\n", ops / queue_s / 1e6, queue_s);
  printf("  engine events (dispatch): %.1f M/s (%" G_GUINT64_FORMAT " events, %.2f s)\n",
         ran / engine_s / 1e6, ran, engine_s);
  printf("  peak RSS: %.1f MiB\n", ru.ru_maxrss / 1024.0);
  printf("  target: >= 20 M push+pop per second: %s\n",
         ops / queue_s >= 20e6 && ran / engine_s >= 20e6 ? "met" : "NOT MET");
  return 0;
}

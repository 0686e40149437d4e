/* bench_engine.c: events per second of the engine in steady state.
 *
 * Holds 10^5 pending events; each handled event schedules one new event a
 * random delay later, so the queue size stays constant: the classic "hold"
 * model.  Reports push+pop pairs per second for the raw heap and the raw
 * ladder queue, and events per second through the engine's handler
 * dispatch, for several delay distributions: the target is set on the
 * first, the others keep it honest (equal times in bulk, heavy tails, far
 * outliers).  Every run also checks that events leave in time order. */
#include "engine/engine.h"

#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#define PENDING 100000

typedef enum { UNIFORM, BURSTY, HEAVY, OUTLIERS, N_WORKLOADS } Workload;

static const char *const workload_name[N_WORKLOADS] = {
  "hold, uniform delay [0, 2 us)",
  "bursty: 20 delays, equal times",
  "heavy tail: 1000 * 2^[0,32) ps",
  "uniform + 1/1000 at +1e15 ps",
};

static inline uint64_t next_rand(uint64_t *s)
{
  /* xorshift64*: cheap and deterministic */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static inline ps_time_t next_delay(Workload w, uint64_t *s)
{
  uint64_t r = next_rand(s);
  switch (w) {
  case BURSTY: /* multiples of 0.1 us: ~5000 pending events share each time */
    return (ps_time_t)(r % 20) * 100000;
  case HEAVY: /* spans 9 decades; many delays fall inside the sorted front */
    return (ps_time_t)(((r >> 8) % 1000) << (r & 31));
  case OUTLIERS:
    return (r >> 32) % 1000 == 0 ? INT64_C(1000000000000000) : (ps_time_t)(r % 2000000);
  default:
    return (ps_time_t)(r % 2000000);
  }
}

typedef struct {
  Workload w;
  uint32_t type;
  uint64_t left;
  uint64_t rng;
  ps_time_t last;
  uint64_t disorder; /* events handled before an earlier one */
} Hold;

static void hold_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  Hold *h = ctx;
  h->disorder += ev->time < h->last;
  h->last = ev->time;
  if (h->left == 0)
    return;
  h->left--;
  ps_engine_after(engine, next_delay(h->w, &h->rng), h->type, ev->target, 0);
}

/* CPU time of this thread: the machine is shared, and time the scheduler
 * gives to other processes is not the queue's. */
static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define SEED UINT64_C(88172645463325252)

/* Raw queues: pop the minimum, push a later one.  Returns pairs/s. */
static double bench_heap(Workload w, uint64_t ops, uint64_t *disorder)
{
  PsHeap heap;
  ps_heap_init(&heap);
  uint64_t rng = SEED, seq = 0;
  for (int i = 0; i < PENDING; i++) {
    PsEvent ev = {.time = next_delay(w, &rng), .seq = seq++};
    ps_heap_push(&heap, &ev);
  }
  PsEvent ev;
  ps_time_t last = 0;
  double t0 = now_s();
  for (uint64_t i = 0; i < ops; i++) {
    ps_heap_pop(&heap, &ev);
    *disorder += ev.time < last;
    last = ev.time;
    ev.time += next_delay(w, &rng);
    ev.seq = seq++;
    ps_heap_push(&heap, &ev);
  }
  double s = now_s() - t0;
  ps_heap_clear(&heap);
  return (double)ops / s;
}

static double bench_queue(Workload w, uint64_t ops, uint64_t *disorder)
{
  PsQueue queue;
  ps_queue_init(&queue);
  uint64_t rng = SEED, seq = 0;
  for (int i = 0; i < PENDING; i++) {
    PsEvent ev = {.time = next_delay(w, &rng), .seq = seq++};
    ps_queue_push(&queue, &ev);
  }
  PsEvent ev;
  ps_time_t last = 0;
  double t0 = now_s();
  for (uint64_t i = 0; i < ops; i++) {
    ps_queue_pop(&queue, &ev);
    *disorder += ev.time < last;
    last = ev.time;
    ev.time += next_delay(w, &rng);
    ev.seq = seq++;
    ps_queue_push(&queue, &ev);
  }
  double s = now_s() - t0;
  ps_queue_clear(&queue);
  return (double)ops / s;
}

/* Through the engine: dispatch to a handler that schedules the next.
 * Returns events/s, counting the final drain of the pending events. */
static double bench_engine(Workload w, uint64_t ops, uint64_t *disorder)
{
  PsEngine *engine = ps_engine_new();
  Hold hold = {.w = w, .left = ops, .rng = SEED};
  hold.type = ps_engine_register(engine, "hold", hold_handler, &hold);
  for (int i = 0; i < PENDING; i++)
    ps_engine_at(engine, next_delay(w, &hold.rng), hold.type, (uint32_t)i, 0);
  double t0 = now_s();
  uint64_t ran = ps_engine_run(engine, PS_TIME_NEVER);
  double s = now_s() - t0;
  ps_engine_free(engine);
  *disorder += hold.disorder + (ran != ops + PENDING);
  return (double)ran / s;
}

int main(int argc, char **argv)
{
  uint64_t ops = argc > 1 ? g_ascii_strtoull(argv[1], NULL, 10) : 30000000;
  double heap_rate[N_WORKLOADS], queue_rate[N_WORKLOADS], engine_rate[N_WORKLOADS];
  uint64_t disorder = 0;
  for (int w = 0; w < N_WORKLOADS; w++) {
    heap_rate[w] = bench_heap(w, ops / 4, &disorder); /* the slow one runs less */
    queue_rate[w] = bench_queue(w, ops, &disorder);
    engine_rate[w] = bench_engine(w, ops, &disorder);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("engine bench: %d pending events, %" G_GUINT64_FORMAT " hold operations per run\n",
         PENDING, ops);
  printf("  %-32s %11s %13s %14s\n", "M per CPU second", "4-ary heap", "ladder queue",
         "engine events");
  printf("  %-32s %11s %13s %14s\n", "", "push+pop", "push+pop", "(dispatch)");
  for (int w = 0; w < N_WORKLOADS; w++)
    printf("  %-32s %11.1f %13.1f %14.1f\n", workload_name[w], heap_rate[w] / 1e6,
           queue_rate[w] / 1e6, engine_rate[w] / 1e6);
  printf("  order: %s\n", disorder ? "VIOLATED" : "ok (every event at or after the previous one)");
  printf("  peak RSS: %.1f MiB\n", ru.ru_maxrss / 1024.0);
  printf("  target: >= 20 M push+pop and >= 20 M engine events per second (%s): %s\n",
         workload_name[UNIFORM],
         queue_rate[UNIFORM] >= 20e6 && engine_rate[UNIFORM] >= 20e6 ? "met" : "NOT MET");
  return disorder ? 1 : 0;
}

/* nets.h: what the numerics test binaries (test_net*.c) share: small
 * models built by hand as PsModel structs (shapes and parameter counts
 * worked out here, independently of layers.c and net.c), and a fixture
 * holding a net with a random batch.
 * Invariant: a model built here has the shapes and parameter counts
 * TensorFlow's conventions give, so net.c's plan accepts it. */
#ifndef PS_TEST_SUPPORT_NETS_H
#define PS_TEST_SUPPORT_NETS_H

#include "model/net.h"

typedef PsModel *(*MakeModel)(void);

typedef struct {
  const char *name;
  MakeModel make;
} NetCase;

typedef struct {
  PsModel *model;
  PsNet *net;
  int batch;
  size_t in_elems;
  float *x;
  int32_t *labels;
} Fixture;

/* An empty model with this input.  (transfer full: model_free) */
PsModel *model_new(int rank, const int64_t *shape, int classes);
/* Frees a model built here or read by layers.c. */
void model_free(PsModel *m);
int64_t elems(const int64_t *shape, int rank);
/* Appends a layer fed by the previous one; `a` is units or filters, `k` the
 * kernel or pool size, `s` the stride (0: default).  Output shape and
 * parameter count follow TensorFlow's conventions.  (transfer none) */
PsLayer *add(PsModel *m, PsLayerKind kind, int64_t a, int64_t k, int64_t s, int same, int bias);
/* 6 -> 8 relu -> 7 gelu -> 5 tanh -> 3 classes */
PsModel *make_mlp(void);
/* (6,6,2): conv3 same relu, maxpool 2, conv3 stride 2 same gelu, global
 * average, dense 3. */
PsModel *make_cnn(void);
/* (7,7,1): conv3 valid tanh, overlapping avgpool 2 stride 1, flatten,
 * dense 3; a flatten between layers with parameters. */
PsModel *make_cnn_flat(void);

/* A net of make()'s model with `batch` random examples (non-zero biases). */
void fixture_init(Fixture *f, MakeModel make, int batch, int max_batch, PsPrecision prec,
                  uint64_t seed);
void fixture_clear(Fixture *f);
/* Allocates the fixture's batch of f->model's input and draws it from r:
 * inputs uniform in [-1, 1], then labels. */
void fixture_batch(Fixture *f, int batch, GRand *r);
/* The net's loss on the fixture's batch. */
double net_loss_at(Fixture *f);
/* Zeroes the gradients and runs forward and backward on the batch. */
void net_gradient(Fixture *f, float loss_scale);
/* Moves each example by a pattern of its label, so that the classes can
 * be learnt. */
void fixture_separate(Fixture *f);
/* `steps` steps of opt; the last loss over the first. */
double train(Fixture *f, PsOptimizer *opt, int steps);

#endif

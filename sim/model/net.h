/* net.h: a model's real numerics on one device: parameters, activations
 * and gradients for a sequential model (dense, activations, conv2d,
 * pooling, flatten, softmax cross-entropy).
 *
 * The simulator calls it one layer at a time, from the same FWD/BWD ops
 * that it times, so numerics ride on the ops.  Parameters and gradients
 * live each in one contiguous float buffer (layer after layer, weights
 * then bias), so a collective can reduce gradients as flat buckets.
 * Invariant: ps_net_backward_layer(i) runs only after forward of every
 * layer and backward of every layer after i, in the current step. */
#ifndef PS_NET_H
#define PS_NET_H

#include "layers.h"

typedef struct PsNet PsNet;

/* Fails (PS_INPUT_ERROR_VALUE) naming the first layer kind that has no
 * kernel.  Weights are initialised from `seed` (He/Glorot uniform), so two
 * nets with the same seed are bit-identical.  (transfer full) */
PsNet *ps_net_new(const PsModel *model, int max_batch, PsPrecision prec, uint64_t seed,
                  GError **error);
void ps_net_free(PsNet *net);

/* Copies a batch in (x: batch x input elems, labels: batch). */
void ps_net_set_input(PsNet *net, const float *x, const int32_t *labels, int batch);
void ps_net_forward_layer(PsNet *net, int layer);
/* loss_scale multiplies d(loss)/d(logits) on top of the 1/batch of a mean
 * loss (the strategy passes 1/replicas for a "mean" reduction). */
void ps_net_backward_layer(PsNet *net, int layer, float loss_scale);
void ps_net_forward(PsNet *net);
void ps_net_backward(PsNet *net, float loss_scale);
void ps_net_zero_grads(PsNet *net);

/* Mean loss and correct predictions of the last forward pass. */
double ps_net_loss(const PsNet *net);
int ps_net_correct(const PsNet *net);

/* The output of a layer in the last forward pass, batch x out elements
 * (*n receives the count).  (transfer none) */
const float *ps_net_layer_output(const PsNet *net, int layer, size_t *n);

size_t ps_net_n_params(const PsNet *net);
/* (transfer none) contiguous buffers of ps_net_n_params floats */
float *ps_net_params(PsNet *net);
float *ps_net_grads(PsNet *net);
/* Offset and length, in floats, of a layer's parameters in those buffers. */
void ps_net_layer_params(const PsNet *net, int layer, size_t *offset, size_t *len);

/* Test accuracy over a whole dataset-sized array, in batches of max_batch. */
double ps_net_accuracy(PsNet *net, const float *x, const int32_t *labels, size_t n);

/* An optimizer owning its slot buffers.  (transfer full) */
typedef struct PsOptimizer PsOptimizer;
PsOptimizer *ps_optimizer_new_sgd(size_t n, float lr, float momentum);
PsOptimizer *ps_optimizer_new_adam(size_t n, float lr, float beta1, float beta2, float eps);
void ps_optimizer_step(PsOptimizer *opt, float *params, const float *grads);
/* One step over elements [off, off + len) only (a shard, a bucket): `t` is
 * the 1-based step number (Adam's bias correction); the optimizer's own
 * step count is left alone.  Updating every range of a partition in one
 * step gives exactly what ps_optimizer_step gives. */
void ps_optimizer_step_range(PsOptimizer *opt, float *params, const float *grads, size_t off,
                             size_t len, int64_t t);
void ps_optimizer_free(PsOptimizer *opt);
/* Sets the learning rate of the following steps. */
void ps_optimizer_set_lr(PsOptimizer *opt, float lr);

#endif

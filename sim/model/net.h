/* net.h: a model's real numerics on one device: parameters, activations
 * and gradients for a model of dense, activation, conv2d, pooling,
 * flatten, layernorm, attention, patch embedding, residual add and softmax
 * cross-entropy layers.
 *
 * The simulator calls it one layer at a time, from the same FWD/BWD ops
 * that it times, so numerics ride on the ops.  Parameters and gradients
 * live each in one contiguous float buffer (layer after layer, weights
 * then bias), so a collective can reduce gradients as flat buckets.
 * Activations live in `slots`, one per micro-batch in flight (GPipe keeps
 * several): each slot has its own input, labels, batch, activations,
 * activation gradients, loss and correct count; parameters and gradients
 * are shared by all slots, so backward of several slots sums into one
 * gradient.  Every call below that reads or writes activations acts on the
 * current slot (ps_net_select_slot; slot 0 at creation).
 * Invariant: ps_net_backward_layer(i) runs, for the current slot, only
 * after forward of every layer and backward of every layer after i in the
 * current step (for a pipeline stage holding layers [first, last]: after
 * its forward, and once the gradient of layer last's output is in
 * ps_net_activation_grad(net, last), unless last is the loss). */
#ifndef PS_NET_H
#define PS_NET_H

#include "layers.h"

typedef struct PsNet PsNet;

/* A net with `slots` slots of up to max_batch examples each.  Fails
 * (PS_INPUT_ERROR_VALUE) naming the first layer kind that has no kernel.
 * Weights are initialised from `seed` (He/Glorot uniform), so two nets
 * with the same seed are bit-identical whatever their slots.
 * (transfer full) */
PsNet *ps_net_new_slots(const PsModel *model, int max_batch, int slots, PsPrecision prec,
                        uint64_t seed, GError **error);
/* ps_net_new_slots with one slot.  (transfer full) */
PsNet *ps_net_new(const PsModel *model, int max_batch, PsPrecision prec, uint64_t seed,
                  GError **error);
void ps_net_free(PsNet *net);

int ps_net_slots(const PsNet *net);
/* Makes `slot` (0 <= slot < ps_net_slots) the current slot. */
void ps_net_select_slot(PsNet *net, int slot);

/* Copies a batch into the current slot (x: batch x input elems, labels:
 * batch x ps_net_labels_per_example, example after example).  A model
 * reading token ids takes them as floats in x (exact below 2^24). */
void ps_net_set_input(PsNet *net, const float *x, const int32_t *labels, int batch);
/* Sets the current slot's batch without copying an input: for a pipeline
 * stage whose input arrives in ps_net_activation(net, first - 1).  The
 * labels stay what the last ps_net_set_input gave. */
void ps_net_set_batch(PsNet *net, int batch);
/* Turns dropout on for the current slot's batch, as training does: its
 * masks are drawn from (the net's seed, step, layer, first_example + e,
 * element) for example e of the batch, so an example's masks are the
 * same whichever device, slot or pass computes it.  ps_net_set_input and
 * ps_net_set_batch turn it off again: a batch set without it runs without
 * dropout, as evaluation (ps_net_evaluate) and inference do. */
void ps_net_set_dropout(PsNet *net, int64_t step, int64_t first_example);
void ps_net_forward_layer(PsNet *net, int layer);
/* Accumulates the layer's parameter gradients and writes the gradient of
 * its input(s), for every layer whose input is not the net input (so a
 * pipeline stage can pass it back).  loss_scale multiplies
 * d(loss)/d(logits) on top of the 1/batch of a mean loss (the strategy
 * passes 1/replicas for a "mean" reduction, and 1/micro-batches for
 * micro-batches of a pipeline); other layers ignore it. */
void ps_net_backward_layer(PsNet *net, int layer, float loss_scale);
void ps_net_forward(PsNet *net);
void ps_net_backward(PsNet *net, float loss_scale);
void ps_net_zero_grads(PsNet *net);

/* Mean loss and correct predictions of the current slot's last forward
 * pass of the loss layer.  The mean is over every label: examples, and
 * for per-token logits (S, V) every token of each (so the loss is per
 * token, as language models report it); correct counts labels. */
double ps_net_loss(const PsNet *net);
int ps_net_correct(const PsNet *net);
/* Labels per example: 1 for a vector of logits, S for (S, V) logits. */
int ps_net_labels_per_example(const PsNet *net);

/* The output of a layer in the current slot's last forward pass, batch x
 * out elements (*n receives the count).  (transfer none) */
const float *ps_net_layer_output(const PsNet *net, int layer, size_t *n);

/* The current slot's output of `layer`, -1 for the net input: batch x out
 * elements (*n, may be NULL, receives the count for the slot's batch).
 * Writable: a pipeline stage puts the activations it receives here, at
 * first - 1.  A FLATTEN's output is the very buffer of the layer before it.
 * (transfer none) */
float *ps_net_activation(PsNet *net, int layer, size_t *n);
/* The current slot's gradient of the loss with respect to that output,
 * same size, written by backward of the layers reading it; NULL for the
 * net input (-1) and for the softmax_xent layer's output (its backward
 * starts from the labels).  Writable: a pipeline stage puts the gradient it
 * receives here, at its last layer, before its backward.  A skip
 * connection must not cross a stage boundary: the gradient of an output
 * read by layers of two stages would need both stages' parts.
 * (transfer none) */
float *ps_net_activation_grad(PsNet *net, int layer, size_t *n);

size_t ps_net_n_params(const PsNet *net);
/* (transfer none) contiguous buffers of ps_net_n_params floats */
float *ps_net_params(PsNet *net);
float *ps_net_grads(PsNet *net);
/* Offset and length, in floats, of a layer's parameters in those buffers. */
void ps_net_layer_params(const PsNet *net, int layer, size_t *offset, size_t *len);

/* Test accuracy over a whole dataset-sized array of n examples (labels:
 * n x ps_net_labels_per_example), in batches of max_batch, through the
 * current slot (whose input, activations, loss and correct count it
 * overwrites): the fraction of labels predicted right (per token for
 * per-token logits) and, in *mean_loss (may be NULL), the loss's mean
 * over every label. */
double ps_net_evaluate(PsNet *net, const float *x, const int32_t *labels, size_t n,
                       double *mean_loss);
/* ps_net_evaluate's accuracy alone. */
double ps_net_accuracy(PsNet *net, const float *x, const int32_t *labels, size_t n);

/* Batch-norm layer `layer` normalizes with the moments of a group of
 * `group` replicas with equal batches (1: its own batch's): before its
 * forward (and its backward), ps_net_batchnorm_moments writes this net's
 * share of the group's moments, which the caller sums over the group in
 * place.  Evaluation uses each batch's own statistics. */
void ps_net_set_batchnorm_group(PsNet *net, int layer, int group);
/* The share, in the current slot: forward, the mean and mean square of the
 * layer's input per channel divided by the group; backward, those of dy
 * and dy xhat (adding its dgamma and dbeta).  2 C floats in *n.
 * (transfer none) */
float *ps_net_batchnorm_moments(PsNet *net, int layer, gboolean backward, size_t *n);

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
/* Weights and slots stored in bf16 (MaxText's weight_dtype=bfloat16): after
 * every step the range's weights and the slots are rounded to bf16 (round
 * to nearest even); the update itself computes in float32. */
void ps_optimizer_set_state_bf16(PsOptimizer *opt, gboolean bf16);
void ps_optimizer_free(PsOptimizer *opt);

/* A layer-wise optimizer's unit: a range of the parameters with one trust
 * ratio, or none (`adapt` FALSE: no ratio, no weight decay). */
typedef struct {
  size_t off, len;
  gboolean adapt;
} PsOptSegment;
/* Each layer's weights and bias as segments, in order, tiling the
 * parameters; normalization gains and biases not adapted.  (transfer full) */
PsOptSegment *ps_net_opt_segments(const PsNet *net, int *n);
/* LARS (momentum, eta, weight_decay) or LAMB (beta1, beta2, eps,
 * weight_decay). */
typedef struct {
  gboolean lamb;
  float lr, momentum, eta, beta1, beta2, eps, weight_decay;
} PsLayerwiseConfig;
/* LARS or LAMB over n parameters cut into segments that tile them.  A
 * step over a range that cuts a segment takes the norms of the piece in
 * the range.  (transfer full) */
PsOptimizer *ps_optimizer_new_layerwise(const PsLayerwiseConfig *c, size_t n,
                                        const PsOptSegment *segs, int n_segs);
/* A layer-wise step of a range [roff, roff + rlen) of whole segments (a
 * bucket) whose update is split among devices, each over its piece
 * [off, off + len) of it, in two passes.  Pass one (LAMB: the piece's
 * moments) adds the piece's sums of squares of each adapted segment of the
 * range, the j-th in order, to sums[2 j] (the weights) and sums[2 j + 1]
 * (LARS: the gradients; LAMB: the update).  Once the devices' sums are
 * added up (an all-reduce), pass two updates the piece with the whole
 * segments' norms.  Both return the number of adapted segments in the
 * range (-1 if it cuts a segment); the pieces of every device together
 * give what one ps_optimizer_step_range over the range gives, but for the
 * norms' summation order. */
int ps_optimizer_layer_sums(PsOptimizer *opt, const float *params, const float *grads,
                            size_t roff, size_t rlen, size_t off, size_t len, int64_t t,
                            float *sums);
int ps_optimizer_layer_apply(PsOptimizer *opt, float *params, const float *grads, size_t roff,
                             size_t rlen, size_t off, size_t len, int64_t t, const float *sums);
/* The adapted segments lying whole in [roff, roff + rlen). */
int ps_optimizer_layer_count(const PsOptimizer *opt, size_t roff, size_t rlen);
/* Sets the learning rate of the following steps. */
void ps_optimizer_set_lr(PsOptimizer *opt, float lr);

#endif

/* net-tensor.h: a net's share of a layer split over a tensor group of T
 * devices (Megatron-LM's layouts, Shoeybi et al. 2019, section 3), for
 * real numerics on a tensor mesh.
 *
 * Storage.  Every device keeps the layer's full-size weight block; the
 * elements it does not own are held at exactly zero (and their gradients
 * zeroed after each backward), so a device's matmuls compute exactly its
 * shard's partial results: zero columns give zero outputs, and zero rows
 * contribute nothing to a sum.  The ranges below say which elements rank t
 * owns; the ranks' ranges tile the block, each rank owning 1/T of it.
 *
 * Invariant: the ranges are sorted, disjoint, inside the layer's weights
 * and biases, and count exactly (weights + biases) / T for a split layer
 * (all of them unsplit). */
#ifndef PS_NET_TENSOR_H
#define PS_NET_TENSOR_H

#include "model/net.h"

typedef enum {
  PS_SPLIT_NONE,   /* replicated: every rank holds it all */
  PS_SPLIT_COLS,   /* dense, swiglu: output columns (and bias slices) */
  PS_SPLIT_ROWS,   /* dense: input rows; the bias in slices, added once */
  PS_SPLIT_HEADS,  /* attention: Q, K, V columns and W_o rows of the
                      rank's heads; W_o's bias in slices */
  PS_SPLIT_VOCAB,  /* embedding: table rows, positions in column slices;
                      softmax_xent: its logits' columns */
  PS_SPLIT_SEQUENCE /* a norm or element-wise layer run on the rank's share
                      of the sequence rows: its weights whole on every rank
                      (as PS_SPLIT_NONE), their gradients partial sums */
} PsTensorSplit;

typedef struct {
  size_t off, len; /* floats, in the flat layout of net.h */
} PsNetRange;

/* Appends to out (PsNetRange) the parameters rank t of T owns of `layer`
 * split `how`.  FALSE (PS_INPUT_ERROR_VALUE, naming what does not divide)
 * when the layer cannot be split so. */
gboolean ps_net_tensor_ranges(const PsNet *net, int layer, PsTensorSplit how, int t, int T,
                              GArray *out, GError **error);

/* Vocab-parallel softmax cross-entropy over the loss layer's logits, of
 * which this device owns the columns [lo, hi) of every row (the other
 * columns are zeros of its own, never read).  Three phases around two
 * sum-all-reduces of one float per row (rows: batch x labels per example):
 *   shift:  each row's largest owned logit / T; summed over the group it
 *           is the mean of the ranks' maxima, a common shift c of the row
 *           (no exp overflows unless the ranks' maxima differ by more than
 *           88 T / (T - 1));
 *   sums:   each row's sum over owned v of exp(z_v - c); summed over the
 *           group it is S, and logsumexp = c + log S;
 *   finish: the loss layer's probabilities, exp(z_v - c) / S on owned
 *           columns and onehot(label) on the others (so its backward gives
 *           the owned columns' gradient and zeros elsewhere), and its loss:
 *           per row c + log S - T z_label where the rank owns the label, c +
 *           log S elsewhere, so the T ranks' losses sum to T times the
 *           row's cross-entropy.  The correct count is left 0. */
int ps_net_loss_rows(const PsNet *net);
void ps_net_vocab_loss_shift(PsNet *net, int lo, int hi, int T, float *shift);
void ps_net_vocab_loss_sums(PsNet *net, int lo, int hi, const float *shift, float *sums);
void ps_net_vocab_loss_finish(PsNet *net, int lo, int hi, int T, const float *shift,
                              const float *sums);

#endif

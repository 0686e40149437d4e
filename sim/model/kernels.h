/* kernels.h: real numeric kernels for training, float32 in memory.
 *
 * Layouts are row-major: activations (batch, features) or NHWC images,
 * dense weights (in, out), conv weights (kh, kw, cin, cout).  Backward
 * kernels *overwrite* dx and *accumulate* into dw and db (so gradients of a
 * batch can be summed over micro-batches); callers zero them per step.
 * With PS_PRECISION_BF16 every matrix product rounds both inputs to
 * bfloat16 (round to nearest even) and accumulates in float32.
 * Invariant: single-threaded and deterministic (the caller sets BLAS to one
 * thread; see ps_kernels_init). */
#ifndef PS_KERNELS_H
#define PS_KERNELS_H

#include "../common/common.h"

#include <stddef.h>

/* Sets BLAS to one thread.  Call once per process before any kernel. */
void ps_kernels_init(void);

/* bfloat16: round to nearest even, NaN kept quiet. */
float ps_bf16_round(float x);
void ps_bf16_round_array(const float *in, float *out, size_t n);

/* C = A (m x k) B (k x n), plus C if accumulate; with transposes as
 * flagged.  The single GEMM entry point, honouring precision. */
void ps_gemm(PsPrecision prec, gboolean trans_a, gboolean trans_b, int m, int n, int k,
             const float *a, const float *b, gboolean accumulate, float *c);

/* Dense over rows: y (rows x out) = x (rows x in) w (in x out) + b. */
void ps_dense_forward(PsPrecision prec, const float *x, const float *w, const float *b,
                      float *y, int rows, int in, int out);
/* dx may be NULL (first layer); b/db may be NULL (no bias). */
void ps_dense_backward(PsPrecision prec, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, int rows, int in, int out);

void ps_relu_forward(const float *x, float *y, size_t n);
void ps_relu_backward(const float *x, const float *dy, float *dx, size_t n);
/* GELU, tanh approximation. */
void ps_gelu_forward(const float *x, float *y, size_t n);
void ps_gelu_backward(const float *x, const float *dy, float *dx, size_t n);
void ps_tanh_forward(const float *x, float *y, size_t n);
void ps_tanh_backward(const float *y, const float *dy, float *dx, size_t n);

/* Softmax + cross-entropy: writes probs (batch x classes), returns the
 * *sum* of per-example losses (double accumulation); `correct` (may be NULL)
 * receives the count of argmax == label. */
double ps_softmax_xent_forward(const float *logits, const int32_t *labels, float *probs,
                               int batch, int classes, int *correct);
/* dlogits = scale * (probs - onehot(labels)); scale is 1/batch for a mean
 * loss, further scaled by the strategy (e.g. 1/replicas). */
void ps_softmax_xent_backward(const float *probs, const int32_t *labels, float *dlogits,
                              int batch, int classes, float scale);

typedef struct {
  int batch, h, w, cin;    /* input NHWC */
  int kernel, stride;      /* square kernel */
  gboolean same_padding;   /* TensorFlow "same": out = ceil(in / stride), total pad
                              max((out-1)*stride + kernel - in, 0), the smaller half
                              top/left; else "valid" */
  int cout;
  int out_h, out_w;        /* filled by ps_conv2d_shape() */
  int pad_top, pad_left;
} PsConvShape;

void ps_conv2d_shape(PsConvShape *s);
/* Floats of workspace the conv kernels need (im2col buffer). */
size_t ps_conv2d_workspace(const PsConvShape *s);
/* im2col + GEMM. b may be NULL. */
void ps_conv2d_forward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                       const float *b, float *y, float *workspace);
void ps_conv2d_backward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *db, float *workspace);

typedef struct {
  int batch, h, w, c;
  int size, stride;        /* valid pooling windows */
  int out_h, out_w;        /* filled by ps_pool_shape() */
} PsPoolShape;

void ps_pool_shape(PsPoolShape *s);
/* argmax (may be NULL for avg) records the winning input index per output. */
void ps_maxpool_forward(const PsPoolShape *s, const float *x, float *y, int32_t *argmax);
void ps_maxpool_backward(const PsPoolShape *s, const int32_t *argmax, const float *dy,
                         float *dx);
void ps_avgpool_forward(const PsPoolShape *s, const float *x, float *y);
void ps_avgpool_backward(const PsPoolShape *s, const float *dy, float *dx);

/* Optimizers over a flat parameter vector.  State buffers are zeroed by
 * the caller at creation.  Adam's step t counts from 1. */
void ps_sgd_momentum_update(float *w, const float *g, float *velocity, size_t n, float lr,
                            float momentum);
void ps_adam_update(float *w, const float *g, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float epsilon, int64_t t);

#endif

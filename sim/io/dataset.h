/* dataset.h: training data for numerics: Fashion-MNIST from its idx .gz
 * files (decompressed with GIO's GZlibDecompressor), a seeded synthetic
 * source, and windows of a character-level text (text.h) for language
 * models.
 *
 * Invariant: examples are float32 laid out as the model's input shape, in
 * [0, 1] (images) or token ids in [0, classes) (text), with
 * labels_per_example labels in [0, classes) each (1 for a classifier, S
 * next tokens for a text window); a dataset never changes after it is
 * opened, so any number of readers may share it. */
#ifndef PS_DATASET_H
#define PS_DATASET_H

#include "../common/common.h"

typedef struct PsDataset PsDataset;

/* Opens train (60,000) or test (10,000) Fashion-MNIST from `dir`
 * (train-images-idx3-ubyte.gz, ...).  Errors name the file and what is
 * wrong (missing, bad magic, truncated, sizes disagree).  (transfer full) */
PsDataset *ps_dataset_open_fashion_mnist(const char *dir, gboolean train, GError **error);

/* A learnable synthetic classification set: each class has a fixed random
 * prototype, each example is its prototype plus seeded noise, clamped to
 * [0, 1].  Same seed, same data.  (transfer full) */
PsDataset *ps_dataset_new_synthetic(const int64_t *shape, int rank, int classes, size_t n,
                                    uint64_t seed);

/* The training or the test part of the text at `path` (ps_text_read), as
 * windows of seq token ids (floats) and their seq next tokens as labels,
 * in text order: training windows start `stride` tokens apart in the
 * first 1 - test_fraction of the tokens, test windows seq apart in the
 * rest.  Errors name the path (unreadable, no text, a part shorter than
 * one window).  (transfer full) */
PsDataset *ps_dataset_open_text(const char *path, int64_t seq, int64_t stride,
                                double test_fraction, gboolean train, GError **error);

void ps_dataset_free(PsDataset *ds);
size_t ps_dataset_size(const PsDataset *ds);
size_t ps_dataset_example_elems(const PsDataset *ds);
int ps_dataset_classes(const PsDataset *ds);
/* Labels per example: 1, or a text window's S. */
size_t ps_dataset_labels_per_example(const PsDataset *ds);
/* (transfer none) all examples / labels (n x labels per example),
 * contiguous */
const float *ps_dataset_images(const PsDataset *ds);
const int32_t *ps_dataset_labels(const PsDataset *ds);

/* An epoch order: a permutation of [0, n) from `seed` (identity when
 * shuffle is FALSE), so hosts can assemble batches deterministically. */
typedef struct PsSampler PsSampler;
PsSampler *ps_sampler_new(const PsDataset *ds, gboolean shuffle, uint64_t seed);
void ps_sampler_free(PsSampler *s);
/* Copies the next `batch` examples in order into x and labels (batch x
 * labels per example); at the end of an epoch starts a new permutation. */
void ps_sampler_next(PsSampler *s, int batch, float *x, int32_t *labels);

#endif

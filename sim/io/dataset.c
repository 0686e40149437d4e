/* dataset.c: Fashion-MNIST read from its gzip'd idx files through GIO, a
 * seeded synthetic classification set, windows of a character-level text
 * (text.h), and the per-epoch sampler.
 *
 * Invariant: a PsDataset is complete and checked once it is returned
 * (every pixel in [0, 1] or token id in [0, classes), every label in [0,
 * classes), labels_per labels per example) and is never written again;
 * a PsSampler's order is always a permutation of [0, n) that depends only
 * on its seed and the epoch number. */
#include "dataset.h"
#include "text.h"

#include <gio/gio.h>
#include <math.h>
#include <string.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define FASHION_CLASSES 10
#define READ_CHUNK (64 * 1024)

/* Per-element noise of the synthetic set (standard deviation before
 * clamping to [0, 1]); prototypes are uniform in [0, 1]. */
#define SYNTH_NOISE_SD 0.3

struct PsDataset {
  size_t n;
  size_t elems; /* floats per example */
  int classes;
  size_t labels_per; /* labels per example: 1, or a text window's S */
  float *images;   /* n * elems */
  int32_t *labels; /* n * labels_per */
};

struct PsSampler {
  const PsDataset *ds; /* not owned */
  gboolean shuffle;
  GRand *rng;
  guint32 *order; /* the current epoch's permutation */
  size_t pos;     /* next position in order */
};

/* An idx file opened through the gzip decompressor. */
typedef struct {
  const char *path;
  GInputStream *in; /* the decompressed stream */
} IdxReader;

static GRand *rand_from_seed(uint64_t seed)
{
  guint32 words[2] = {(guint32)(seed & 0xffffffffu), (guint32)(seed >> 32)};
  return g_rand_new_with_seed_array(words, 2);
}

/* ---- idx files ------------------------------------------------------- */

static gboolean idx_open(IdxReader *r, const char *path, GError **error)
{
  g_autoptr(GFile) file = g_file_new_for_path(path);
  g_autoptr(GError) err = NULL;
  GFileInputStream *raw = g_file_read(file, NULL, &err);
  if (!raw) {
    const char *why = g_error_matches(err, G_IO_ERROR, G_IO_ERROR_NOT_FOUND)
                          ? "file is missing"
                          : err->message;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot open: %s", path,
                why);
    return FALSE;
  }
  g_autoptr(GZlibDecompressor) gunzip = g_zlib_decompressor_new(G_ZLIB_COMPRESSOR_FORMAT_GZIP);
  r->path = path;
  r->in = g_converter_input_stream_new(G_INPUT_STREAM(raw), G_CONVERTER(gunzip));
  g_object_unref(raw);
  return TRUE;
}

static void idx_close(IdxReader *r)
{
  g_clear_object(&r->in);
}

/* Reads exactly `len` bytes.  A short read is a truncated file; a
 * decompression error means the file is not (valid) gzip. */
static gboolean idx_read(IdxReader *r, void *buf, size_t len, const char *what,
                         GError **error)
{
  gsize got = 0;
  g_autoptr(GError) err = NULL;
  if (!g_input_stream_read_all(r->in, buf, len, &got, NULL, &err)) {
    if (g_error_matches(err, G_IO_ERROR, G_IO_ERROR_INVALID_DATA))
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "%s: not a valid gzip file, or corrupt (%s), while reading the %s", r->path,
                  err->message, what);
    else if (g_error_matches(err, G_IO_ERROR, G_IO_ERROR_PARTIAL_INPUT))
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "%s: truncated gzip stream while reading the %s", r->path, what);
    else
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                  "%s: read error while reading the %s: %s", r->path, what, err->message);
    return FALSE;
  }
  if (got < len) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: truncated: %zu bytes of %s expected, only %zu left", r->path, len,
                what, (size_t)got);
    return FALSE;
  }
  return TRUE;
}

/* After the last expected byte the stream must end (this also makes the
 * decompressor check the gzip trailer's CRC and length). */
static gboolean idx_expect_end(IdxReader *r, GError **error)
{
  guint8 extra[1];
  gsize got = 0;
  g_autoptr(GError) err = NULL;
  if (!g_input_stream_read_all(r->in, extra, sizeof extra, &got, NULL, &err)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: corrupt or truncated gzip stream after the data: %s", r->path,
                err->message);
    return FALSE;
  }
  if (got != 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: more data than its idx header declares", r->path);
    return FALSE;
  }
  return TRUE;
}

static guint32 be32(const guint8 *p)
{
  return ((guint32)p[0] << 24) | ((guint32)p[1] << 16) | ((guint32)p[2] << 8) | p[3];
}

/* Reads the magic and `rank` dimensions. */
static gboolean idx_header(IdxReader *r, guint32 magic, const char *kind, int rank,
                           guint32 *dims, GError **error)
{
  guint8 head[4 * 4];
  g_assert(rank >= 1 && rank <= 3);
  if (!idx_read(r, head, 4, "idx magic number", error))
    return FALSE;
  guint32 got = be32(head);
  if (got != magic) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: bad magic number 0x%08x (an idx %s file starts with 0x%08x)", r->path,
                got, kind, magic);
    return FALSE;
  }
  if (!idx_read(r, head, 4 * (size_t)rank, "idx dimensions", error))
    return FALSE;
  for (int i = 0; i < rank; i++)
    dims[i] = be32(head + 4 * i);
  return TRUE;
}

static gboolean read_images(const char *path, size_t *n, size_t *elems, float **out,
                            GError **error)
{
  IdxReader r = {0};
  guint32 dims[3];
  gboolean ok = FALSE;
  float *images = NULL;
  guint8 *chunk = NULL;

  if (!idx_open(&r, path, error))
    return FALSE;
  if (!idx_header(&r, IDX_MAGIC_IMAGES, "image", 3, dims, error))
    goto out_close;
  if (dims[1] == 0 || dims[2] == 0 || dims[1] > 4096 || dims[2] > 4096 ||
      (guint64)dims[0] * dims[1] * dims[2] > ((guint64)1 << 34)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: implausible image dimensions %u x %u x %u", path, dims[0], dims[1],
                dims[2]);
    goto out_close;
  }
  size_t total = (size_t)dims[0] * dims[1] * dims[2];
  images = g_try_new(float, total ? total : 1);
  if (!images) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: not enough memory for %zu pixels", path, total);
    goto out_close;
  }
  chunk = g_malloc(READ_CHUNK);
  for (size_t done = 0; done < total;) {
    size_t len = MIN((size_t)READ_CHUNK, total - done);
    if (!idx_read(&r, chunk, len, "pixel data", error))
      goto out_free;
    for (size_t i = 0; i < len; i++)
      images[done + i] = (float)chunk[i] / 255.0f;
    done += len;
  }
  if (!idx_expect_end(&r, error))
    goto out_free;
  *n = dims[0];
  *elems = (size_t)dims[1] * dims[2];
  *out = images;
  images = NULL;
  ok = TRUE;
out_free:
  g_free(chunk);
  g_free(images);
out_close:
  idx_close(&r);
  return ok;
}

static gboolean read_labels(const char *path, size_t *n, int32_t **out, GError **error)
{
  IdxReader r = {0};
  guint32 dims[1];
  gboolean ok = FALSE;
  guint8 *raw = NULL;
  int32_t *labels = NULL;

  if (!idx_open(&r, path, error))
    return FALSE;
  if (!idx_header(&r, IDX_MAGIC_LABELS, "label", 1, dims, error))
    goto out_close;
  raw = g_try_malloc(dims[0] ? dims[0] : 1);
  if (!raw) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: not enough memory for %u labels", path, dims[0]);
    goto out_close;
  }
  if (!idx_read(&r, raw, dims[0], "labels", error) || !idx_expect_end(&r, error))
    goto out_free;
  labels = g_new(int32_t, dims[0] ? dims[0] : 1);
  for (guint32 i = 0; i < dims[0]; i++) {
    if (raw[i] >= FASHION_CLASSES) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "%s: label %u of example %u is out of range (classes are 0..%d)", path,
                  raw[i], i, FASHION_CLASSES - 1);
      g_free(labels);
      goto out_free;
    }
    labels[i] = raw[i];
  }
  *n = dims[0];
  *out = labels;
  ok = TRUE;
out_free:
  g_free(raw);
out_close:
  idx_close(&r);
  return ok;
}

PsDataset *ps_dataset_open_fashion_mnist(const char *dir, gboolean train, GError **error)
{
  g_return_val_if_fail(dir != NULL, NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);
  const char *prefix = train ? "train" : "t10k";
  g_autofree char *img_name = g_strdup_printf("%s-images-idx3-ubyte.gz", prefix);
  g_autofree char *lab_name = g_strdup_printf("%s-labels-idx1-ubyte.gz", prefix);
  g_autofree char *img_path = g_build_filename(dir, img_name, NULL);
  g_autofree char *lab_path = g_build_filename(dir, lab_name, NULL);

  size_t n_img = 0, elems = 0, n_lab = 0;
  float *images = NULL;
  int32_t *labels = NULL;
  if (!read_labels(lab_path, &n_lab, &labels, error))
    return NULL;
  if (!read_images(img_path, &n_img, &elems, &images, error)) {
    g_free(labels);
    return NULL;
  }
  if (n_img != n_lab) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s has %zu images but %s has %zu labels: the counts must agree", img_path,
                n_img, lab_path, n_lab);
    g_free(images);
    g_free(labels);
    return NULL;
  }
  PsDataset *ds = g_new0(PsDataset, 1);
  ds->n = n_img;
  ds->elems = elems;
  ds->classes = FASHION_CLASSES;
  ds->labels_per = 1;
  ds->images = images;
  ds->labels = labels;
  return ds;
}

/* ---- synthetic ------------------------------------------------------- */

/* A standard normal deviate (Box-Muller, one of the pair). */
static double rand_normal(GRand *rng)
{
  double u1 = g_rand_double(rng); /* [0, 1) */
  double u2 = g_rand_double(rng);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * G_PI * u2);
}

PsDataset *ps_dataset_new_synthetic(const int64_t *shape, int rank, int classes, size_t n,
                                    uint64_t seed)
{
  g_return_val_if_fail(shape != NULL && rank >= 1, NULL);
  g_return_val_if_fail(classes >= 1, NULL);
  size_t elems = 1;
  for (int i = 0; i < rank; i++) {
    g_return_val_if_fail(shape[i] >= 1, NULL);
    g_return_val_if_fail(elems <= G_MAXSIZE / (size_t)shape[i], NULL);
    elems *= (size_t)shape[i];
  }
  g_return_val_if_fail(n == 0 || elems <= G_MAXSIZE / sizeof(float) / n, NULL);

  GRand *rng = rand_from_seed(seed);
  float *proto = g_new(float, (size_t)classes * elems);
  for (size_t i = 0; i < (size_t)classes * elems; i++)
    proto[i] = (float)g_rand_double(rng);

  PsDataset *ds = g_new0(PsDataset, 1);
  ds->n = n;
  ds->elems = elems;
  ds->classes = classes;
  ds->labels_per = 1;
  ds->images = g_new(float, n * elems + 1);
  ds->labels = g_new(int32_t, n + 1);
  for (size_t e = 0; e < n; e++) {
    int32_t c = g_rand_int_range(rng, 0, classes);
    const float *p = proto + (size_t)c * elems;
    float *x = ds->images + e * elems;
    ds->labels[e] = c;
    for (size_t i = 0; i < elems; i++) {
      double v = p[i] + SYNTH_NOISE_SD * rand_normal(rng);
      x[i] = (float)CLAMP(v, 0.0, 1.0);
    }
  }
  g_free(proto);
  g_rand_free(rng);
  return ds;
}

/* ---- text ------------------------------------------------------------ */

PsDataset *ps_dataset_open_text(const char *path, int64_t seq, int64_t stride,
                                double test_fraction, gboolean train, GError **error)
{
  g_return_val_if_fail(path != NULL && seq > 0 && stride > 0, NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);
  size_t n = 0;
  g_autofree guint8 *tokens = ps_text_read(path, &n, error);
  if (!tokens)
    return NULL;
  size_t end = ps_text_train_end(n, test_fraction);
  /* training windows `stride` apart; test windows side by side, so every
   * test token after the first is a label exactly once */
  const guint8 *part = train ? tokens : tokens + end;
  size_t len = train ? end : n - end;
  int64_t step = train ? stride : seq;
  size_t windows = ps_text_windows(len, seq, step);
  if (windows == 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the %s part holds %zu tokens, fewer than one window of sequence + 1 = "
                "%" G_GINT64_FORMAT, path, train ? "training" : "test", len, seq + 1);
    return NULL;
  }
  g_return_val_if_fail(windows <= G_MAXSIZE / sizeof(float) / (size_t)seq, NULL);
  PsDataset *ds = g_new0(PsDataset, 1);
  ds->n = windows;
  ds->elems = (size_t)seq;
  ds->classes = PS_TEXT_VOCAB;
  ds->labels_per = (size_t)seq;
  ds->images = g_new(float, windows * (size_t)seq);
  ds->labels = g_new(int32_t, windows * (size_t)seq);
  for (size_t k = 0; k < windows; k++)
    ps_text_window(part, k, seq, step, ds->images + k * (size_t)seq,
                   ds->labels + k * (size_t)seq);
  return ds;
}

/* ---- accessors ------------------------------------------------------- */

void ps_dataset_free(PsDataset *ds)
{
  if (!ds)
    return;
  g_free(ds->images);
  g_free(ds->labels);
  g_free(ds);
}

size_t ps_dataset_size(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, 0);
  return ds->n;
}

size_t ps_dataset_example_elems(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, 0);
  return ds->elems;
}

int ps_dataset_classes(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, 0);
  return ds->classes;
}

size_t ps_dataset_labels_per_example(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, 0);
  return ds->labels_per;
}

const float *ps_dataset_images(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, NULL);
  return ds->images;
}

const int32_t *ps_dataset_labels(const PsDataset *ds)
{
  g_return_val_if_fail(ds != NULL, NULL);
  return ds->labels;
}

/* ---- sampler --------------------------------------------------------- */

/* Starts the next epoch: identity, then (if shuffling) Fisher-Yates from
 * the sampler's own stream, so epoch k's order depends on the seed and k
 * only. */
static void sampler_new_epoch(PsSampler *s)
{
  size_t n = s->ds->n;
  for (size_t i = 0; i < n; i++)
    s->order[i] = (guint32)i;
  if (s->shuffle) {
    for (size_t i = n; i > 1; i--) {
      size_t j = (size_t)g_rand_int_range(s->rng, 0, (gint32)i);
      guint32 tmp = s->order[i - 1];
      s->order[i - 1] = s->order[j];
      s->order[j] = tmp;
    }
  }
  s->pos = 0;
}

PsSampler *ps_sampler_new(const PsDataset *ds, gboolean shuffle, uint64_t seed)
{
  g_return_val_if_fail(ds != NULL, NULL);
  g_return_val_if_fail(ds->n <= G_MAXINT32, NULL);
  PsSampler *s = g_new0(PsSampler, 1);
  s->ds = ds;
  s->shuffle = shuffle;
  s->rng = rand_from_seed(seed);
  s->order = g_new(guint32, ds->n + 1);
  sampler_new_epoch(s);
  return s;
}

void ps_sampler_free(PsSampler *s)
{
  if (!s)
    return;
  g_rand_free(s->rng);
  g_free(s->order);
  g_free(s);
}

void ps_sampler_next(PsSampler *s, int batch, float *x, int32_t *labels)
{
  g_return_if_fail(s != NULL && batch >= 0);
  g_return_if_fail(batch == 0 || s->ds->n > 0);
  size_t elems = s->ds->elems, per = s->ds->labels_per;
  for (int b = 0; b < batch; b++) {
    if (s->pos == s->ds->n)
      sampler_new_epoch(s);
    size_t idx = s->order[s->pos++];
    if (x)
      memcpy(x + (size_t)b * elems, s->ds->images + idx * elems, elems * sizeof(float));
    if (labels)
      memcpy(labels + (size_t)b * per, s->ds->labels + idx * per, per * sizeof *labels);
  }
}

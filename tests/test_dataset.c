/* test_dataset.c: Fashion-MNIST loading, the synthetic set and the sampler.
 *
 * The real files are checked in full against an independent reader built
 * here on plain zlib (gzopen/gzread); class balance is the dataset's own
 * published property (6,000 per class in train, 1,000 in test).  Broken
 * idx files are written with zlib into a temporary directory, and every
 * error must name the file and say what is wrong.  The synthetic set must
 * be deterministic and learnable by a nearest-centroid classifier; the
 * sampler must visit every example exactly once per epoch. */
#include "io/dataset.h"
#include "support/cli.h"

#include <glib/gstdio.h>
#include <string.h>
#include <zlib.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* ---- an independent idx reader on zlib ------------------------------- */

static guint8 *gz_slurp(const char *path, size_t *len)
{
  gzFile gz = gzopen(path, "rb");
  g_assert_nonnull(gz);
  size_t cap = 1 << 20, n = 0;
  guint8 *buf = g_malloc(cap);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = g_realloc(buf, cap);
    }
    int got = gzread(gz, buf + n, (unsigned)MIN(cap - n, (size_t)1 << 30));
    g_assert_cmpint(got, >=, 0);
    if (got == 0)
      break;
    n += (size_t)got;
  }
  gzclose(gz);
  *len = n;
  return buf;
}

static guint32 rd_be32(const guint8 *p)
{
  return (guint32)p[0] << 24 | (guint32)p[1] << 16 | (guint32)p[2] << 8 | p[3];
}

static void check_fashion(gboolean train)
{
  const char *prefix = train ? "train" : "t10k";
  g_autofree char *img_path = g_strdup_printf(FMNIST_DIR "/%s-images-idx3-ubyte.gz", prefix);
  g_autofree char *lab_path = g_strdup_printf(FMNIST_DIR "/%s-labels-idx1-ubyte.gz", prefix);
  if (!g_file_test(img_path, G_FILE_TEST_EXISTS)) {
    g_test_skip("dataset-fashion-mnist is not installed");
    return;
  }
  size_t expect_n = train ? 60000 : 10000;

  GError *error = NULL;
  PsDataset *ds = ps_dataset_open_fashion_mnist(FMNIST_DIR, train, &error);
  g_assert_no_error(error);
  g_assert_nonnull(ds);
  g_assert_cmpuint(ps_dataset_size(ds), ==, expect_n);
  g_assert_cmpuint(ps_dataset_example_elems(ds), ==, 28 * 28);
  g_assert_cmpint(ps_dataset_classes(ds), ==, 10);

  const float *x = ps_dataset_images(ds);
  const int32_t *y = ps_dataset_labels(ds);

  /* Balanced classes. */
  size_t count[10] = {0};
  for (size_t i = 0; i < expect_n; i++) {
    g_assert_cmpint(y[i], >=, 0);
    g_assert_cmpint(y[i], <, 10);
    count[y[i]]++;
  }
  for (int c = 0; c < 10; c++)
    g_assert_cmpuint(count[c], ==, expect_n / 10);

  /* Pixels in [0, 1], and not all the same. */
  float lo = 1, hi = 0;
  for (size_t i = 0; i < expect_n * 784; i++) {
    lo = MIN(lo, x[i]);
    hi = MAX(hi, x[i]);
  }
  g_assert_cmpfloat(lo, ==, 0.0f);
  g_assert_cmpfloat(hi, ==, 1.0f);

  /* Every label and every pixel against the independent reader. */
  size_t llen = 0, ilen = 0;
  g_autofree guint8 *lraw = gz_slurp(lab_path, &llen);
  g_autofree guint8 *iraw = gz_slurp(img_path, &ilen);
  g_assert_cmpuint(llen, ==, 8 + expect_n);
  g_assert_cmphex(rd_be32(lraw), ==, 0x801);
  g_assert_cmpuint(rd_be32(lraw + 4), ==, expect_n);
  g_assert_cmpuint(ilen, ==, 16 + expect_n * 784);
  g_assert_cmphex(rd_be32(iraw), ==, 0x803);
  g_assert_cmpuint(rd_be32(iraw + 8), ==, 28);
  g_assert_cmpuint(rd_be32(iraw + 12), ==, 28);
  for (size_t i = 0; i < expect_n; i++)
    g_assert_cmpint(y[i], ==, lraw[8 + i]);
  for (size_t i = 0; i < expect_n * 784; i++)
    if (x[i] != (float)iraw[16 + i] / 255.0f)
      g_error("pixel %zu: %g, file says %u/255", i, x[i], iraw[16 + i]);

  /* Spot checks with values read off the files by hand (od on the
   * decompressed data): the first labels of each set, and a pixel. */
  if (train) {
    const int32_t first[] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    for (int i = 0; i < 10; i++)
      g_assert_cmpint(y[i], ==, first[i]);
    /* the first image's first non-zero pixels: 1, 13 and 73 at 96, 99, 100 */
    g_assert_cmpfloat(x[95], ==, 0.0f);
    g_assert_cmpfloat(x[96], ==, 1.0f / 255.0f);
    g_assert_cmpfloat(x[99], ==, 13.0f / 255.0f);
    g_assert_cmpfloat(x[100], ==, 73.0f / 255.0f);
  } else {
    const int32_t first[] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    for (int i = 0; i < 10; i++)
      g_assert_cmpint(y[i], ==, first[i]);
  }
  g_assert_cmpfloat(x[0], ==, 0.0f); /* corner pixels are background */
  ps_dataset_free(ds);
}

static void test_fashion_train(void)
{
  check_fashion(TRUE);
}

static void test_fashion_test(void)
{
  check_fashion(FALSE);
}

/* ---- broken files ----------------------------------------------------- */

typedef struct {
  char *dir;
} Fixture;

static void fixture_setup(Fixture *fx, gconstpointer data)
{
  fx->dir = scratch_dir("podsim-dataset");
}

static void fixture_teardown(Fixture *fx, gconstpointer data)
{
  scratch_clear(fx->dir);
}

static char *file_in(Fixture *fx, gboolean images)
{
  return g_build_filename(fx->dir, images ? "train-images-idx3-ubyte.gz"
                                          : "train-labels-idx1-ubyte.gz", NULL);
}

static void put_be32(GByteArray *b, guint32 v)
{
  guint8 p[4] = {(guint8)(v >> 24), (guint8)(v >> 16), (guint8)(v >> 8), (guint8)v};
  g_byte_array_append(b, p, 4);
}

/* An idx image file body: magic, n, rows, cols, then `pixels` bytes of
 * pixel data (i * 51 % 256). */
static GByteArray *idx_images(guint32 magic, guint32 n, guint32 rows, guint32 cols,
                              size_t pixels)
{
  GByteArray *b = g_byte_array_new();
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (size_t i = 0; i < pixels; i++) {
    guint8 v = (guint8)(i * 51 % 256);
    g_byte_array_append(b, &v, 1);
  }
  return b;
}

static GByteArray *idx_labels(guint32 magic, guint32 n, size_t count, guint8 bad_at,
                              guint8 bad_value)
{
  GByteArray *b = g_byte_array_new();
  put_be32(b, magic);
  put_be32(b, n);
  for (size_t i = 0; i < count; i++) {
    guint8 v = i == bad_at ? bad_value : (guint8)(i % 10);
    g_byte_array_append(b, &v, 1);
  }
  return b;
}

static void write_gz(const char *path, GByteArray *body)
{
  gzFile gz = gzopen(path, "wb");
  g_assert_nonnull(gz);
  if (body->len)
    g_assert_cmpint(gzwrite(gz, body->data, body->len), ==, (int)body->len);
  g_assert_cmpint(gzclose(gz), ==, Z_OK);
  g_byte_array_free(body, TRUE);
}

static void write_good(Fixture *fx, guint32 n)
{
  g_autofree char *ip = file_in(fx, TRUE);
  g_autofree char *lp = file_in(fx, FALSE);
  write_gz(ip, idx_images(0x803, n, 3, 2, (size_t)n * 6));
  write_gz(lp, idx_labels(0x801, n, n, 255, 0));
}

/* Opens the fixture's set and checks the error names `file` and contains
 * every one of the (lower-case) words of `reason`. */
static void expect_error(Fixture *fx, gint code, const char *file, const char *reason)
{
  GError *error = NULL;
  PsDataset *ds = ps_dataset_open_fashion_mnist(fx->dir, TRUE, &error);
  g_assert_null(ds);
  g_assert_error(error, PS_INPUT_ERROR, code);
  if (g_test_verbose())
    g_test_message("error: %s", error->message);
  if (!strstr(error->message, file))
    g_error("error \"%s\" does not name %s", error->message, file);
  g_autofree char *lower = g_ascii_strdown(error->message, -1);
  g_auto(GStrv) words = g_strsplit(reason, "|", -1);
  gboolean any = FALSE;
  for (int i = 0; words[i]; i++)
    any = any || strstr(lower, words[i]) != NULL;
  if (!any)
    g_error("error \"%s\" does not say \"%s\"", error->message, reason);
  g_error_free(error);
}

static void test_small_good(Fixture *fx, gconstpointer data)
{
  write_good(fx, 7);
  GError *error = NULL;
  PsDataset *ds = ps_dataset_open_fashion_mnist(fx->dir, TRUE, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(ps_dataset_size(ds), ==, 7);
  g_assert_cmpuint(ps_dataset_example_elems(ds), ==, 6);
  for (size_t i = 0; i < 7 * 6; i++)
    g_assert_cmpfloat(ps_dataset_images(ds)[i], ==, (float)(i * 51 % 256) / 255.0f);
  for (int i = 0; i < 7; i++)
    g_assert_cmpint(ps_dataset_labels(ds)[i], ==, i % 10);
  /* 51/255 is exactly 0.2 in float, 255/255 is 1 */
  g_assert_cmpfloat(ps_dataset_images(ds)[1], ==, 0.2f);
  g_assert_cmpfloat(ps_dataset_images(ds)[5], ==, 1.0f);
  ps_dataset_free(ds);
  /* The test set's files are not there. */
  ds = ps_dataset_open_fashion_mnist(fx->dir, FALSE, &error);
  g_assert_null(ds);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, "t10k-"));
  g_clear_error(&error);
}

static void test_missing(Fixture *fx, gconstpointer data)
{
  g_autofree char *lp = file_in(fx, FALSE);
  expect_error(fx, PS_INPUT_ERROR_FILE, lp, "missing");
  write_gz(lp, idx_labels(0x801, 4, 4, 255, 0));
  g_autofree char *ip = file_in(fx, TRUE);
  expect_error(fx, PS_INPUT_ERROR_FILE, ip, "missing");
}

static void test_not_gzip(Fixture *fx, gconstpointer data)
{
  write_good(fx, 4);
  g_autofree char *ip = file_in(fx, TRUE);
  GByteArray *plain = idx_images(0x803, 4, 3, 2, 24);
  g_assert_true(g_file_set_contents(ip, (const char *)plain->data, plain->len, NULL));
  g_byte_array_free(plain, TRUE);
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "gzip");
}

static void test_bad_magic(Fixture *fx, gconstpointer data)
{
  write_good(fx, 4);
  g_autofree char *ip = file_in(fx, TRUE);
  write_gz(ip, idx_images(0x801, 4, 3, 2, 24)); /* a label magic on images */
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "magic");
  write_good(fx, 4);
  g_autofree char *lp = file_in(fx, FALSE);
  write_gz(lp, idx_labels(0x803, 4, 4, 255, 0));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, lp, "magic");
}

static void test_truncated_data(Fixture *fx, gconstpointer data)
{
  write_good(fx, 5);
  g_autofree char *ip = file_in(fx, TRUE);
  write_gz(ip, idx_images(0x803, 5, 3, 2, 5 * 6 - 1)); /* one pixel short */
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "truncated");
  g_autofree char *lp = file_in(fx, FALSE);
  write_good(fx, 5);
  write_gz(lp, idx_labels(0x801, 5, 3, 255, 0));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, lp, "truncated");
  /* A header cut in the middle. */
  write_good(fx, 5);
  GByteArray *b = g_byte_array_new();
  put_be32(b, 0x803);
  put_be32(b, 5);
  write_gz(ip, b);
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "truncated");
  /* Too much data is an error too. */
  write_good(fx, 5);
  write_gz(ip, idx_images(0x803, 5, 3, 2, 5 * 6 + 1));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "more data");
}

static void test_truncated_gzip(Fixture *fx, gconstpointer data)
{
  /* A valid gzip file cut short: the idx data is incomplete, or only the
   * gzip trailer (CRC and length) is lost. */
  write_good(fx, 200);
  g_autofree char *ip = file_in(fx, TRUE);
  g_autofree char *whole = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(ip, &whole, &len, NULL));
  g_assert_cmpuint(len, >, 40);
  g_assert_true(g_file_set_contents(ip, whole, (gssize)(len / 2), NULL));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "truncated");
  g_assert_true(g_file_set_contents(ip, whole, (gssize)(len - 4), NULL));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "truncated");
  /* A corrupt CRC. */
  whole[len - 6] ^= 0x55;
  g_assert_true(g_file_set_contents(ip, whole, (gssize)len, NULL));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "gzip|corrupt|crc");
}

static void test_count_mismatch(Fixture *fx, gconstpointer data)
{
  write_good(fx, 6);
  g_autofree char *lp = file_in(fx, FALSE);
  g_autofree char *ip = file_in(fx, TRUE);
  write_gz(lp, idx_labels(0x801, 5, 5, 255, 0));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, ip, "agree");
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, lp, "6 images");
}

static void test_label_range(Fixture *fx, gconstpointer data)
{
  write_good(fx, 6);
  g_autofree char *lp = file_in(fx, FALSE);
  write_gz(lp, idx_labels(0x801, 6, 6, 4, 10));
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, lp, "out of range");
  expect_error(fx, PS_INPUT_ERROR_SYNTAX, lp, "label 10 of example 4");
}

/* ---- synthetic --------------------------------------------------------- */

static gboolean same_data(const PsDataset *a, const PsDataset *b)
{
  size_t n = ps_dataset_size(a), e = ps_dataset_example_elems(a);
  return n == ps_dataset_size(b) && e == ps_dataset_example_elems(b) &&
         memcmp(ps_dataset_images(a), ps_dataset_images(b), n * e * sizeof(float)) == 0 &&
         memcmp(ps_dataset_labels(a), ps_dataset_labels(b), n * sizeof(int32_t)) == 0;
}

static void test_synthetic_deterministic(void)
{
  const int64_t shape[] = {4, 4, 2};
  PsDataset *a = ps_dataset_new_synthetic(shape, 3, 5, 300, 42);
  PsDataset *b = ps_dataset_new_synthetic(shape, 3, 5, 300, 42);
  PsDataset *c = ps_dataset_new_synthetic(shape, 3, 5, 300, 43);
  /* Seeds that differ only in the high 32 bits are different seeds. */
  PsDataset *d = ps_dataset_new_synthetic(shape, 3, 5, 300, 42 + (UINT64_C(1) << 32));
  g_assert_cmpuint(ps_dataset_size(a), ==, 300);
  g_assert_cmpuint(ps_dataset_example_elems(a), ==, 32);
  g_assert_cmpint(ps_dataset_classes(a), ==, 5);
  g_assert_true(same_data(a, b));
  g_assert_false(same_data(a, c));
  g_assert_false(same_data(a, d));
  /* The images differ, not just the labels. */
  g_assert_false(memcmp(ps_dataset_images(a), ps_dataset_images(c), 32 * sizeof(float)) == 0);

  size_t count[5] = {0};
  for (size_t i = 0; i < 300; i++) {
    int32_t y = ps_dataset_labels(a)[i];
    g_assert_cmpint(y, >=, 0);
    g_assert_cmpint(y, <, 5);
    count[y]++;
  }
  for (int k = 0; k < 5; k++) /* every class present in roughly equal share */
    g_assert_cmpuint(count[k], >, 30);
  for (size_t i = 0; i < 300 * 32; i++) {
    float v = ps_dataset_images(a)[i];
    g_assert_cmpfloat(v, >=, 0.0f);
    g_assert_cmpfloat(v, <=, 1.0f);
  }
  ps_dataset_free(a);
  ps_dataset_free(b);
  ps_dataset_free(c);
  ps_dataset_free(d);
}

/* Nearest-centroid accuracy on [split, n) with centroids from [0, split). */
static double centroid_accuracy(const PsDataset *ds, size_t split, gboolean shuffle_labels)
{
  size_t n = ps_dataset_size(ds), e = ps_dataset_example_elems(ds);
  int k = ps_dataset_classes(ds);
  const float *x = ps_dataset_images(ds);
  int32_t *y = g_memdup2(ps_dataset_labels(ds), n * sizeof(int32_t));
  if (shuffle_labels) {
    GRand *rng = g_rand_new_with_seed(7);
    for (size_t i = split; i > 1; i--) {
      size_t j = (size_t)g_rand_int_range(rng, 0, (gint32)i);
      int32_t tmp = y[i - 1];
      y[i - 1] = y[j];
      y[j] = tmp;
    }
    g_rand_free(rng);
  }
  double *cent = g_new0(double, (size_t)k * e);
  size_t *cnt = g_new0(size_t, (size_t)k);
  for (size_t i = 0; i < split; i++) {
    cnt[y[i]]++;
    for (size_t j = 0; j < e; j++)
      cent[(size_t)y[i] * e + j] += x[i * e + j];
  }
  for (int c = 0; c < k; c++)
    for (size_t j = 0; j < e; j++)
      cent[(size_t)c * e + j] /= (double)MAX(cnt[c], (size_t)1);
  size_t right = 0;
  for (size_t i = split; i < n; i++) {
    int best = -1;
    double best_d = G_MAXDOUBLE;
    for (int c = 0; c < k; c++) {
      double dist = 0;
      for (size_t j = 0; j < e; j++) {
        double diff = x[i * e + j] - cent[(size_t)c * e + j];
        dist += diff * diff;
      }
      if (dist < best_d) {
        best_d = dist;
        best = c;
      }
    }
    right += best == ps_dataset_labels(ds)[i];
  }
  g_free(cent);
  g_free(cnt);
  g_free(y);
  return (double)right / (double)(n - split);
}

static void test_synthetic_learnable(void)
{
  const int64_t shape[] = {28, 28, 1};
  PsDataset *ds = ps_dataset_new_synthetic(shape, 3, 10, 4000, 2024);
  double acc = centroid_accuracy(ds, 2000, FALSE);
  double chance = centroid_accuracy(ds, 2000, TRUE);
  g_test_message("nearest centroid: %.3f, with shuffled training labels: %.3f", acc, chance);
  g_assert_cmpfloat(acc, >=, 0.95);
  /* The structure is in the labels: without them it is chance. */
  g_assert_cmpfloat(chance, <, 0.3);
  ps_dataset_free(ds);

  const int64_t small[] = {16};
  ds = ps_dataset_new_synthetic(small, 1, 4, 2000, 5);
  acc = centroid_accuracy(ds, 1000, FALSE);
  g_assert_cmpfloat(acc, >=, 0.9);
  ps_dataset_free(ds);
}

/* ---- sampler ----------------------------------------------------------- */

/* Which example of ds is x (the synthetic examples are all distinct). */
static size_t find_example(const PsDataset *ds, const float *x)
{
  size_t n = ps_dataset_size(ds), e = ps_dataset_example_elems(ds);
  size_t found = n;
  for (size_t i = 0; i < n; i++)
    if (memcmp(ps_dataset_images(ds) + i * e, x, e * sizeof(float)) == 0) {
      g_assert_cmpuint(found, ==, n); /* exactly one match */
      found = i;
    }
  g_assert_cmpuint(found, <, n);
  return found;
}

/* Draws `epochs` epochs from s in batches of `batch` and returns the
 * example indices in order. */
static GArray *draw(const PsDataset *ds, PsSampler *s, int batch, int epochs)
{
  size_t n = ps_dataset_size(ds), e = ps_dataset_example_elems(ds);
  size_t total = n * (size_t)epochs;
  GArray *order = g_array_new(FALSE, FALSE, sizeof(guint));
  float *x = g_new(float, (size_t)batch * e);
  int32_t *y = g_new(int32_t, batch);
  while (order->len < total) {
    int b = (int)MIN((size_t)batch, total - order->len);
    ps_sampler_next(s, b, x, y);
    for (int i = 0; i < b; i++) {
      guint idx = (guint)find_example(ds, x + (size_t)i * e);
      g_assert_cmpint(y[i], ==, ps_dataset_labels(ds)[idx]);
      g_array_append_val(order, idx);
    }
  }
  g_free(x);
  g_free(y);
  return order;
}

static void test_sampler_permutation(void)
{
  const int64_t shape[] = {5};
  const size_t n = 97; /* prime, so batches straddle epochs */
  PsDataset *ds = ps_dataset_new_synthetic(shape, 1, 3, n, 11);
  PsSampler *s = ps_sampler_new(ds, TRUE, 99);
  GArray *order = draw(ds, s, 10, 4);
  ps_sampler_free(s);
  const guint *o = (const guint *)order->data;

  for (int ep = 0; ep < 4; ep++) {
    gboolean *seen = g_new0(gboolean, n);
    gboolean identity = TRUE;
    for (size_t i = 0; i < n; i++) {
      guint idx = o[(size_t)ep * n + i];
      g_assert_false(seen[idx]);
      seen[idx] = TRUE;
      identity = identity && idx == i;
    }
    g_free(seen);
    g_assert_false(identity);
    if (ep > 0) /* a new permutation each epoch */
      g_assert_false(memcmp(o + (size_t)ep * n, o + (size_t)(ep - 1) * n,
                            n * sizeof(guint)) == 0);
  }

  /* Same seed, same order, whatever the batch size; another seed differs. */
  s = ps_sampler_new(ds, TRUE, 99);
  GArray *again = draw(ds, s, 7, 4);
  ps_sampler_free(s);
  g_assert_cmpmem(again->data, again->len * sizeof(guint), order->data,
                  order->len * sizeof(guint));
  s = ps_sampler_new(ds, TRUE, 100);
  GArray *other = draw(ds, s, 10, 1);
  ps_sampler_free(s);
  g_assert_false(memcmp(other->data, order->data, n * sizeof(guint)) == 0);

  /* No shuffle: the identity, epoch after epoch. */
  s = ps_sampler_new(ds, FALSE, 99);
  GArray *plain = draw(ds, s, 13, 2);
  ps_sampler_free(s);
  for (size_t i = 0; i < 2 * n; i++)
    g_assert_cmpuint(g_array_index(plain, guint, i), ==, i % n);

  g_array_free(order, TRUE);
  g_array_free(again, TRUE);
  g_array_free(other, TRUE);
  g_array_free(plain, TRUE);
  ps_dataset_free(ds);
}

static void test_sampler_batch_larger_than_set(void)
{
  /* A batch bigger than the set spans epochs and still covers each epoch
   * exactly once. */
  const int64_t shape[] = {3};
  const size_t n = 6;
  PsDataset *ds = ps_dataset_new_synthetic(shape, 1, 2, n, 3);
  PsSampler *s = ps_sampler_new(ds, TRUE, 1);
  GArray *order = draw(ds, s, 15, 5);
  ps_sampler_free(s);
  for (int ep = 0; ep < 5; ep++) {
    guint mask = 0;
    for (size_t i = 0; i < n; i++)
      mask |= 1u << g_array_index(order, guint, (size_t)ep * n + i);
    g_assert_cmphex(mask, ==, (1u << n) - 1);
  }
  g_array_free(order, TRUE);
  ps_dataset_free(ds);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/dataset/fashion-mnist/train", test_fashion_train);
  g_test_add_func("/dataset/fashion-mnist/test", test_fashion_test);
#define ADD(path, fn) g_test_add(path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD("/dataset/idx/small-good", test_small_good);
  ADD("/dataset/idx/missing", test_missing);
  ADD("/dataset/idx/not-gzip", test_not_gzip);
  ADD("/dataset/idx/bad-magic", test_bad_magic);
  ADD("/dataset/idx/truncated-data", test_truncated_data);
  ADD("/dataset/idx/truncated-gzip", test_truncated_gzip);
  ADD("/dataset/idx/count-mismatch", test_count_mismatch);
  ADD("/dataset/idx/label-range", test_label_range);
#undef ADD
  g_test_add_func("/dataset/synthetic/deterministic", test_synthetic_deterministic);
  g_test_add_func("/dataset/synthetic/learnable", test_synthetic_learnable);
  g_test_add_func("/dataset/sampler/permutation", test_sampler_permutation);
  g_test_add_func("/dataset/sampler/batch-larger-than-set", test_sampler_batch_larger_than_set);
  return g_test_run();
}

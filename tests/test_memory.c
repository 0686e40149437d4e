/* test_memory.c: what a training step keeps for backward, per layer and per
 * model, against hand counts and against Korthikanti et al. 2022's closed
 * form for a transformer layer ("Reducing Activation Recomputation in Large
 * Transformer Models", section 4.1).
 *
 * Invariant checked: a tensor two layers need is kept once, a tensor no
 * kernel writes (an element-wise output fused into its consumers) is not
 * kept, statistics are float32 whatever the activation precision. */
#include "common/json.h"
#include "model/layers.h"

#include <string.h>

static char *model_path(const char *name)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *file = g_strdup_printf("%s.json", name);
  return g_build_filename(dir && *dir ? dir : ".", "models", file, NULL);
}

/* Parses a model written with ' for " (to keep the C readable). */
static PsModel *model_text(const char *text)
{
  g_autofree char *t = g_strdelimit(g_strdup(text), "'", '"');
  GError *err = NULL;
  json_object *o = ps_json_parse(t, "t.json", &err);
  g_assert_no_error(err);
  PsModel *m = ps_model_from_json(o, "t.json", "", &err);
  g_assert_no_error(err);
  json_object_put(o);
  return m;
}

static int find_layer(const PsModel *m, const char *name)
{
  for (int i = 0; i < m->n_layers; i++)
    if (strcmp(m->layers[i].name, name) == 0)
      return i;
  g_error("no layer %s", name);
  return -1;
}

/* Bytes layers [first, last] keep over `batch` at `act` bytes. */
static int64_t kept(const PsModel *m, int first, int last, int64_t batch, int act)
{
  int64_t b = 0;
  for (int i = first; i <= last; i++)
    b += ps_layer_kept_bytes(&m->layers[i], batch, act);
  return b;
}

/* Korthikanti et al. count 34 s b h + 5 a s^2 b bytes per layer in 16 bits:
 * attention 11 s b h + 5 a s^2 b (the QKV input 2, Q and K 4, V 2, the
 * output projection's input 2, the output dropout mask 1; the softmax
 * output 2 a s^2 b, its dropout mask a s^2 b and the dropout's output 2 a
 * s^2 b), MLP 19 s b h (the inputs of the two linears 2 + 8, GELU's input
 * 8, the dropout mask 1) and the two layer norms' inputs 4 s b h.
 * models/bert-large.json has BERT's dropout and keeps its masks (2 s b h
 * + a s^2 b, one byte an element), but not the dropped-out
 * probabilities (2 a s^2 b): the kernels that read them make them again
 * from the kept softmax output and mask.  Fused as XLA does, GELU's
 * output (fc2's input, 8 s b h) is recomputed from its kept input rather
 * than stored.  The paper leaves out the norms' statistics: here mean and
 * reciprocal deviation per row, float32, for each of the two norms (16 s
 * b).  So 26 s b h + 3 a s^2 b + 16 s b. */
static void test_bert_layer_korthikanti(void)
{
  g_autofree char *path = model_path("bert-large");
  GError *err = NULL;
  PsModel *m = ps_model_load_file(path, &err);
  g_assert_no_error(err);
  const int64_t s = 512, h = 1024, a = 16, b = 48;
  int first = find_layer(m, "layer2.self.body.attn"), last = find_layer(m, "layer2.ln2");
  /* attn, drop, add, ln1, fc1, gelu, fc2, drop, add, ln2 */
  g_assert_cmpint(last - first, ==, 9);
  int64_t closed = 26 * s * b * h + 3 * a * s * s * b + 16 * s * b;
  g_assert_cmpint(kept(m, first, last, b, 2), ==, closed);
  /* the paper's count, with GELU's output and the dropped-out
   * probabilities stored and no statistics, is what the layer would be
   * with those differences put back */
  int64_t paper = 34 * s * b * h + 5 * a * s * s * b;
  g_assert_cmpint(closed - 16 * s * b + 8 * s * b * h + 2 * a * s * s * b, ==, paper);
  /* the masks: one byte per score of the probabilities, per element of
   * each sub-layer's output */
  g_assert_cmpint(m->layers[first].mask_elems, ==, a * s * s);
  g_assert_cmpint(m->layers[first + 1].mask_elems, ==, s * h);
  g_assert_cmpint(m->layers[first + 1].act_elems, ==, 0);
  /* fc2 keeps nothing: its input is GELU's output, never written */
  g_assert_cmpint(m->layers[find_layer(m, "layer2.ffn.body.fc2")].act_elems, ==, 0);
  g_assert_cmpint(m->layers[find_layer(m, "layer2.ffn.body.gelu")].act_elems, ==, s * 4 * h);
  /* attention keeps its input once (the previous ln2's output), q, k, v,
   * the context and the probabilities, not the scores before the softmax */
  g_assert_cmpint(m->layers[first].act_elems, ==, 5 * s * h + a * s * s);
  /* float32 statistics: 4 bytes at any activation precision */
  const PsLayer *ln = &m->layers[last];
  g_assert_cmpint(ln->stat_elems, ==, 2 * s);
  g_assert_cmpint(ps_layer_kept_bytes(ln, 1, 2), ==, 2 * s * h + 4 * 2 * s);
  g_assert_cmpint(ps_layer_kept_bytes(ln, 1, 4), ==, 4 * s * h + 4 * 2 * s);
  ps_model_free(m);
}

/* dense -> gelu -> dense on (S, D), F wide: the first dense keeps its input
 * x (S D), gelu its input h (S F); the second dense's input gelu(h) is
 * recomputed from h by the kernels that read it, so it keeps nothing; the
 * loss keeps its probabilities (S D).  With tanh instead, backward reads
 * tanh's output, the very buffer the second dense reads: kept once. */
static void test_dense_gelu_dense(void)
{
  const int64_t S = 6, D = 8, F = 20, B = 3;
  static const char *const acts[] = {"gelu", "relu", "tanh"};
  for (guint k = 0; k < G_N_ELEMENTS(acts); k++) {
    g_autofree char *text = g_strdup_printf(
        "{'input': {'shape': [%d, %d], 'classes': %d}, 'layers': ["
        "{'type': 'dense', 'units': %d}, {'type': '%s'}, {'type': 'dense', 'units': %d},"
        "{'type': 'softmax_xent'}]}",
        (int)S, (int)D, (int)D, (int)F, acts[k], (int)D);
    PsModel *m = model_text(text);
    g_assert_cmpint(m->layers[0].act_elems, ==, S * D);
    g_assert_cmpint(m->layers[1].act_elems, ==, S * F);
    g_assert_cmpint(m->layers[2].act_elems, ==, 0);
    g_assert_cmpint(kept(m, 0, 2, B, 2), ==, (S * D + S * F) * B * 2);
    g_assert_cmpint(m->act_elems, ==, S * D + S * F + S * D);
    ps_model_free(m);
  }
}

/* conv -> batchnorm -> relu -> conv: the first conv keeps the image, batch
 * norm its input (the conv's output) and per channel a mean and a
 * reciprocal deviation in float32; its normalization is deferred into its
 * consumer, so neither its output nor relu's is written, and the second
 * conv's input is recomputed from the first conv's output. */
static void test_conv_bn_relu(void)
{
  PsModel *m = model_text("{'input': {'shape': [8, 8, 3], 'classes': 10}, 'layers': ["
                          "{'type': 'conv2d', 'filters': 4, 'kernel': 3, 'padding': 'same'},"
                          "{'type': 'batchnorm'}, {'type': 'relu'},"
                          "{'type': 'conv2d', 'filters': 4, 'kernel': 3, 'padding': 'same'},"
                          "{'type': 'global_avgpool'}, {'type': 'dense', 'units': 10},"
                          "{'type': 'softmax_xent'}]}");
  g_assert_cmpint(m->layers[0].act_elems, ==, 8 * 8 * 3);
  g_assert_cmpint(m->layers[1].act_elems, ==, 8 * 8 * 4);
  g_assert_cmpint(m->layers[1].stat_elems, ==, 2 * 4);
  g_assert_cmpint(m->layers[2].act_elems, ==, 0);
  g_assert_cmpint(m->layers[3].act_elems, ==, 0);
  g_assert_cmpint(kept(m, 0, 3, 5, 2), ==, (8 * 8 * 3 + 8 * 8 * 4) * 5 * 2 + 2 * 4 * 4 * 5);
  ps_model_free(m);
}

/* A view (flatten) is its input's buffer: two readers of the image, one
 * before and one after the reshape, keep it once. */
static void test_view_shares(void)
{
  PsModel *m = model_text("{'input': {'shape': [4, 5], 'classes': 3}, 'layers': ["
                          "{'type': 'tanh'}, {'type': 'flatten'}, {'type': 'dense', 'units': 3},"
                          "{'type': 'softmax_xent'}]}");
  g_assert_cmpint(m->layers[0].act_elems, ==, 20); /* tanh's output */
  g_assert_cmpint(m->layers[2].act_elems, ==, 0);  /* the same buffer, reshaped */
  g_assert_cmpint(m->act_elems, ==, 20 + 3);
  ps_model_free(m);
}

/* Pipeline stages of dense -> relu -> dense -> relu -> dense: a stage
 * that starts at the second dense needs relu1's output, which the model
 * never writes (relu1 keeps its input on the stage before): the stage
 * holds the received tensor itself.  A stage that starts at relu1 keeps
 * relu1's input, counted by relu1 already. */
static void test_stage_boundary(void)
{
  PsModel *m = model_text("{'input': {'shape': [8], 'classes': 3}, 'layers': ["
                          "{'type': 'dense', 'units': 16}, {'type': 'relu'},"
                          "{'type': 'dense', 'units': 16}, {'type': 'relu'},"
                          "{'type': 'dense', 'units': 3}, {'type': 'softmax_xent'}]}");
  g_assert_cmpint(ps_model_boundary_elems(m, 0, 6), ==, 0);
  g_assert_cmpint(ps_model_boundary_elems(m, 2, 4), ==, 16);
  g_assert_cmpint(ps_model_boundary_elems(m, 1, 3), ==, 0);
  g_assert_cmpint(ps_model_boundary_elems(m, 4, 6), ==, 16);
  int64_t w2 = 16 * 16 + 16;
  g_assert_cmpint(ps_model_memory_bytes(m, 2, 4, 5, 0, 4), ==, w2 * 4 * 2 + (16 + 16) * 5 * 4);
  /* the whole model: the input, the relus' inputs, the probabilities */
  g_assert_cmpint(ps_model_memory_bytes(m, 0, 6, 5, 0, 2), ==,
                  (8 * 16 + 16 + w2 + 16 * 3 + 3) * 4 * 2 + (8 + 16 + 16 + 3) * 5 * 2);
  ps_model_free(m);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/memory/bert-layer/korthikanti", test_bert_layer_korthikanti);
  g_test_add_func("/memory/dense-gelu-dense/hand-count", test_dense_gelu_dense);
  g_test_add_func("/memory/conv-bn-relu/hand-count", test_conv_bn_relu);
  g_test_add_func("/memory/view/shared", test_view_shares);
  g_test_add_func("/memory/stage-boundary", test_stage_boundary);
  return g_test_run();
}

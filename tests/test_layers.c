/* test_layers.c: model descriptions, their shapes and costs, against closed
 * forms written here as plain loops and against published figures.
 *
 * Invariant checked for every model loaded: each layer's in_shape is the
 * out_shape of the layer its input_from names (the model input for -1),
 * ADD joins two equal shapes, names are unique and totals are the sums. */
#include "common/json.h"
#include "model/layer-private.h"
#include "model/layers.h"

#include <math.h>
#include <string.h>

/* -------------------------------------------------------------- helpers */

static char *model_path(const char *name)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *file = g_strdup_printf("%s.json", name);
  return g_build_filename(dir && *dir ? dir : ".", "models", file, NULL);
}

static void check_invariants(const PsModel *m)
{
  g_autoptr(GHashTable) names = g_hash_table_new(g_str_hash, g_str_equal);
  int64_t params = 0, act = 0;
  double fwd = 0, bwd = 0;
  g_assert_cmpint(m->n_layers, >, 0);
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *L = &m->layers[i];
    g_assert_nonnull(L->name);
    if (g_hash_table_contains(names, L->name))
      g_error("%s: duplicate name %s", m->name, L->name);
    g_hash_table_add(names, L->name);
    g_assert_cmpint(L->input_from, <, i);
    g_assert_cmpint(L->input_from, >=, -1);
    int rank = L->input_from < 0 ? m->in_rank : m->layers[L->input_from].out_rank;
    const int64_t *shape = L->input_from < 0 ? m->in_shape : m->layers[L->input_from].out_shape;
    g_assert_cmpint(L->in_rank, ==, rank);
    for (int d = 0; d < rank; d++)
      g_assert_cmpint(L->in_shape[d], ==, shape[d]);
    if (L->kind == PS_LAYER_ADD) {
      g_assert_cmpint(L->shortcut_of, >=, 0);
      g_assert_cmpint(L->shortcut_of, <, i);
      /* body output, then the shortcut's layers (if any) right before */
      if (L->shortcut_from == i - 1)
        g_assert_cmpint(L->input_from, <, L->shortcut_from);
      else
        g_assert_cmpint(L->input_from, ==, i - 1);
      int sr = L->shortcut_from < 0 ? m->in_rank : m->layers[L->shortcut_from].out_rank;
      const int64_t *ss =
          L->shortcut_from < 0 ? m->in_shape : m->layers[L->shortcut_from].out_shape;
      g_assert_cmpint(sr, ==, L->in_rank);
      for (int d = 0; d < sr; d++)
        g_assert_cmpint(ss[d], ==, L->in_shape[d]);
      /* the block's first layer reads what the shortcut reads */
      g_assert_cmpint(m->layers[L->shortcut_of].input_from, <, L->shortcut_of);
    }
    g_assert_cmpint(L->n_mm, >=, 0);
    g_assert_cmpint(L->n_mm, <=, PS_MAX_MATMULS);
    g_assert_cmpfloat(L->fwd_flops, >=, 0);
    g_assert_cmpfloat(L->bwd_flops, >=, 0);
    g_assert_cmpfloat(L->fwd_bytes, >=, 0);
    g_assert_cmpint(L->params, >=, 0);
    params += L->params;
    act += L->act_elems;
    fwd += L->fwd_flops;
    bwd += L->bwd_flops;
  }
  g_assert_cmpint(m->params, ==, params);
  g_assert_cmpint(m->act_elems, ==, act);
  g_assert_cmpfloat(fabs(m->fwd_flops - fwd), <=, 1e-9 * fwd);
  g_assert_cmpfloat(fabs(m->bwd_flops - bwd), <=, 1e-9 * bwd);
  g_assert_cmpint(m->layers[m->n_layers - 1].kind, ==, PS_LAYER_SOFTMAX_XENT);
}

static PsModel *load_named(const char *name)
{
  g_autofree char *path = model_path(name);
  GError *err = NULL;
  PsModel *m = ps_model_load_file(path, &err);
  g_assert_no_error(err);
  g_assert_nonnull(m);
  g_assert_cmpstr(m->name, ==, name);
  g_assert_cmpuint(strlen(m->description), >, 20);
  check_invariants(m);
  return m;
}

/* Parses a model written with ' for " (to keep the C readable). */
static PsModel *model_from_text(const char *text, const char *file, GError **error)
{
  g_autofree char *t = g_strdelimit(g_strdup(text), "'", '"');
  GError *perr = NULL;
  json_object *o = ps_json_parse(t, file, &perr);
  if (!o)
    g_error("test JSON does not parse: %s", perr->message);
  PsModel *m = ps_model_from_json(o, file, "", error);
  json_object_put(o);
  if (m)
    check_invariants(m);
  return m;
}

static PsModel *model_ok(const char *text)
{
  GError *err = NULL;
  PsModel *m = model_from_text(text, "t.json", &err);
  g_assert_no_error(err);
  return m;
}

static double matmul_flops(const PsModel *m)
{
  double f = 0;
  for (int i = 0; i < m->n_layers; i++)
    for (int j = 0; j < m->layers[i].n_mm; j++) {
      const PsMatmul *mm = &m->layers[i].mm[j];
      f += 2.0 * (double)mm->rows * (double)mm->k * (double)mm->n * (double)mm->count;
    }
  return f;
}

static const PsLayer *find_layer(const PsModel *m, const char *name)
{
  for (int i = 0; i < m->n_layers; i++)
    if (strcmp(m->layers[i].name, name) == 0)
      return &m->layers[i];
  g_error("no layer %s in %s", name, m->name);
  return NULL;
}

/* ------------------------------------------------------------- ResNet-50 */

/* ResNet-50 v1.5 by the architecture table of He et al. 2016 (Table 1),
 * counted with plain loops: parameters and multiply-adds per image. */
static void resnet50_reference(int64_t *params, double *macs)
{
  static const int blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  int64_t p = 7 * 7 * 3 * 64 + 2 * 64;
  double mac = 112.0 * 112 * 7 * 7 * 3 * 64;
  int64_t cin = 64, hw = 56; /* after the 3x3/2 max pool */
  for (int s = 0; s < 4; s++) {
    int64_t w = widths[s];
    for (int b = 0; b < blocks[s]; b++) {
      int stride = (b == 0 && s > 0) ? 2 : 1;
      int64_t hout = hw / stride;
      p += cin * w + 2 * w + 9 * w * w + 2 * w + w * 4 * w + 2 * 4 * w;
      mac += (double)(hw * hw) * (double)(cin * w);           /* 1x1 reduce */
      mac += (double)(hout * hout) * (double)(9 * w * w);     /* 3x3, strided */
      mac += (double)(hout * hout) * (double)(w * 4 * w);     /* 1x1 expand */
      if (b == 0) {
        p += cin * 4 * w + 2 * 4 * w;                         /* projection */
        mac += (double)(hout * hout) * (double)(cin * 4 * w);
      }
      cin = 4 * w;
      hw = hout;
    }
  }
  p += 2048 * 1000 + 1000;
  mac += 2048.0 * 1000;
  *params = p;
  *macs = mac;
}

static void test_resnet50_params(void)
{
  PsModel *m = load_named("resnet50");
  int64_t ref_params;
  double ref_macs;
  resnet50_reference(&ref_params, &ref_macs);
  /* published: 25,557,032 (torchvision and Keras ResNet50, including
   * batchnorm scale and shift, no conv biases) */
  g_assert_cmpfloat(fabs((double)m->params - 25557032.0), <=, 0.005 * 25557032.0);
  g_assert_cmpint(m->params, ==, ref_params);
  g_assert_false(m->numerics_supported);
  ps_model_free(m);
}

static void test_resnet50_flops(void)
{
  PsModel *m = load_named("resnet50");
  int64_t ref_params;
  double ref_macs;
  resnet50_reference(&ref_params, &ref_macs);
  /* The matrix work is exactly 2 FLOPs per multiply-add of the reference. */
  g_assert_cmpfloat(fabs(matmul_flops(m) - 2 * ref_macs), <=, 1e-9 * ref_macs);
  /* Published ~4.1 G multiply-adds per 224x224 image (v1.5: 4.09 G), i.e.
   * 8.2 GFLOP; ours adds batchnorm, relu, pooling and adds (~1%). */
  g_assert_cmpfloat(fabs(2 * ref_macs / 8.2e9 - 1), <, 0.02);
  g_assert_cmpfloat(m->fwd_flops, >=, 7.6e9);
  g_assert_cmpfloat(m->fwd_flops, <=, 8.4e9);
  g_assert_cmpfloat(m->fwd_flops - matmul_flops(m), <, 0.02 * m->fwd_flops);
  /* backward: twice the matmul work plus element-wise */
  g_assert_cmpfloat(m->bwd_flops, >=, 2 * matmul_flops(m));
  g_assert_cmpfloat(m->bwd_flops, <=, 2.1 * matmul_flops(m));

  /* shapes of the stage ends and the head */
  static const struct {
    const char *name;
    int64_t h, c;
  } ends[] = {{"conv1", 112, 64},
              {"pool1", 56, 64},
              {"stage1.block3.relu", 56, 256},
              {"stage2.block4.relu", 28, 512},
              {"stage3.block6.relu", 14, 1024},
              {"stage4.block3.relu", 7, 2048}};
  for (size_t i = 0; i < G_N_ELEMENTS(ends); i++) {
    const PsLayer *L = find_layer(m, ends[i].name);
    g_assert_cmpint(L->out_rank, ==, 3);
    g_assert_cmpint(L->out_shape[0], ==, ends[i].h);
    g_assert_cmpint(L->out_shape[1], ==, ends[i].h);
    g_assert_cmpint(L->out_shape[2], ==, ends[i].c);
  }
  /* a strided first block: body, then shortcut fed by the block input, then ADD */
  const PsLayer *conv2 = find_layer(m, "stage3.block1.res.body.conv2");
  g_assert_cmpint(conv2->stride, ==, 2);
  g_assert_cmpint(conv2->in_shape[0], ==, 28);
  g_assert_cmpint(conv2->out_shape[0], ==, 14);
  g_assert_cmpint(conv2->mm[0].rows, ==, 14 * 14);
  g_assert_cmpint(conv2->mm[0].k, ==, 3 * 3 * 256);
  g_assert_cmpint(conv2->mm[0].n, ==, 256);
  int first = (int)(find_layer(m, "stage3.block1.res.body.conv1") - m->layers);
  int sc = (int)(find_layer(m, "stage3.block1.res.shortcut.conv") - m->layers);
  const PsLayer *add = find_layer(m, "stage3.block1.res.add");
  g_assert_cmpint(add->kind, ==, PS_LAYER_ADD);
  g_assert_cmpint(add->shortcut_of, ==, first);
  g_assert_cmpint(m->layers[sc].input_from, ==, m->layers[first].input_from);
  g_assert_cmpint(m->layers[sc - 1].kind, ==, PS_LAYER_BATCHNORM); /* body's bn3 */
  g_assert_cmpint(add->input_from, ==, sc - 1);
  g_assert_cmpint(add->shortcut_from, ==, sc + 1);
  /* an identity block: shortcut_from is the previous block's relu */
  const PsLayer *add2 = find_layer(m, "stage3.block2.res.add");
  g_assert_cmpint(add2->shortcut_from, ==,
                  (int)(find_layer(m, "stage3.block1.relu") - m->layers));
  ps_model_free(m);
}

/* ------------------------------------------------------------ transformers */

/* Parameters of a post-LN encoder layer (attention with biases, two
 * layernorms, FFN D->F->D with biases). */
static int64_t encoder_layer_params(int64_t d, int64_t f)
{
  return (4 * d * d + 4 * d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d;
}

static void test_bert_large(void)
{
  PsModel *m = load_named("bert-large");
  const int64_t V = 30522, S = 512, D = 1024, F = 4096, L = 24, H = 16;
  int64_t ref = V * D + S * D + 2 * D + L * encoder_layer_params(D, F) + (D * 2 + 2);
  g_assert_cmpint(m->params, ==, ref);
  /* The reference implementation's BERT-large has 335,141,888 parameters
   * including token-type embeddings (2 x 1024) and the pooler (1024 x 1024
   * + 1024), which this file leaves out, and no span head (1024 x 2 + 2). */
  g_assert_cmpint(m->params, ==, INT64_C(335141888) - 2 * 1024 - (1024 * 1024 + 1024) + 2050);
  /* The paper's rounded figure is 340M: within 2%. */
  g_assert_cmpfloat(fabs((double)m->params / 340e6 - 1), <, 0.02);
  g_assert_true(m->token_input);
  /* every kind has a kernel (the embedding too), but at 334M parameters it
   * is over the 2^28 that numerics compute: timing only; its per-token
   * head scores S labels per example */
  g_assert_false(m->numerics_supported);
  g_assert_cmpint(m->labels_per_example, ==, S);

  /* forward FLOPs: per layer 24 S D^2 (QKV, output, FFN with F = 4D)
   * + 4 S^2 D (scores and context), plus the head */
  double mm = (double)L * (8.0 * S * D * D + 4.0 * S * S * D + 4.0 * S * D * F) +
              2.0 * S * D * 2;
  g_assert_cmpfloat(fabs(matmul_flops(m) - mm), <=, 1e-9 * mm);
  /* the usual 2 x params x tokens estimate is within 15% of the matmul work
   * (attention's S^2 terms are the difference) */
  g_assert_cmpfloat(fabs(mm / (2.0 * (double)(m->params - V * D - S * D) * S) - 1), <, 0.15);

  const PsLayer *att = find_layer(m, "layer7.self.body.attn");
  g_assert_cmpint(att->heads, ==, H);
  g_assert_cmpint(att->n_mm, ==, 4);
  g_assert_cmpint(att->mm[1].count, ==, H);
  g_assert_cmpint(att->mm[1].k, ==, D / H);
  g_assert_cmpint(att->mm[1].n, ==, S);
  ps_model_free(m);
}

static void test_transformer_big(void)
{
  PsModel *m = load_named("transformer-big");
  const int64_t V = 32000, D = 1024, F = 4096;
  int64_t enc = encoder_layer_params(D, F);
  int64_t dec = enc + (4 * D * D + 4 * D) + 2 * D; /* + the cross-attention stand-in */
  int64_t ref = V * D + 6 * enc + 6 * dec + D * V;
  g_assert_cmpint(m->params, ==, ref);
  /* Without the untied output copy (the paper ties it to the embedding),
   * within 2% of the published 213M. */
  g_assert_cmpfloat(fabs((double)(m->params - D * V) / 213e6 - 1), <, 0.02);
  ps_model_free(m);
}

static void test_attention_flops(void)
{
  const int64_t S = 48, D = 96, H = 8;
  for (int bias = 0; bias < 2; bias++) {
    g_autofree char *text = g_strdup_printf(
        "{'input': {'shape': [%d, %d], 'classes': %d}, 'layers': ["
        "{'type': 'attention', 'heads': %d, 'bias': %s}, {'type': 'softmax_xent'}]}",
        (int)S, (int)D, (int)D, (int)H, bias ? "true" : "false");
    PsModel *m = model_ok(text);
    const PsLayer *a = &m->layers[0];
    double mm = 2.0 * S * D * 3 * D + 2.0 * H * S * S * (D / H) + 2.0 * H * S * (D / H) * S +
                2.0 * S * D * D;
    g_assert_cmpfloat(mm, ==, 8.0 * S * D * D + 4.0 * S * S * D);
    double scores = (double)(H * S * S);
    double nb = bias ? 4.0 * S * D : 0;
    g_assert_cmpfloat(a->fwd_flops, ==, mm + 6 * scores + nb);
    g_assert_cmpfloat(a->bwd_flops, ==, 2 * mm + 5 * scores + nb);
    g_assert_cmpint(a->params, ==, 4 * D * D + (bias ? 4 * D : 0));
    g_assert_cmpint(a->out_shape[0], ==, S);
    g_assert_cmpint(a->out_shape[1], ==, D);
    g_assert_cmpint(a->act_elems, ==, 5 * S * D + H * S * S);
    ps_model_free(m);
  }
}

/* ------------------------------------------------------------ small nets */

static void test_mlp(void)
{
  PsModel *m = load_named("mlp");
  g_assert_cmpint(m->params, ==, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  g_assert_cmpint(m->params, ==, 235146);
  g_assert_true(m->numerics_supported);
  g_assert_cmpint(m->n_layers, ==, 7);
  g_assert_cmpint(m->layers[0].kind, ==, PS_LAYER_FLATTEN);
  g_assert_cmpint(m->layers[0].out_shape[0], ==, 784);
  const PsLayer *d1 = &m->layers[1];
  g_assert_cmpint(d1->mm[0].rows, ==, 1);
  g_assert_cmpint(d1->mm[0].k, ==, 784);
  g_assert_cmpint(d1->mm[0].n, ==, 256);
  /* forward: 2 per multiply-add, + 1 per bias, + 1 per relu output, + 5
   * per logit in the softmax */
  double fwd = 2.0 * (784 * 256 + 256 * 128 + 128 * 10) + (256 + 128 + 10) + (256 + 128) +
               5 * 10;
  g_assert_cmpfloat(m->fwd_flops, ==, fwd);

  /* memory: weights, gradients and 2 optimizer slots at 4 bytes, and the
   * saved activations: the first dense's input 784 (the image: flatten is
   * a view), the relus' inputs 256 + 128 (their outputs, the next denses'
   * inputs, are recomputed from them, never written), probabilities 10 */
  int64_t act = 784 + 256 + 128 + 10;
  g_assert_cmpint(m->act_elems, ==, act);
  g_assert_cmpint(ps_model_memory_bytes(m, 0, m->n_layers, 32, 2, 2), ==,
                  235146 * 4 * 4 + act * 32 * 2);
  g_assert_cmpint(ps_model_memory_bytes(m, 0, -1, 32, 2, 2), ==,
                  235146 * 4 * 4 + act * 32 * 2);
  /* a pipeline stage of layers [1, 3): dense1 and relu1 */
  g_assert_cmpint(ps_model_memory_bytes(m, 1, 3, 8, 0, 4), ==,
                  (784 * 256 + 256) * 4 * 2 + (784 + 256) * 8 * 4);
  g_assert_cmpint(ps_model_memory_bytes(m, 2, 2, 8, 1, 4), ==, 0);
  ps_model_free(m);
}

static void test_cnn(void)
{
  PsModel *m = load_named("cnn");
  g_assert_true(m->numerics_supported);
  g_assert_cmpint(m->params,
                  ==, (9 * 1 * 32 + 32) + (9 * 32 * 64 + 64) + (7 * 7 * 64 * 128 + 128) +
                          (128 * 10 + 10));
  const PsLayer *flat = find_layer(m, "flatten1");
  g_assert_cmpint(flat->out_shape[0], ==, 7 * 7 * 64);
  const PsLayer *c2 = find_layer(m, "conv2d2");
  g_assert_cmpint(c2->out_shape[0], ==, 14);
  g_assert_cmpint(c2->mm[0].rows, ==, 14 * 14);
  g_assert_cmpint(c2->mm[0].k, ==, 9 * 32);
  g_assert_cmpint(c2->mm[0].n, ==, 64);
  ps_model_free(m);
}

static void test_conv_shapes(void)
{
  static const int sizes[] = {5, 7, 28, 31};
  static const int kernels[] = {1, 3, 5};
  static const int strides[] = {1, 2, 3};
  const int cin = 3, f = 8;
  for (size_t a = 0; a < G_N_ELEMENTS(sizes); a++)
    for (size_t b = 0; b < G_N_ELEMENTS(kernels); b++)
      for (size_t c = 0; c < G_N_ELEMENTS(strides); c++)
        for (int same = 0; same < 2; same++) {
          int h = sizes[a], k = kernels[b], s = strides[c];
          if (!same && k > h)
            continue;
          g_autofree char *text = g_strdup_printf(
              "{'input': {'shape': [%d, %d, %d], 'classes': %d}, 'layers': ["
              "{'type': 'conv2d', 'filters': %d, 'kernel': %d, 'stride': %d, 'padding': '%s'},"
              "{'type': 'global_avgpool'}, {'type': 'softmax_xent'}]}",
              h, h + 1, cin, f, f, k, s, same ? "same" : "valid");
          PsModel *m = model_ok(text);
          const PsLayer *L = &m->layers[0];
          /* closed forms: same -> ceil(n / s); valid -> floor((n - k) / s) + 1 */
          int oh = same ? (int)ceil((double)h / s) : (int)floor((double)(h - k) / s) + 1;
          int ow = same ? (int)ceil((double)(h + 1) / s) : (int)floor((double)(h + 1 - k) / s) + 1;
          g_assert_cmpint(L->out_shape[0], ==, oh);
          g_assert_cmpint(L->out_shape[1], ==, ow);
          g_assert_cmpint(L->out_shape[2], ==, f);
          g_assert_cmpint(L->params, ==, k * k * cin * f + f);
          g_assert_cmpint(L->mm[0].rows, ==, oh * ow);
          g_assert_cmpint(L->mm[0].k, ==, k * k * cin);
          g_assert_cmpfloat(L->fwd_flops, ==, 2.0 * oh * ow * k * k * cin * f + oh * ow * f);
          g_assert_cmpint(m->layers[1].out_shape[0], ==, f);
          ps_model_free(m);
        }

  /* pooling: valid by default, stride defaults to size */
  PsModel *m = model_ok("{'input': {'shape': [9, 10, 4], 'classes': 4}, 'layers': ["
                        "{'type': 'maxpool', 'size': 2}, {'type': 'avgpool', 'size': 3,"
                        " 'stride': 1}, {'type': 'maxpool', 'size': 3, 'stride': 2, 'padding':"
                        " 'same'}, {'type': 'global_avgpool'}, {'type': 'softmax_xent'}]}");
  g_assert_cmpint(m->layers[0].out_shape[0], ==, 4);
  g_assert_cmpint(m->layers[0].out_shape[1], ==, 5);
  g_assert_cmpint(m->layers[1].out_shape[0], ==, 2);
  g_assert_cmpint(m->layers[1].out_shape[1], ==, 3);
  g_assert_cmpint(m->layers[2].out_shape[0], ==, 1);
  g_assert_cmpint(m->layers[2].out_shape[1], ==, 2);
  g_assert_false(m->numerics_supported); /* same-padded pooling */
  ps_model_free(m);
}

static void test_dense_flops(void)
{
  for (int bias = 0; bias < 2; bias++) {
    g_autofree char *text =
        g_strdup_printf("{'input': {'shape': [300], 'classes': 70}, 'layers': ["
                        "{'type': 'dense', 'units': 70, 'bias': %s}, {'type': 'softmax_xent'}]}",
                        bias ? "true" : "false");
    PsModel *m = model_ok(text);
    const PsLayer *d = &m->layers[0];
    g_assert_cmpfloat(d->fwd_flops, ==, 2.0 * 300 * 70 + (bias ? 70 : 0));
    g_assert_cmpfloat(d->bwd_flops, ==, 4.0 * 300 * 70 + (bias ? 70 : 0));
    g_assert_cmpint(d->params, ==, 300 * 70 + (bias ? 70 : 0));
    g_assert_cmpfloat(d->fwd_bytes, ==, 300 + d->params + 70);
    ps_model_free(m);
  }
  /* on a sequence the rows are the positions */
  PsModel *m = model_ok("{'input': {'shape': [12, 30], 'classes': 5}, 'layers': ["
                        "{'type': 'dense', 'units': 5, 'bias': false}, {'type': 'softmax_xent'}]}");
  g_assert_cmpint(m->layers[0].mm[0].rows, ==, 12);
  g_assert_cmpfloat(m->layers[0].fwd_flops, ==, 2.0 * 12 * 30 * 5);
  g_assert_cmpint(m->layers[0].out_rank, ==, 2);
  ps_model_free(m);
}

static void test_names_and_groups(void)
{
  PsModel *m = model_ok(
      "{'input': {'shape': [4, 4, 1], 'classes': 16}, 'layers': [{'type': 'flatten'},"
      " {'type': 'repeat', 'name': 'blk', 'count': 2, 'body': [{'type': 'residual', 'body': ["
      "{'type': 'dense', 'units': 16}, {'type': 'relu'}]}]},"
      " {'type': 'repeat', 'name': 'x', 'first': 3, 'count': 1, 'body': [{'type': 'tanh'},"
      " {'type': 'residual', 'name': 'r', 'body': [{'type': 'dense', 'units': 8}],"
      " 'shortcut': [{'type': 'dense', 'units': 8, 'name': 'proj'}]}]},"
      " {'type': 'dense', 'units': 16}, {'type': 'softmax_xent'}]}");
  static const char *const want[] = {
    "flatten1", "blk1.body.dense1", "blk1.body.relu1", "blk1.add",  "blk2.body.dense1",
    "blk2.body.relu1", "blk2.add", "x3.tanh1", "x3.r.body.dense1", "x3.r.shortcut.proj",
    "x3.r.add", "dense1", "softmax_xent1",
  };
  g_assert_cmpint(m->n_layers, ==, G_N_ELEMENTS(want));
  for (int i = 0; i < m->n_layers; i++)
    g_assert_cmpstr(m->layers[i].name, ==, want[i]);
  g_assert_cmpint(m->layers[3].shortcut_of, ==, 1);
  g_assert_cmpint(m->layers[3].shortcut_from, ==, 0); /* identity: flatten's output */
  g_assert_cmpint(m->layers[6].shortcut_of, ==, 4);
  g_assert_cmpint(m->layers[6].shortcut_from, ==, 3);
  g_assert_cmpint(m->layers[9].input_from, ==, 7);  /* shortcut reads the block input */
  g_assert_cmpint(m->layers[10].input_from, ==, 8); /* add: body output ... */
  g_assert_cmpint(m->layers[10].shortcut_from, ==, 9); /* ... and shortcut output */
  g_assert_cmpint(m->layers[10].shortcut_of, ==, 8);
  g_assert_cmpint(m->layers[11].input_from, ==, 10);
  /* identity and projection shortcuts both have kernels (net.c) */
  g_assert_true(m->numerics_supported);
  g_assert_cmpfloat(m->layers[3].fwd_flops, ==, 16);

  /* an inline model reports paths under its own key */
  json_object *o = ps_json_parse("{\"model\": {\"input\": {\"shape\": [4], \"classes\": 2},"
                                 " \"layers\": [{\"type\": \"dense\", \"units\": 2},"
                                 " {\"type\": \"dense\", \"units\": -1}]}}",
                                 "exp.json", NULL);
  GError *err = NULL;
  g_assert_null(ps_model_from_json(json_object_object_get(o, "model"), "exp.json", "model", &err));
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  if (!strstr(err->message, "exp.json: model.layers[1].units: must be > 0, got -1"))
    g_error("%s", err->message);
  g_clear_error(&err);
  json_object_put(o);
  ps_model_free(m);
}

/* Nested and numbered repeats of 11 or more never make one name twice
 * (once "x1" + "11" and "x11" + "1" were both "x111", refusing a valid
 * model): a repeat whose name ends in a digit numbers its copies NAME_<i>.
 * A name the user gives that equals a generated one is a clear error. */
static void test_nested_repeat_names(void)
{
  /* a named repeat around an unnamed one: x1_1 ... x11_11 */
  PsModel *m = model_ok(
      "{'input': {'shape': [8], 'classes': 4}, 'layers': ["
      " {'type': 'repeat', 'name': 'x', 'count': 11, 'body': ["
      "  {'type': 'repeat', 'count': 11, 'body': [{'type': 'dense', 'units': 8}]}]},"
      " {'type': 'dense', 'units': 4}, {'type': 'softmax_xent'}]}");
  g_assert_cmpint(m->n_layers, ==, 11 * 11 + 2);
  for (int o = 1, i = 0; o <= 11; o++)
    for (int k = 1; k <= 11; k++, i++) {
      g_autofree char *want = g_strdup_printf("x%d_%d", o, k);
      g_assert_cmpstr(m->layers[i].name, ==, want);
    }
  ps_model_free(m);

  /* unnamed all the way down, twelve to a level, in a list of twelve
   * unnamed repeats (repeat1 ... repeat12): check_invariants finds no
   * duplicate among the 2 * 12^3 layers */
  GString *text = g_string_new("{'input': {'shape': [8], 'classes': 4}, 'layers': [");
  for (int r = 0; r < 12; r++)
    g_string_append(text, "{'type': 'repeat', 'count': 12, 'body': [{'type': 'repeat',"
                          " 'count': 12, 'body': [{'type': 'dense', 'units': 8},"
                          " {'type': 'relu'}]}]}, ");
  g_string_append(text, "{'type': 'dense', 'units': 4}, {'type': 'softmax_xent'}]}");
  m = model_ok(text->str);
  g_string_free(text, TRUE);
  g_assert_cmpint(m->n_layers, ==, 12 * 12 * 12 * 2 + 2);
  g_assert_cmpstr(m->layers[0].name, ==, "repeat1_1_1.dense1");
  g_assert_cmpstr(find_layer(m, "repeat1_12_1.relu1")->name, ==, "repeat1_12_1.relu1");
  g_assert_cmpstr(find_layer(m, "repeat12_1_12.dense1")->name, ==, "repeat12_1_12.dense1");
  ps_model_free(m);

  /* a name given by the user that a repeat also generates */
  GError *err = NULL;
  m = model_from_text("{'input': {'shape': [8], 'classes': 4}, 'layers': ["
                      " {'type': 'dense', 'units': 8, 'name': 'x1_2'},"
                      " {'type': 'repeat', 'name': 'x', 'count': 2, 'body': ["
                      "  {'type': 'repeat', 'count': 2, 'body': [{'type': 'relu'}]}]},"
                      " {'type': 'dense', 'units': 4}, {'type': 'softmax_xent'}]}",
                      "clash.json", &err);
  g_assert_null(m);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  if (!strstr(err->message, "clash.json: layers[1].body[0].body[0]: duplicate layer name "
                            "'x1_2' (also used at layers[0]); a repeat names its copies "
                            "NAME<i>, or NAME_<i> when NAME ends in a digit"))
    g_error("%s", err->message);
  g_clear_error(&err);
}

static void test_describe(void)
{
  PsModel *m = load_named("cnn");
  GString *s = g_string_new(NULL);
  ps_model_describe(m, s);
  g_assert_nonnull(strstr(s->str, "cnn"));
  g_assert_nonnull(strstr(s->str, "conv2d2"));
  g_assert_nonnull(strstr(s->str, "(14, 14, 64)"));
  g_assert_nonnull(strstr(s->str, "18496"));  /* conv2d2's parameters */
  g_assert_nonnull(strstr(s->str, "421642")); /* the total */
  g_assert_cmpstr(ps_layer_kind_name(PS_LAYER_GLOBAL_AVGPOOL), ==, "global_avgpool");
  int64_t shape[3] = {7, 7, 64};
  g_assert_cmpint(ps_shape_elems(shape, 3), ==, 3136);
  g_assert_cmpint(ps_shape_elems(shape, 0), ==, 1);
  g_string_free(s, TRUE);
  ps_model_free(m);
}

/* ------------------------------------------------------------ ViT pieces */

/* Patch embedding (Dosovitskiy et al. 2021, eq. 1) of an (H, W, C) image
 * with patch P: S = (H/P)(W/P) tokens, one product S x P^2 C x D, P^2 C D
 * + D parameters plus S D positions; bias and positions each add 1 FLOP
 * per output forward and backward. */
static void test_patch_embedding(void)
{
  static const struct { int h, w, c, p, d, pos; } cases[] = {
    {28, 28, 1, 7, 64, 1}, {28, 28, 1, 4, 32, 1}, {12, 8, 3, 4, 10, 0}, {6, 6, 2, 6, 5, 1},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    int h = cases[i].h, w = cases[i].w, c = cases[i].c, p = cases[i].p, d = cases[i].d;
    int pos = cases[i].pos;
    g_autofree char *text = g_strdup_printf(
        "{'input': {'shape': [%d, %d, %d], 'classes': %d}, 'layers': ["
        "{'type': 'patch_embedding', 'size': %d, 'dim': %d, 'positions': %s},"
        "{'type': 'global_avgpool'}, {'type': 'softmax_xent'}]}",
        h, w, c, d, p, d, pos ? "true" : "false");
    PsModel *m = model_ok(text);
    const PsLayer *L = &m->layers[0];
    int64_t s = (int64_t)(h / p) * (w / p), k = (int64_t)p * p * c;
    g_assert_cmpint(L->kind, ==, PS_LAYER_PATCH_EMBEDDING);
    g_assert_cmpint(L->out_rank, ==, 2);
    g_assert_cmpint(L->out_shape[0], ==, s);
    g_assert_cmpint(L->out_shape[1], ==, d);
    g_assert_cmpint(L->params, ==, k * d + d + (pos ? s * d : 0));
    g_assert_cmpint(L->n_mm, ==, 1);
    g_assert_cmpint(L->mm[0].rows, ==, s);
    g_assert_cmpint(L->mm[0].k, ==, k);
    g_assert_cmpint(L->mm[0].n, ==, d);
    double mm = 2.0 * s * k * d, adds = (double)(s * d) * (pos ? 2 : 1);
    g_assert_cmpfloat(L->fwd_flops, ==, mm + adds);
    g_assert_cmpfloat(L->bwd_flops, ==, 2 * mm + adds);
    g_assert_cmpint(L->act_elems, ==, (int64_t)h * w * c);
    g_assert_true(L->positions == pos);
    /* the mean over tokens: (S, D) -> (D), 1 FLOP per input and a divide
     * per output */
    const PsLayer *g = &m->layers[1];
    g_assert_cmpint(g->out_rank, ==, 1);
    g_assert_cmpint(g->out_shape[0], ==, d);
    g_assert_cmpfloat(g->fwd_flops, ==, (double)(s * d + d));
    g_assert_cmpfloat(g->bwd_flops, ==, (double)(s * d));
    g_assert_true(m->numerics_supported);
    ps_model_free(m);
  }
  g_assert_cmpstr(ps_layer_kind_name(PS_LAYER_PATCH_EMBEDDING), ==, "patch_embedding");

  /* "causal" is kept for the numerics; batchnorm has kernels too */
  PsModel *m = model_ok("{'input': {'shape': [6, 8], 'classes': 8}, 'layers': ["
                        "{'type': 'attention', 'heads': 2, 'causal': true},"
                        "{'type': 'layernorm'}, {'type': 'global_avgpool'},"
                        "{'type': 'softmax_xent'}]}");
  g_assert_true(m->layers[0].causal);
  g_assert_true(m->numerics_supported);
  ps_model_free(m);
  m = model_ok("{'input': {'shape': [6, 8], 'classes': 8}, 'layers': ["
               "{'type': 'batchnorm'}, {'type': 'global_avgpool'}, {'type': 'softmax_xent'}]}");
  g_assert_true(m->numerics_supported);
  ps_model_free(m);
}

/* models/vit.json: the published ViT layout at a Fashion-MNIST size,
 * counted here from the architecture: patch 7 on 28x28x1 (16 tokens),
 * D = 64, 4 pre-LN blocks of attention (4 heads) and an MLP 128, a final
 * layernorm, token mean and a 10-way head.  Each block has the same
 * cost, and the block boundaries give 4 pipeline stages. */
static void test_vit(void)
{
  PsModel *m = load_named("vit");
  const int64_t S = 16, D = 64, F = 128, C = 10, L = 4, K = 49;
  int64_t block = (2 * D) + (4 * D * D + 4 * D) + (2 * D) + (D * F + F) + (F * D + D);
  int64_t ref = (K * D + D + S * D) + L * block + 2 * D + (D * C + C);
  g_assert_cmpint(m->params, ==, ref);
  g_assert_cmpint(m->params, ==, 138890);
  g_assert_true(m->numerics_supported);
  g_assert_cmpint(m->layers[0].kind, ==, PS_LAYER_PATCH_EMBEDDING);
  g_assert_cmpint(m->layers[0].out_shape[0], ==, S);

  /* blocks: [1, 9), [9, 17), ...; each ends in an ADD fed by the block's
   * input (identity shortcuts), and all cost the same */
  const int per_block = 8;
  g_assert_cmpint(m->n_layers, ==, 1 + L * per_block + 4);
  double fwd0 = 0, bwd0 = 0;
  for (int b = 0; b < L; b++) {
    int first = 1 + b * per_block, last = first + per_block - 1;
    double fwd = 0, bwd = 0;
    for (int i = first; i <= last; i++) {
      fwd += m->layers[i].fwd_flops;
      bwd += m->layers[i].bwd_flops;
    }
    if (b == 0) {
      fwd0 = fwd;
      bwd0 = bwd;
    }
    g_assert_cmpfloat(fwd, ==, fwd0);
    g_assert_cmpfloat(bwd, ==, bwd0);
    const PsLayer *add1 = &m->layers[first + 2], *add2 = &m->layers[last];
    g_assert_cmpint(add1->kind, ==, PS_LAYER_ADD);
    g_assert_cmpint(add2->kind, ==, PS_LAYER_ADD);
    g_assert_cmpint(add1->shortcut_from, ==, first - 1);
    g_assert_cmpint(add2->shortcut_from, ==, first + 2);
    g_assert_cmpint(m->layers[first].kind, ==, PS_LAYER_LAYERNORM);
    g_assert_cmpint(m->layers[first + 1].kind, ==, PS_LAYER_ATTENTION);
    g_assert_cmpint(m->layers[first + 1].heads, ==, 4);
  }
  /* the blocks carry nearly all the work: in stages of one block each,
   * the embedding adds under 10% to the first, the head under 2% to the
   * last */
  g_assert_cmpfloat(m->layers[0].fwd_flops, <, 0.1 * fwd0);
  double tail = 0;
  for (int i = 1 + L * per_block; i < m->n_layers; i++)
    tail += m->layers[i].fwd_flops;
  g_assert_cmpfloat(tail, <, 0.02 * fwd0);
  g_assert_cmpint(m->layers[m->n_layers - 3].kind, ==, PS_LAYER_GLOBAL_AVGPOOL);
  ps_model_free(m);
}

/* ----------------------------------------------------------- bad models */

#define IMG "{'input': {'shape': [28, 28, 1], 'classes': 10}, 'layers': "
#define SM "{'type': 'softmax_xent'}"
#define FL "{'type': 'flatten'}"
#define D10 "{'type': 'dense', 'units': 10}"

/* Model texts that must be refused, with the error's code and a part of
 * its message. */
typedef struct {
  const char *text;
  int code;
  const char *needle;
} BadModelCase;

static const BadModelCase bad_model_cases[] = {
  {IMG "[" FL ", {'type': 'densee', 'units': 10}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[1].type: unknown layer type 'densee' (expected one of: dense, conv2d"},
  {IMG "[" FL ", {'type': 'dense', 'units': 0}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[1].units: must be > 0, got 0"},
  {IMG "[" FL ", {'type': 'residual', 'body': [{'type': 'dense', 'units': 784},"
       " {'type': 'dense', 'units': 0}]}, " D10 ", " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[1].body[1].units: must be > 0, got 0"},
  {IMG "[" FL ", {'type': 'residual', 'body': [" D10 "]}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[1]: residual body output (10) does not match the shortcut output (784)"},
  {IMG "[" FL ", {'type': 'residual', 'body': [" D10 "], 'shortcut': [{'type': 'dense',"
       " 'units': 12}]}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "(10) does not match the shortcut output (12)"},
  {IMG "[" FL ", " D10 ", " SM ", {'type': 'relu'}]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[2]: softmax_xent must be the last layer"},
  {IMG "[" FL ", {'type': 'dense', 'units': 10, 'unitz': 3}, " SM "]}", PS_INPUT_ERROR_KEY,
   "bad.json: layers[1]: unknown key 'unitz' (expected one of: type, name, units, bias)"},
  {IMG "[{'type': 'conv2d', 'filters': 4, 'kernel': 3, 'padding': 'full'}, " FL ", " D10
       ", " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[0].padding: must be one of: valid, same; got 'full'"},
  {IMG "[" FL ", {'type': 'repeat', 'count': 0, 'body': [{'type': 'relu'}]}, " D10 ", " SM
       "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[1].count: must be > 0, got 0"},
  {IMG "[" FL ", {'type': 'repeat', 'count': 2, 'body': [{'type': 'dense', 'units': 0}]}, "
       SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[1].body[0].units: must be > 0, got 0"},
  {IMG "[" D10 ", " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[0]: dense needs a rank-1 or rank-2 input, got (28, 28, 1)"},
  {IMG "[" FL ", {'type': 'dense', 'units': 12}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[2]: softmax_xent input width 12 does not match input.classes = 10"},
  {IMG "[" FL ", {'type': 'conv2d', 'filters': 4, 'kernel': 3}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[1]: conv2d needs a rank-3 (H, W, C) input, got (784)"},
  {IMG "[" FL ", {'units': 10}, " SM "]}", PS_INPUT_ERROR_KEY,
   "bad.json: layers[1]: missing required key 'type'"},
  {IMG "[" FL ", {'type': 'dense', 'name': 'fc', 'units': 10}, {'type': 'relu', 'name':"
       " 'fc'}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[2]: duplicate layer name 'fc'"},
  {"{'input': {'shape': [16, 30], 'classes': 30}, 'layers': [{'type': 'attention', 'heads':"
   " 4}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[0]: d_model 30 is not divisible by heads 4"},
  {IMG "[{'type': 'embedding', 'vocab': 10, 'dim': 4}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[0]: embedding needs token ids"},
  {"{'input': {'shape': [16], 'classes': 10, 'tokens': true}, 'layers': [{'type':"
   " 'embedding', 'vocab': 10, 'dim': 4, 'lookup': 'onehot'}, " SM "]}",
   PS_INPUT_ERROR_VALUE,
   "bad.json: layers[0].lookup: must be one of: gather, matmul; got 'onehot'"},
  {"{'input': {'shape': [16], 'classes': 10, 'tokens': true}, 'layers': [" D10 ", " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[0]: dense cannot take token ids"},
  {IMG "[" FL ", {'type': 'dense', 'units': 'ten'}, " SM "]}", PS_INPUT_ERROR_TYPE,
   "bad.json: layers[1].units: must be an integer, got string"},
  {IMG "[" FL ", " D10 "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers: the last layer must be softmax_xent"},
  {"{'layers': [" SM "]}", PS_INPUT_ERROR_KEY, "bad.json: (root): missing required key 'input'"},
  {"{'input': {'shape': [28, 0], 'classes': 10}, 'layers': [" SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: input.shape[1]: must be a positive integer, got 0"},
  {IMG "[{'type': 'conv2d', 'filters': 4, 'kernel': 31, 'padding': 'valid'}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[0]: kernel 31 is larger than the input (28, 28, 1)"},
  {IMG "[" FL ", {'type': 'residual', 'body': []}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[1].body: must not be empty"},
  {IMG "[" FL ", {'type': 'residual', 'body': {}}, " SM "]}", PS_INPUT_ERROR_TYPE,
   "bad.json: layers[1].body: must be an array of layers"},
  {"{'input': {'shape': [28, 28, 1], 'classes': 10}, 'layer': []}", PS_INPUT_ERROR_KEY,
   "bad.json: (root): unknown key 'layer' (expected one of: name, description, notes, input,"
   " layers)"},
  {IMG "[" FL ", {'type': 'dense', 'units': 10, 'bias': 1}, " SM "]}", PS_INPUT_ERROR_TYPE,
   "bad.json: layers[1].bias: must be true or false, got integer"},
  {IMG "[" FL ", {'type': 'global_avgpool'}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[1]: global_avgpool needs a rank-3 (H, W, C) or rank-2 (S, D) input, got "
   "(784)"},
  {IMG "[{'type': 'patch_embedding', 'size': 5, 'dim': 8}, " SM "]}", PS_INPUT_ERROR_VALUE,
   "bad.json: layers[0]: patch size 5 does not divide the input (28, 28, 1) into whole "
   "patches"},
  {IMG "[" FL ", {'type': 'patch_embedding', 'size': 4, 'dim': 8}, " SM "]}",
   PS_INPUT_ERROR_VALUE, "bad.json: layers[1]: patch_embedding needs a rank-3 (H, W, C) input"},
  {IMG "[{'type': 'patch_embedding', 'size': 4}, " SM "]}", PS_INPUT_ERROR_KEY,
   "bad.json: layers[0]: missing required key 'dim'"},
  {IMG "[{'type': 'patch_embedding', 'size': 4, 'dim': 8, 'bias': false}, " SM "]}",
   PS_INPUT_ERROR_KEY,
   "bad.json: layers[0]: unknown key 'bias' (expected one of: type, name, size, dim, "
   "positions)"},
  {IMG "[" FL ", [1, 2], " SM "]}", PS_INPUT_ERROR_TYPE,
   "bad.json: layers[1]: must be an object, got array"},
  {IMG "[]}", PS_INPUT_ERROR_VALUE, "bad.json: layers: must not be empty"},
};

static void test_bad_models(void)
{
  const BadModelCase *cases = bad_model_cases;
  for (size_t i = 0; i < G_N_ELEMENTS(bad_model_cases); i++) {
    GError *err = NULL;
    PsModel *m = model_from_text(cases[i].text, "bad.json", &err);
    if (m)
      g_error("case %zu: model accepted", i);
    g_assert_nonnull(err);
    g_assert_true(err->domain == PS_INPUT_ERROR);
    if (err->code != cases[i].code || !strstr(err->message, cases[i].needle))
      g_error("case %zu: got code %d '%s', want code %d containing '%s'", i, err->code,
              err->message, cases[i].code, cases[i].needle);
    g_clear_error(&err);
  }

  GError *err = NULL;
  g_assert_null(ps_model_load_file("/nonexistent/model.json", &err));
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_clear_error(&err);
}

/* Every file shipped in models/ loads and keeps the invariants. */
static void test_all_model_files(void)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *mdir = g_build_filename(dir && *dir ? dir : ".", "models", NULL);
  GDir *d = g_dir_open(mdir, 0, NULL);
  g_assert_nonnull(d);
  int n = 0;
  const char *f;
  while ((f = g_dir_read_name(d)) != NULL) {
    if (!g_str_has_suffix(f, ".json"))
      continue;
    g_autofree char *path = g_build_filename(mdir, f, NULL);
    GError *err = NULL;
    PsModel *m = ps_model_load_file(path, &err);
    g_assert_no_error(err);
    check_invariants(m);
    ps_model_free(m);
    n++;
  }
  g_dir_close(d);
  g_assert_cmpint(n, >=, 5);
}

/* The layer table: one entry per kind, found by its kind, names distinct;
 * an entry a file may name parses; one with numerics plans and steps
 * backward unless it is a view; views, joins and the loss are lowered and
 * stored as such. */
static void test_layer_table(void)
{
  int entries = 0;
  for (int i = 0; ps_layer_table[i]; i++)
    entries++;
  g_assert_cmpint(entries, ==, PS_LAYER_N_KINDS);
  for (int k = 0; k < PS_LAYER_N_KINDS; k++) {
    const PsLayerOps *ops = ps_layer_ops((PsLayerKind)k);
    g_assert_nonnull(ops);
    g_assert_cmpint(ops->kind, ==, k);
    g_assert_cmpstr(ps_layer_kind_name((PsLayerKind)k), ==, ops->name);
    g_assert_true(ps_layer_kind_lower((PsLayerKind)k) == &ops->lower);
    g_assert_nonnull(ops->shape);
    g_assert_true((ops->keys == NULL) == (ops->parse == NULL));
    if (ops->forward) {
      g_assert_nonnull(ops->plan);
      g_assert_true(ops->view || ops->backward != NULL);
    }
    g_assert_true(ops->view == (ops->lower.lowering == PS_LOWER_VIEW));
    g_assert_true(ops->join == (ops->lower.lowering == PS_LOWER_JOIN));
    g_assert_nonnull(ops->lower.kernel);
    for (int j = 0; j < k; j++)
      g_assert_cmpstr(ps_layer_kind_name((PsLayerKind)j), !=, ops->name);
  }
  g_assert_true(ps_layer_ops(PS_LAYER_SOFTMAX_XENT)->loss);
  g_assert_true(ps_layer_ops(PS_LAYER_EMBEDDING)->takes_tokens);
  g_assert_true(ps_layer_kind_lower(PS_LAYER_CONV2D)->window_contraction);
  g_assert_false(ps_layer_kind_lower(PS_LAYER_DENSE)->window_contraction);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/layers/table", test_layer_table);
  g_test_add_func("/layers/resnet50/params", test_resnet50_params);
  g_test_add_func("/layers/resnet50/flops-shapes", test_resnet50_flops);
  g_test_add_func("/layers/bert-large/params-flops", test_bert_large);
  g_test_add_func("/layers/transformer-big/params", test_transformer_big);
  g_test_add_func("/layers/attention/flops", test_attention_flops);
  g_test_add_func("/layers/patch-embedding/shapes-costs", test_patch_embedding);
  g_test_add_func("/layers/vit/params-blocks", test_vit);
  g_test_add_func("/layers/mlp/params-memory", test_mlp);
  g_test_add_func("/layers/cnn/shapes", test_cnn);
  g_test_add_func("/layers/conv/shapes", test_conv_shapes);
  g_test_add_func("/layers/dense/flops", test_dense_flops);
  g_test_add_func("/layers/names-groups", test_names_and_groups);
  g_test_add_func("/layers/names-nested-repeats", test_nested_repeat_names);
  g_test_add_func("/layers/describe", test_describe);
  g_test_add_func("/layers/errors", test_bad_models);
  g_test_add_func("/layers/all-files", test_all_model_files);
  return g_test_run();
}

/* config-text.c: the experiment keys of the text input (input.source
 * "text": a character-level corpus for language models, text.h) and what
 * the loader checks of any input against the model numerics would feed:
 * token ids and per-token labels come only from text, and text feeds only
 * a model of token ids with per-token logits over its 128 byte tokens.
 *
 *   "input": {"source": "text",
 *             "file": PATH,          a text file, or a directory whose text files
 *                                    are read in name order (default: what the
 *                                    Debian package fortunes installs)
 *             "sequence": S,         tokens per example (default: the model's)
 *             "stride": N,           tokens between training windows (default S)
 *             "test_fraction": F}    the held-out end of the text (default 0.05)
 *
 * Invariant: an experiment whose input is text leaves the loader only once
 * its corpus was read and holds at least one training and one test window
 * of the model's sequence, with text_train_windows counted; every failure
 * names the experiment file and the key. */
#include "io/config-private.h"
#include "io/text.h"

#include <math.h>
#include <string.h>

/* The windows of a text source kept in memory (floats and labels) stay
 * within this. */
#define TEXT_MAX_BYTES (1.0 * GIB)

gboolean ps_config__parse_text(json_object *o, const char *file, PsInputConfig *in,
                               GError **error)
{
  const char *path = PS_TEXT_DEFAULT_FILE;
  in->sequence = 0;
  in->stride = 0;
  in->test_fraction = 0.05;
  if (o && (!ps_json_get_string(o, file, "input", "file", FALSE, &path, error) ||
            !ps_json_get_int(o, file, "input", "sequence", FALSE, 1, 1 << 20, &in->sequence,
                             error) ||
            !ps_json_get_int(o, file, "input", "stride", FALSE, 1, 1 << 20, &in->stride,
                             error) ||
            !ps_json_get_double(o, file, "input", "test_fraction", FALSE, 0, TRUE, 0.5,
                                &in->test_fraction, error)))
    return FALSE;
  in->text_file = g_strdup(path);
  return TRUE;
}

void ps_config__text_to_json(const PsInputConfig *in, json_object *io)
{
  if (in->source != PS_SOURCE_TEXT)
    return;
  json_object_object_add(io, "file", json_object_new_string(in->text_file));
  json_object_object_add(io, "sequence", json_object_new_int64(in->sequence));
  json_object_object_add(io, "stride", json_object_new_int64(in->stride));
  json_object_object_add(io, "test_fraction", ps_config__new_double(in->test_fraction));
}

gboolean ps_config__input_feeds(const PsInputConfig *in, const PsModel *m)
{
  gboolean lm = m->token_input || m->labels_per_example > 1;
  if (in->source != PS_SOURCE_TEXT)
    return !lm;
  return m->token_input && m->in_rank == 1 && m->classes == PS_TEXT_VOCAB &&
         m->labels_per_example == m->in_shape[0];
}

/* What text feeds, against the model: token ids of the model's sequence,
 * 128 classes, one label per token, an embedding table covering them. */
static gboolean check_text_model(PsExperiment *e, GError **error)
{
  const char *f = e->file;
  const PsModel *m = e->model;
  if (!m->token_input || m->in_rank != 1) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.source",
         "text feeds token ids, but model '%s' does not take them; use a model whose input "
         "is {\"shape\": [S], \"tokens\": true} read by an embedding", m->name);
    return FALSE;
  }
  int64_t s = m->in_shape[0];
  if (e->input.sequence == 0)
    e->input.sequence = s;
  if (e->input.sequence != s) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.sequence",
         "%" G_GINT64_FORMAT " tokens per example, but model '%s' takes %" G_GINT64_FORMAT
         " (its input.shape); set input.sequence to %" G_GINT64_FORMAT " or leave it out",
         e->input.sequence, m->name, s, s);
    return FALSE;
  }
  if (e->input.stride == 0)
    e->input.stride = s;
  if (m->classes != PS_TEXT_VOCAB || m->labels_per_example != s) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.source",
         "text gives each of the %" G_GINT64_FORMAT " tokens its next one as label, one of %d "
         "byte tokens, but model '%s' scores %" G_GINT64_FORMAT " label(s) per example over %"
         G_GINT64_FORMAT " classes; end the model in per-token logits (%" G_GINT64_FORMAT
         ", %d) and softmax_xent, with input.classes = %d",
         s, PS_TEXT_VOCAB, m->name, m->labels_per_example, m->classes, s, PS_TEXT_VOCAB,
         PS_TEXT_VOCAB);
    return FALSE;
  }
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *l = &m->layers[i];
    if (l->kind == PS_LAYER_EMBEDDING && l->input_from == -1 && l->vocab < PS_TEXT_VOCAB) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.source",
           "text has %d byte tokens, but layer '%s' of model '%s' embeds only %" G_GINT64_FORMAT
           "; give it \"vocab\": %d", PS_TEXT_VOCAB, l->name ? l->name : "?", m->name,
           l->vocab, PS_TEXT_VOCAB);
      return FALSE;
    }
  }
  return TRUE;
}

/* Reads the corpus and counts its windows. */
static gboolean check_text_corpus(PsExperiment *e, GError **error)
{
  const char *f = e->file;
  PsInputConfig *in = &e->input;
  g_autoptr(GError) err = NULL;
  size_t n = 0;
  g_autofree guint8 *tokens = ps_text_read(in->text_file, &n, &err);
  if (!tokens) {
    gboolean fortunes = !strcmp(in->text_file, PS_TEXT_DEFAULT_FILE);
    ps_config__fail(error, PS_INPUT_ERROR_FILE, f, "input.file", "%s; %s", err->message,
         fortunes ? "the default text is the Debian package fortunes: install it (make deps, "
                    "or apt-get install fortunes) or name a text file"
                  : "name a text file, or a directory holding text files");
    return FALSE;
  }
  size_t end = ps_text_train_end(n, in->test_fraction);
  size_t train = ps_text_windows(end, in->sequence, in->stride);
  size_t test = ps_text_windows(n - end, in->sequence, in->sequence);
  if (train == 0 || (test == 0 && e->numerics.evaluate)) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f,
         train == 0 ? "input.file" : "input.test_fraction",
         "%s: %zu tokens, %zu for training and %zu held out, but each part needs at least "
         "input.sequence + 1 = %" G_GINT64_FORMAT "; use a longer text%s",
         in->text_file, n, end, n - end, in->sequence + 1,
         train == 0 ? "" : ", a larger input.test_fraction or numerics.evaluate = false");
    return FALSE;
  }
  double bytes = (double)train * (double)in->sequence * 8.0;
  if (bytes > TEXT_MAX_BYTES) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.stride",
         "%" G_GINT64_FORMAT " makes %zu training windows of %" G_GINT64_FORMAT " tokens, "
         "%.3g GiB in memory; keep them within 1 GiB with a stride of at least %.0f",
         in->stride, train, in->sequence, bytes / GIB,
         ceil((double)in->stride * bytes / TEXT_MAX_BYTES));
    return FALSE;
  }
  in->text_train_windows = (int64_t)train;
  return TRUE;
}

gboolean ps_config__check_input_model(PsExperiment *e, GError **error)
{
  const PsModel *m = e->model;
  if (e->input.source == PS_SOURCE_TEXT)
    return check_text_model(e, error) && check_text_corpus(e, error);
  if (e->numerics.enabled && m->numerics_supported && !ps_config__input_feeds(&e->input, m)) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, e->file, "input.source",
         "model '%s' %s, which only input.source=\"text\" feeds; use it, or set "
         "numerics.enabled=false",
         m->name, m->token_input ? "reads token ids" : "scores a label per token");
    return FALSE;
  }
  return TRUE;
}

/* text.h: a character-level corpus for language-model numerics: a text
 * file, or every text file of a directory, read as one stream of tokens
 * (one per byte), split into a training part and a held-out test part at
 * the end, and cut into windows of S + 1 tokens (the S inputs and, shifted
 * by one, their S next tokens as labels).
 *
 * Invariant: every token is in [0, PS_TEXT_VOCAB): a byte below 128 is its
 * own token, every byte of 128 or more is token 127 (DEL, which no text
 * file holds), one "not ASCII" token; the same path gives the same tokens,
 * split and windows on every machine. */
#ifndef PS_TEXT_H
#define PS_TEXT_H

#include "../common/common.h"

/* Tokens are byte values folded into 7 bits. */
#define PS_TEXT_VOCAB 128
/* What the Debian package fortunes installs (1:1.99.1-7.3, Debian 12):
 * 2,576,674 bytes of text in 43 files, each with a binary .dat index
 * beside it and a .u8 symlink to it, both skipped. */
#define PS_TEXT_DEFAULT_FILE "/usr/share/games/fortunes"

/* The token of a byte. */
static inline guint8 ps_text_token(guint8 byte)
{
  return byte < PS_TEXT_VOCAB ? byte : PS_TEXT_VOCAB - 1;
}

/* Reads `path` as tokens: a regular file whole, or a directory's regular
 * files (not symlinks) holding no NUL byte (which skips binary files such
 * as fortune's .dat indexes), in byte order of their names, one after the
 * other.  Errors name the path and say what is wrong (missing, unreadable,
 * no text in it).  (transfer full) */
guint8 *ps_text_read(const char *path, size_t *n, GError **error);

/* Where the held-out test part begins: the last test_fraction of n
 * tokens (rounded down) is the test part. */
size_t ps_text_train_end(size_t n, double test_fraction);

/* Windows of seq + 1 tokens whose starts are stride apart from the first
 * token of a part of len tokens (0 when it is shorter than seq + 1). */
size_t ps_text_windows(size_t len, int64_t seq, int64_t stride);

/* Fills window k of a part: x (seq token ids as floats) from tokens
 * [k stride, k stride + seq), labels from the token after each. */
void ps_text_window(const guint8 *part, size_t k, int64_t seq, int64_t stride, float *x,
                    int32_t *labels);

#endif

/* fuzz-common.h: what the libFuzzer harnesses of tests/fuzz/ share: the
 * entry points libFuzzer calls, a scratch directory per process, and the
 * data directory names resolve against.
 *
 * Invariant: a harness frees everything an input allocated before it
 * returns, so LeakSanitizer's per-input check sees no growth, and it never
 * runs a simulation: it loads, checks, and throws the result away. */
#ifndef PS_FUZZ_COMMON_H
#define PS_FUZZ_COMMON_H

#include <glib.h>
#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sets PODSIM_DATA_DIR to the repository (unless already set), makes GLib
 * criticals and warnings fatal (a failed g_return_if_fail is a bug the
 * fuzzer should report), and creates the scratch directory.  Call once
 * from LLVMFuzzerInitialize. */
void ps_fuzz_setup(void);

/* The repository root.  (transfer none) */
const char *ps_fuzz_repo(void);

/* A directory private to this process, with the layout of tests/data/
 * (`good` and `bad` link to the fixtures) so that an input referring to
 * "../good/models/mlp.json" finds it.  (transfer none) */
const char *ps_fuzz_scratch(void);

/* data[0..size) as a NUL-terminated string.  (transfer full) */
char *ps_fuzz_text(const uint8_t *data, size_t size);

/* data[0..size) parsed by ps_json_parse as the file named file, or NULL
 * when it is not JSON (the error checked and dropped).  (transfer full) */
json_object *ps_fuzz_json(const uint8_t *data, size_t size, const char *file);

/* Checks that *err is set, in PS_INPUT_ERROR and has a message, as a
 * refused input's error must, then clears it. */
void ps_fuzz_refused(GError **err);

#endif

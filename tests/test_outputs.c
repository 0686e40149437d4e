/* test_outputs.c: every file the podsim command line writes (run --trace,
 * collective --trace, sweep --out as CSV and JSON lines), through the
 * binary named by $PODSIM, when it cannot be written: in a read-only
 * directory, under /proc, under a regular file, or on a full device.  Each
 * is exit status 2 with a message naming the path and the reason, and
 * nothing left behind (no file, no "*.tmp*"); a full device stays the
 * device it was.  And a run stopped by SIGTERM or SIGINT dies of the signal
 * (the shell's 143 or 130), leaving the trace an earlier run wrote byte for
 * byte as it was and no temporary file.
 *
 * As root a 0555 directory does not stop anyone, so there the read-only
 * case writes under /proc/self (which even root cannot create files in)
 * and under a regular file instead, and the full device is first a node
 * of our own (mknod, major 1 minor 7) before it is /dev/full itself.
 * Standard output on /dev/full fails every command that prints (exit 2). */
#include "support/cli.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *podsim;

/* An output-writing command: argv with "@" where the output path goes. */
typedef struct {
  const char *name;
  const char *argv[16];
} Writer;

static const Writer writers[] = {
    {"run --trace",
     {"run", "mlp-outside-compilation", "--set", "numerics.enabled=false", "--steps", "2",
      "--quiet", "--trace", "@", NULL}},
    {"collective --trace",
     {"collective", "--topology", "ring:4", "--bytes", "1K", "--trace", "@", NULL}},
    {"sweep --out (csv)",
     {"sweep", "mlp-outside-compilation", "--set", "numerics.enabled=false", "--vary",
      "steps=2,3", "--format", "csv", "--out", "@", NULL}},
    {"sweep --out (jsonl)",
     {"sweep", "mlp-outside-compilation", "--set", "numerics.enabled=false", "--vary",
      "steps=2,3", "--format", "jsonl", "--out", "@", NULL}},
};

/* Runs podsim as w says with path for "@"; returns the raw wait status,
 * stdout and stderr. */
static int run_writer(const Writer *w, const char *path, char **out, char **err)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim);
  for (int i = 0; w->argv[i]; i++)
    g_ptr_array_add(argv, (gpointer)(strcmp(w->argv[i], "@") == 0 ? path : w->argv[i]));
  g_ptr_array_add(argv, NULL);
  int status = -1;
  GError *error = NULL;
  gboolean spawned = g_spawn_sync(g_getenv("PODSIM_DATA_DIR"), (char **)argv->pdata, NULL,
                                  G_SPAWN_DEFAULT, NULL, NULL, out, err, &status, &error);
  g_assert_no_error(error);
  g_assert_true(spawned);
  g_ptr_array_free(argv, TRUE);
  return status;
}

/* Why the system refuses to create path: the text podsim's message must
 * hold.  (transfer none) */
static const char *create_failure(const char *path)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    g_unlink(path);
    g_error("%s can be created: not an unwritable target", path);
  }
  return g_strerror(errno);
}

/* Asserts that dir holds exactly the names in keep (NULL-terminated). */
static void assert_dir_holds(const char *dir, const char *const *keep)
{
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  guint found = 0;
  for (const char *n; (n = g_dir_read_name(d));) {
    if (!g_strv_contains(keep, n))
      g_error("%s: '%s' was left behind", dir, n);
    found++;
  }
  g_dir_close(d);
  g_assert_cmpuint(found, ==, g_strv_length((char **)keep));
}

/* Runs every writer at path, which cannot be created for the reason the
 * system gives: exit 2, "podsim: " then a message naming path and the
 * reason, nothing on stdout's result lines. */
static void assert_refused(const char *path, const char *reason)
{
  for (guint k = 0; k < G_N_ELEMENTS(writers); k++) {
    g_autofree char *out = NULL, *err = NULL;
    int status = run_writer(&writers[k], path, &out, &err);
    g_test_message("%s %s: status %d: %s", writers[k].name, path, status, err);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 2);
    g_assert_nonnull(strstr(err, "podsim: "));
    g_assert_nonnull(strstr(err, path));
    g_assert_nonnull(strstr(err, reason));
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  }
}

/* Every writer at dir/plain/out.json, where dir/plain is a regular file:
 * refused, and dir left holding only that file, which is then removed. */
static void assert_file_parent_refused(const char *dir)
{
  g_autofree char *file = g_build_filename(dir, "plain", NULL);
  g_assert_true(g_file_set_contents(file, "x", 1, NULL));
  g_autofree char *under = g_build_filename(file, "out.json", NULL);
  assert_refused(under, create_failure(under));
  const char *keep[] = {"plain", NULL};
  assert_dir_holds(dir, keep);
  g_unlink(file);
}

/* A read-only directory: nothing can be created in it, and nothing is. */
static void test_read_only_dir(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-ro-XXXXXX", NULL);
  g_assert_nonnull(dir);
  g_assert_cmpint(g_chmod(dir, 0555), ==, 0);
  if (access(dir, W_OK) == 0) {
    /* root: the mode stops no one; /proc/self takes no new files, even
     * root's, and a path under a regular file is no path at all */
    g_test_message("%s is writable despite mode 0555 (root?): using /proc/self and a "
                   "regular file's child instead",
                   dir);
    g_assert_cmpint(g_chmod(dir, 0755), ==, 0);
    const char *in_proc = "/proc/self/podsim.json";
    assert_refused(in_proc, create_failure(in_proc));
    assert_file_parent_refused(dir);
  } else {
    g_autofree char *path = g_build_filename(dir, "out.json", NULL);
    assert_refused(path, create_failure(path));
    const char *keep[] = {NULL};
    assert_dir_holds(dir, keep);
    g_assert_cmpint(g_chmod(dir, 0755), ==, 0);
  }
  g_rmdir(dir);
}

/* Paths under /proc: a directory that does not exist, and a process's own
 * directory, which takes no new files. */
static void test_proc(void)
{
  const char *paths[] = {"/proc/podsim-test/x.json", "/proc/self/x.json"};
  for (guint i = 0; i < G_N_ELEMENTS(paths); i++)
    assert_refused(paths[i], create_failure(paths[i]));
}

/* A path whose parent is a regular file. */
static void test_file_parent(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-fp-XXXXXX", NULL);
  assert_file_parent_refused(dir);
  g_rmdir(dir);
}

static gboolean is_full_device(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
         minor(st.st_rdev) == 7;
}

/* Every writer at a full device: exit 2 saying so, the device still a
 * device (never replaced by a renamed temporary file), nothing beside it. */
static void assert_full_device_refused(const char *dev)
{
  g_autofree char *dir = g_path_get_dirname(dev);
  g_autofree char *base = g_path_get_basename(dev);
  g_autofree char *tmp_prefix = g_strconcat(base, ".tmp", NULL);
  for (guint k = 0; k < G_N_ELEMENTS(writers); k++) {
    g_autofree char *out = NULL, *err = NULL;
    int status = run_writer(&writers[k], dev, &out, &err);
    g_test_message("%s %s: status %d: %s", writers[k].name, dev, status, err);
    g_assert_true(is_full_device(dev));
    GDir *d = g_dir_open(dir, 0, NULL);
    g_assert_nonnull(d);
    for (const char *n; (n = g_dir_read_name(d));)
      if (g_str_has_prefix(n, tmp_prefix))
        g_error("%s/%s was left behind", dir, n);
    g_dir_close(d);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 2);
    g_assert_nonnull(strstr(err, dev));
    g_assert_nonnull(strstr(err, g_strerror(ENOSPC)));
  }
}

static void test_full_device(void)
{
  if (!is_full_device("/dev/full")) {
    g_test_skip("no /dev/full here");
    return;
  }
  /* our own node first: were it replaced by a file, /dev/full is spared */
  g_autofree char *dir = g_dir_make_tmp("podsim-full-XXXXXX", NULL);
  g_autofree char *node = g_build_filename(dir, "full", NULL);
  gboolean tried = FALSE;
  if (mknod(node, S_IFCHR | 0666, makedev(1, 7)) == 0) {
    int fd = open(node, O_WRONLY | O_CLOEXEC); /* not on a nodev mount */
    if (fd >= 0) {
      close(fd);
      assert_full_device_refused(node);
      tried = TRUE;
    }
    const char *keep[] = {"full", NULL};
    assert_dir_holds(dir, keep);
    g_unlink(node);
  }
  g_rmdir(dir);
  /* only a user who could replace /dev/full (root) needs the rehearsal */
  if (!tried && access("/dev", W_OK) == 0) {
    g_test_skip("no full device of our own to try first: /dev/full left alone");
    return;
  }
  assert_full_device_refused("/dev/full");
}

/* Standard output on a full device: every command that prints fails with
 * exit status 2 and says so, rather than passing for one whose output was
 * lost. */
static void test_stdout_full(void)
{
  if (!is_full_device("/dev/full")) {
    g_test_skip("no /dev/full here");
    return;
  }
  const char *const cmds[][8] = {
      {"list", "experiments", NULL},
      {"describe", "resnet50-v3-8", NULL},
      {"run", "resnet50-v3-8", "--no-trace", "--json", NULL},
      {"collective", "--topology", "ring:4", "--bytes", "1K", NULL},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cmds); i++) {
    GString *sh = g_string_new("exec \"$0\"");
    for (int k = 0; cmds[i][k]; k++)
      g_string_append_printf(sh, " %s", cmds[i][k]);
    g_string_append(sh, " > /dev/full");
    const char *argv[] = {"/bin/sh", "-c", sh->str, podsim, NULL};
    int status = -1;
    g_autofree char *err = NULL;
    GError *error = NULL;
    g_assert_true(g_spawn_sync(g_getenv("PODSIM_DATA_DIR"), (char **)argv, NULL,
                               G_SPAWN_DEFAULT, NULL, NULL, NULL, &err, &status, &error));
    g_assert_no_error(error);
    g_test_message("%s: %s", sh->str, err);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 2);
    /* the reason when the failing write was the last one; an earlier one
     * (a long output) leaves only stdout's error flag: "write error" */
    g_assert_nonnull(strstr(err, "podsim: standard output: "));
    g_string_free(sh, TRUE);
  }
}

/* The shell's status for a process that died of sig, or that exited with
 * 128 + sig itself: both read as 130 (SIGINT) or 143 (SIGTERM). */
static int shell_status(int status)
{
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A run writing over an earlier run's trace, stopped by a signal mid-way:
 * 143 or 130, the earlier trace as it was, no temporary file. */
static void test_signal_keeps_earlier_trace(gconstpointer data)
{
  int sig = GPOINTER_TO_INT(data);
  g_autofree char *dir = g_dir_make_tmp("podsim-sig-XXXXXX", NULL);
  g_autofree char *trace = g_build_filename(dir, "t.json", NULL);
  const char *first[] = {podsim, "run", "vit-pipeline", "--quiet", "--steps", "1", "--set",
                         "numerics.enabled=false", "--trace", trace, NULL};
  int status = -1;
  GError *error = NULL;
  g_spawn_sync(g_getenv("PODSIM_DATA_DIR"), (char **)first, NULL,
               G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL,
               &status, &error);
  g_assert_no_error(error);
  g_assert_cmpint(shell_status(status), ==, 0);
  g_autofree char *before = NULL;
  gsize before_len = 0;
  g_assert_true(g_file_get_contents(trace, &before, &before_len, NULL));
  g_assert_cmpuint(before_len, >, 0);

  /* the whole run (several seconds, numerics on) over the same path */
  const char *second[] = {podsim, "run", "vit-pipeline", "--quiet", "--trace-max", "0",
                          "--trace", trace, NULL};
  GPid pid;
  gboolean spawned = g_spawn_async(g_getenv("PODSIM_DATA_DIR"), (char **)second, NULL,
                                   G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL |
                                       G_SPAWN_STDERR_TO_DEV_NULL,
                                   NULL, NULL, &pid, &error);
  g_assert_no_error(error);
  g_assert_true(spawned);
  /* half a second in, and on until the temporary trace is being written */
  g_usleep(G_USEC_PER_SEC / 2);
  gboolean writing = FALSE;
  for (int i = 0; i < 4800 && !writing; i++) { /* up to 2 min on a loaded machine */
    GDir *d = g_dir_open(dir, 0, NULL);
    for (const char *n; d && (n = g_dir_read_name(d));)
      writing |= g_str_has_prefix(n, "t.json.tmp");
    if (d)
      g_dir_close(d);
    if (!writing)
      g_usleep(25000);
  }
  g_assert_true(writing);
  g_assert_cmpint(waitpid(pid, &status, WNOHANG), ==, 0); /* still running */
  g_assert_cmpint(kill(pid, sig), ==, 0);
  g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
  g_spawn_close_pid(pid);
  g_test_message("signal %d: wait status %#x", sig, status);
  g_assert_cmpint(shell_status(status), ==, 128 + sig);

  g_autofree char *after = NULL;
  gsize after_len = 0;
  g_assert_true(g_file_get_contents(trace, &after, &after_len, NULL));
  g_assert_cmpmem(after, after_len, before, before_len);
  const char *keep[] = {"t.json", NULL};
  assert_dir_holds(dir, keep);
  g_unlink(trace);
  g_rmdir(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = podsim_init();
  g_test_add_func("/outputs/read-only-dir", test_read_only_dir);
  g_test_add_func("/outputs/proc", test_proc);
  g_test_add_func("/outputs/file-parent", test_file_parent);
  g_test_add_func("/outputs/full-device", test_full_device);
  g_test_add_func("/outputs/stdout-full", test_stdout_full);
  g_test_add_data_func("/outputs/signal/term", GINT_TO_POINTER(SIGTERM),
                       test_signal_keeps_earlier_trace);
  g_test_add_data_func("/outputs/signal/int", GINT_TO_POINTER(SIGINT),
                       test_signal_keeps_earlier_trace);
  return g_test_run();
}

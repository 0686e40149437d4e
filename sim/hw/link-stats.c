/* link-stats.c: the link statistics CSV of link-stats.h, built from the
 * network's public view (ps_network_link_info and friends) only.
 *
 * The rows are formatted into memory, written to "<path>.tmp-XXXXXX" in
 * the same directory, flushed to disk and renamed onto path; a path that
 * exists and is not a regular file (a FIFO, /dev/stdout, /dev/full) is
 * written in place, never replaced, and its write errors are reported.
 * Invariant: on every failure the temporary file is unlinked before
 * returning, so nothing half-written is ever seen at path or beside it. */
#include "hw/link-stats.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_name(PsLinkKind kind)
{
  switch (kind) {
  case PS_LINK_ICI:
    return "ici";
  case PS_LINK_ON_CHIP:
    return "on-chip";
  case PS_LINK_PCIE_DOWN:
    return "pcie-down";
  case PS_LINK_PCIE_UP:
    return "pcie-up";
  case PS_LINK_DCN_NIC_UP:
    return "dcn-nic-up";
  case PS_LINK_DCN_NIC_DOWN:
    return "dcn-nic-down";
  case PS_LINK_DCN_LEAF_UP:
    return "dcn-leaf-up";
  case PS_LINK_DCN_LEAF_DOWN:
    return "dcn-leaf-down";
  }
  return "?";
}

/* A double in C-locale %.9g (a comma never stands for the point). */
static void append_double(GString *s, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append(s, g_ascii_formatd(buf, sizeof buf, "%.9g", v));
  g_string_append_c(s, ',');
}

/* The columns x, y, z are the coordinates. */
G_STATIC_ASSERT(PS_MAX_DIMS == 3);

/* The CSV text.  (transfer full) */
static GString *format_rows(const PsNetwork *net, ps_time_t elapsed)
{
  GString *s = g_string_new("link,kind,chip,to_chip,x,y,z,dim,dir,host,from_core,to_core,lanes,"
                            "bandwidth_Bps,bytes,chunks,busy_s,utilization,name\n");
  double span = ps_time_to_s(elapsed);
  int n = ps_network_n_links(net);
  for (int link = 0; link < n; link++) {
    PsLinkInfo li;
    if (!ps_network_link_info(net, link, &li))
      continue;
    int c[PS_MAX_DIMS];
    for (int d = 0; d < PS_MAX_DIMS; d++)
      c[d] = -1;
    if (li.ends.chip >= 0)
      ps_network_chip_coords(net, li.ends.chip, c);
    g_string_append_printf(s, "%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,", link,
                           kind_name(li.ends.kind), li.ends.chip, li.ends.to_chip, c[0], c[1], c[2], li.ends.dim,
                           li.ends.dir, li.ends.host, li.ends.from_core, li.ends.to_core, li.lanes);
    append_double(s, li.bandwidth_Bps);
    g_string_append_printf(s, "%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",", li.bytes,
                           li.chunks);
    double busy = ps_time_to_s(li.busy);
    append_double(s, busy);
    append_double(s, span > 0 && li.lanes > 0 ? busy / (li.lanes * span) : 0.0);
    g_autofree char *name = ps_network_link_name(net, link);
    g_string_append_printf(s, "\"%s\"\n", name);
  }
  return s;
}

/* Writes len bytes to fd, through short writes; an errno value or 0. */
static int write_all(int fd, const char *p, size_t len)
{
  while (len > 0) {
    ssize_t k = write(fd, p, len);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

/* The rows written straight into path, a file that is not a regular one. */
static gboolean write_in_place(const PsNetwork *net, ps_time_t elapsed, const char *path,
                               GError **error)
{
  int fd = g_open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY, 0);
  int err = fd < 0 ? errno : 0;
  if (!err) {
    GString *text = format_rows(net, elapsed);
    err = write_all(fd, text->str, text->len);
    g_string_free(text, TRUE);
    if (close(fd) != 0 && !err)
      err = errno ? errno : EIO;
  }
  if (!err)
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
              "%s: cannot write the link statistics: %s", path, g_strerror(err));
  return FALSE;
}

gboolean ps_link_stats_write(const PsNetwork *net, ps_time_t elapsed, const char *path,
                             GError **error)
{
  g_return_val_if_fail(net != NULL, FALSE);
  g_return_val_if_fail(path != NULL && *path != '\0', FALSE);
  g_return_val_if_fail(elapsed >= 0, FALSE);
  g_return_val_if_fail(error == NULL || *error == NULL, FALSE);

  GStatBuf st;
  if (g_stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return write_in_place(net, elapsed, path, error);
  g_autofree char *tmp = g_strdup_printf("%s.tmp-XXXXXX", path);
  /* the rows are in memory before the file exists, and an interrupt is
   * held until it is renamed or removed, so none leaves it behind */
  GString *text = format_rows(net, elapsed);
  sigset_t saved;
  ps_fatal_signals_hold(&saved);
  int fd = g_mkstemp_full(tmp, O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    int err = errno;
    ps_fatal_signals_restore(&saved);
    g_string_free(text, TRUE);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot create the link statistics file: %s", path, g_strerror(err));
    return FALSE;
  }
  int err = write_all(fd, text->str, text->len);
  g_string_free(text, TRUE);
  if (!err && fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
    err = errno;
  if (close(fd) != 0 && !err)
    err = errno ? errno : EIO;
  if (err) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot write the link statistics: %s", path, g_strerror(err));
    goto unlink_tmp;
  }
  if (g_rename(tmp, path) != 0) {
    err = errno;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot rename the link statistics from %s: %s", path, tmp,
                g_strerror(err));
    goto unlink_tmp;
  }
  ps_fatal_signals_restore(&saved);
  return TRUE;

unlink_tmp:
  g_unlink(tmp);
  ps_fatal_signals_restore(&saved);
  return FALSE;
}

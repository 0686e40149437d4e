/* link-stats.h: what every link direction of a network carried, as a CSV
 * file (the run's --links-csv, plots/links-heatmap.gp).
 *
 * One header line, then one row per link direction that exists in the
 * topology (ps_network_link_info is TRUE), in link id order:
 *
 *   link,kind,chip,to_chip,x,y,z,dim,dir,host,from_core,to_core,lanes,
 *   bandwidth_Bps,bytes,chunks,busy_s,utilization,name
 *
 *   link         the link id (hw/network.h)
 *   kind         ici, on-chip, pcie-down (host to chips) or pcie-up
 *   chip         the chip it leaves (ici, on-chip), else -1
 *   to_chip      ici: the neighbour it reaches (twist applied), else -1
 *   x, y, z      the coordinates of `chip` (0 past the topology's
 *                dimensions; -1 for PCIe)
 *   dim, dir     ici: dimension (0 = x) and +1 / -1, else -1, 0
 *   host         pcie: the host, else -1
 *   from_core, to_core   on-chip: the cores, else -1
 *   lanes        parallel lanes of the direction
 *   bandwidth_Bps  per lane, after faults (0 if failed)
 *   bytes, chunks  carried so far
 *   busy_s       serialization time summed over lanes, seconds
 *   utilization  busy / (lanes x elapsed), in [0, 1]; 0 when elapsed is 0
 *   name         ps_network_link_name, in double quotes (it holds commas);
 *                last, so a reader that splits on commas still finds every
 *                other column in its place
 *
 * Invariant: the file at `path` is either absent or left as it was, or
 * whole: rows go to a temporary file beside it that is renamed onto it
 * only once every byte is written and flushed. */
#ifndef PS_LINK_STATS_H
#define PS_LINK_STATS_H

#include "hw/network.h"

/* Writes the link statistics of net to path, utilization taken over
 * `elapsed` of simulated time (a run's whole simulated time, usually
 * ps_engine_now of the network's engine at the end).  FALSE and a
 * PS_INPUT_ERROR_FILE naming path if the file cannot be created, written
 * or renamed into place; then no file is left at path (a file that was
 * there stays) and none beside it.  (transfer none) net. */
gboolean ps_link_stats_write(const PsNetwork *net, ps_time_t elapsed, const char *path,
                             GError **error);

#endif

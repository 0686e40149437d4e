/* podsim.h: the embedding API of libpodsim in one include.
 *
 *   #include <podsim/podsim.h>     cc prog.c $(pkg-config --cflags --libs podsim)
 *
 * Load an experiment (ps_experiment_load, run/experiment.h), run it (ps_run,
 * run/run.h), read the PsSummary; or, without a struct, ps_api_run_json
 * (run/api.h: names and KEY=VALUE strings in, JSON text out).  Names of
 * experiments, topologies and models are looked up along ps_data_dirs():
 * $PODSIM_DATA_DIR, then the share/podsim installed beside libpodsim.
 *
 * Invariant: this header reaches only public headers of sim/ (never the
 * command line's, never a *-private.h); `make install` installs exactly
 * those, under include/podsim/ with the same relative paths, and the
 * build checks that this file compiles in the tree (-Iinclude -Isim). */
#ifndef PODSIM_PODSIM_H
#define PODSIM_PODSIM_H

#include "common/common.h"
#include "engine/engine.h"
#include "io/config.h"
#include "io/dataset.h"
#include "program/program.h"
#include "exec/pod.h"
#include "run/run.h"
#include "run/experiment.h"
#include "run/api.h"

#endif

# breakdown.gp: where a data-parallel step goes as the slice grows, from
# breakdown.csv (the `podsim sweep` of plots/Makefile: BERT-large at a fixed
# global batch of 1,024 sequences of 512 on v3 slices of 64 to 1,024
# TensorCores, strong scaling).  Left, the step-time breakdown as stacked
# bars in ms (the six categories of `podsim run`, which add up to the step);
# right, the same bars as shares of the step in %.  Columns are read by
# their names in the sweep's header, so a sweep with more fields still draws.
if (!exists("csv")) csv = "breakdown.csv"
stem = "breakdown"; w = 1200; h = 560
load "terminal.gp"
set datafile separator ","
set datafile columnheaders

cats = "compute collective infeed_stall pipeline_bubble host other"
label(i) = word("compute collective infeed\\_stall pipeline\\_bubble host other", i)
colour(i) = word("#1b9e77 #d95f02 #7570b3 #e7298a #66a61e #999999", i)
cat(i) = column("breakdown." . word(cats, i))
# x tick: the slice (its name gives the cores) and the sequences per core
tic = 'sprintf("%s\n%d/core", strcol("topology"), column("global_batch") / column("devices"))'

set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border rgb "#404040"
set boxwidth 0.7 relative
set grid ytics lc rgb "#dddddd"
set xtics font ",9" nomirror
set multiplot layout 1,2 title \
    "BERT-large, global batch 1,024 (seq. 512), data-parallel on TPU v3 slices: step-time breakdown" font ",13"

set title "time per step"
set ylabel "time per step (ms)"
set xlabel "slice (tpu-v3-N: N TensorCores) and sequences per core" offset 0,-0.5
set bmargin 7
set yrange [0:*]
set offsets 0, 0, graph 0.06, 0
set key top right reverse Left samplen 2
plot for [i = 1:words(cats)] csv using (cat(i) * 1e3):xtic(@tic) lc rgb colour(i) title label(i), \
     csv using 0:(column("step_time_s") * 1e3):(sprintf("%.1f ms", column("step_time_s") * 1e3)) \
         with labels offset 0,0.8 font ",9" notitle

set title "share of the step"
set ylabel "share of the step (%)"
set yrange [0:100]
set offsets 0, 0, 0, 0
set key off
# the collective's share under each bar's name
tic2 = 'sprintf("%s\n%d/core\ncoll. %.0f%%", strcol("topology"), column("global_batch") / column("devices"), 100 * column("breakdown.collective") / column("step_time_s"))'
set xlabel offset 0,-1.3
plot for [i = 1:words(cats)] csv \
         using (100 * cat(i) / column("step_time_s")):xtic(@tic2) lc rgb colour(i) notitle
unset multiplot

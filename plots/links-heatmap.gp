# links-heatmap.gp: link utilization on a 2-D torus, from links.csv (the
# `podsim run --links-csv` of plots/Makefile: ResNet-50 data-parallel on
# the full TPU v3 pod, tpu-v3-2048, 32x32 chips with wrap-around on both
# axes, the torus all-reduce, one x cable degraded to a quarter of its
# bandwidth).
#
# A chip has four outgoing ICI link directions (+x, -x, +y, -y), so the
# figure has four panels, one per direction: the cell at (x, y) is the
# link leaving chip (x, y) that way, coloured by its utilization, busy
# time / (lanes x simulated time of the run) in %.  All four panels share
# one logarithmic colour scale from the least busy link that carried
# anything to the busiest, so a dimension that carries 30 times less than
# another is a colour of its own, not a blank panel (a link that carried
# nothing takes the bottom colour).  A link slower than the fastest ICI
# link of the run (degraded or failed by the experiment's faults.links) is
# ringed in red.  Rows and columns
# are read by name from the CSV header (hw/link-stats.h documents it);
# `label` adds a line under the title.
if (!exists("csv")) csv = "links.csv"
if (!exists("subtitle")) subtitle = ""
stem = "links-heatmap"; w = 1150; h = 1250
load "terminal.gp"
set datafile separator ","
set datafile columnheaders

ici(d, s) = strcol("kind") eq "ici" && column("dim") == d && column("dir") == s
pct = 'column("utilization") * 100'
stats csv using (strcol("kind") eq "ici" ? column("x") : NaN):(strcol("kind") eq "ici" ? column("y") : NaN) nooutput
nx = STATS_max_x + 1; ny = STATS_max_y + 1
stats csv using (strcol("kind") eq "ici" ? @pct : NaN) nooutput
umax = STATS_max > 0 ? STATS_max : 1
stats csv using (strcol("kind") eq "ici" && @pct > 0 ? @pct : NaN) nooutput
umin = STATS_records > 0 && STATS_min < umax ? STATS_min : umax / 100
lo = umin / 1.5; hi = umax * 1.05
floored = '(@pct > lo ? @pct : lo)'
stats csv using (strcol("kind") eq "ici" ? column("bandwidth_Bps") : NaN) nooutput
bwmax = STATS_max

set palette defined (0 "#440154", 0.25 "#3b528b", 0.5 "#21918c", 0.75 "#5ec962", 1 "#fde725")
set logscale cb
set cbrange [lo:hi]
set cblabel "link utilization (% of the run's simulated time, log scale)"
set colorbox user origin screen 0.915, screen 0.08 size screen 0.02, screen 0.78
set xrange [-0.5:nx - 0.5]
set yrange [-0.5:ny - 0.5]
set xtics 0, (nx > 16 ? 4 : 1) out nomirror
set ytics 0, (ny > 16 ? 4 : 1) out nomirror
set xlabel "chip x"
set ylabel "chip y"
set style fill solid 1.0 noborder
set key off
set tics front

set multiplot title "Utilization of every ICI link direction, by the chip it leaves\n" . subtitle font ",13"
dirs = "+x -x +y -y"
do for [k = 1:4] {
    d = (k - 1) / 2; s = (k % 2 == 1) ? 1 : -1
    stats csv using (ici(d, s) ? @pct : NaN) nooutput
    mean = STATS_mean
    set title sprintf("%s links (chip (x,y) to its %s neighbour)\nmean %.2f%%, max %.2f%%", \
                      word(dirs, k), word(dirs, k), mean, STATS_max) font ",11"
    col = (k - 1) % 2; row = (k - 1) / 2
    set lmargin at screen 0.07 + col * 0.43
    set rmargin at screen 0.07 + col * 0.43 + 0.37
    set tmargin at screen 0.86 - row * 0.45
    set bmargin at screen 0.86 - row * 0.45 - 0.33
    if (k > 1) { unset colorbox }
    plot csv using (ici(d, s) ? column("x") : NaN):(column("y")):(0.52):(0.52):(@floored) \
             with boxxyerror lc palette, \
         '' using (ici(d, s) && column("bandwidth_Bps") < bwmax ? column("x") : NaN):(column("y")) \
             with points pt 6 ps 3.5 lw 2.5 lc rgb "#e8000b"
}
unset multiplot

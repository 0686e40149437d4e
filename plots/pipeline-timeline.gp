# pipeline-timeline.gp: one pipelined step, GPipe above 1F1B, from the rows
# `podsim timeline` prints (stage, start_us, end_us, mb, kind); see
# pipeline-timeline.sh.  Stages are rows (stage 0 on top), micro-batches
# are colours (their number in the box when it fits), forward boxes are
# solid, backward hatched, recomputation hollow, as the legend beside the
# top panel says.
# Writes outfile (default pipeline-timeline.png here, .svg with
# fmt='svg': terminal.gp).
if (!exists("subtitle")) subtitle = ''
stem = "pipeline-timeline"; w = 1400; h = 820; font = ",10"
load "terminal.gp"
set multiplot layout 2,1 title "One pipelined training step: ".subtitle
set style fill solid 1.0 border lc rgb '#303030'
set ylabel 'stage'
set xlabel 'time in the step (us)'
set ytics 1
set grid xtics lc rgb '#dddddd'
# the legend, right of the top panel: what a box's fill and colour mean
set rmargin 20
set key off
# eight distinct colours for micro-batches (mod 8)
array C[8] = [0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x17becf]
col(mb) = C[int(mb) % 8 + 1]
is(k) = strcol(5) eq k
wide(x) = ($3 - $2) > x
do for [sched in "gpipe 1f1b"] {
  f = 'pipeline-timeline-'.sched.'.tsv'
  set autoscale
  stats f using 4 nooutput
  mbs = int(STATS_max) + 1
  stats f using 1:3 nooutput
  stages = STATS_max_x
  tmax = STATS_max_y
  w = tmax / 60.0
  set yrange [stages + 0.6:-0.6]
  set title (sched eq 'gpipe' ? 'GPipe: all forwards, then all backwards' : \
             '1F1B (PipeDream-Flush): one forward, one backward in the steady state')
  set xrange [0:tmax]
  if (sched eq 'gpipe') {
    set key outside right top vertical Left reverse samplen 2 spacing 1.2 noautotitle
  } else {
    set key off
  }
  plot keyentry with boxes fs solid 0.9 lc rgb '#8c8c8c' title 'forward', \
       keyentry with boxes fs pattern 5 lc rgb '#8c8c8c' title 'backward', \
       keyentry with boxes fs empty lc rgb '#8c8c8c' title 'recomputation', \
       for [i = 0:(mbs < 8 ? mbs : 8) - 1] keyentry with boxes fs solid 0.9 lc rgb col(i) \
         title sprintf(mbs > 8 ? 'micro-batch %d (mod 8)' : 'micro-batch %d', i), \
       f using (($2+$3)/2):(is("FWD") ? $1 : 1/0):2:3:($1-0.38):($1+0.38):(col($4)) \
         with boxxyerror fs solid 0.9 lc rgb variable, \
       '' using (($2+$3)/2):(is("BWD") ? $1 : 1/0):2:3:($1-0.38):($1+0.38):(col($4)) \
         with boxxyerror fs pattern 5 lc rgb variable, \
       '' using (($2+$3)/2):(is("RECOMPUTE") ? $1 : 1/0):2:3:($1-0.38):($1+0.38):(col($4)) \
         with boxxyerror fs empty lc rgb variable, \
       '' using (($2+$3)/2):1:(wide(w) ? sprintf("%d", $4) : "") with labels font ',8'
}
unset multiplot

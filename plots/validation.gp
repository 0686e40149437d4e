# validation.gp: `podsim validate --csv` (validation.csv: every point of
# tests/measured, its TPU generation, predicted and measured step time and
# signed error) drawn two ways.  Left: predicted against measured step time,
# log-log, one colour a generation, the calibration points ringed in black,
# with the diagonal and the bands of 5% and 15% either side.  Right: each
# point's signed error, by generation (jittered along x), with the same
# bands.  Writes outfile (default validation.png in the working directory;
# .svg with fmt='svg', terminal.gp); run from plots/ or with it on gnuplot's
# loadpath.  csv may be given with -e.
stem = "validation"; w = 1300; h = 560; termlw = 1.3
load "terminal.gp"
set datafile separator ","
if (!exists("csv")) csv = "validation.csv"

c_gen = 4; c_pred = 6; c_meas = 7; c_err = 8; c_cal = 9
# v2's one point is a calibration point (ringed); a generation not listed
# here is drawn as "other", in grey, rather than left out
gens = "v3 v4 v5e v5p v6e v7 other"
ng = words(gens)
gen(i) = word(gens, i)
colour(i) = word("#1b9e77 #d95f02 #7570b3 #e7298a #66a61e #e6ab02 #636363", i)
cal = "true"
listed(g) = strstrt(" ".gens." ", " ".g." ") > 0
genof(g) = listed(g) ? g : "other"
point(i) = genof(strcol(c_gen)) eq gen(i) && strcol(c_cal) ne cal && strcol(c_pred) ne ""

stats csv every ::1 using (strcol(c_cal) ne cal && strcol(c_pred) ne "" ? 1 : NaN) nooutput
n = STATS_records
# "other" only when some point needs it
stats csv every ::1 using (strcol(c_cal) ne cal && !listed(strcol(c_gen)) ? 1 : 0) nooutput
if (STATS_sum == 0) { ng = ng - 1 }

set multiplot layout 1, 2 title sprintf("podsim validate: %d published step times (MLPerf logs, MaxText tables, Google's TPU recipes) and the calibration points", n) font ",13"
set grid xtics ytics mxtics mytics lc rgb "#dddddd"

set title "predicted against measured step time"
set logscale xy 10
set xrange [0.002:200]
set yrange [0.002:200]
set format x "%g"
set format y "%g"
set xlabel "measured step time (s)"
set ylabel "podsim's step time (s)"
set size ratio -1
set key top left font ",9" spacing 1.1
plot x with lines lc rgb "#252525" lw 1.5 title "predicted = measured", \
     1.05 * x with lines lc rgb "#969696" dt 3 notitle, \
     0.95 * x with lines lc rgb "#969696" dt 3 title "5% either way", \
     1.15 * x with lines lc rgb "#bdbdbd" dt 2 notitle, \
     0.85 * x with lines lc rgb "#bdbdbd" dt 2 title "15% either way", \
     for [i = 1:ng] csv every ::1 using (column(c_meas)):(point(i) ? column(c_pred) : NaN) \
         with points pt 7 ps 1.1 lc rgb colour(i) title gen(i), \
     csv every ::1 using (column(c_meas)):(strcol(c_cal) eq cal ? column(c_pred) : NaN) \
         with points pt 6 ps 2 lw 1.5 lc rgb "black" title "calibration point"

set title "signed error (predicted - measured) / measured"
unset logscale
set size noratio
set xrange [0.3:ng + 0.7]
set yrange [-50:50]
set format y "%+g%%"
set xtics () font ",10"
set for [i = 1:ng] xtics add (gen(i) i)
unset mxtics
set xlabel "TPU generation"
set ylabel "error"
set key bottom right font ",9"
jitter(i) = i + 0.3 * (rand(0) - 0.5)
plot 0 with lines lc rgb "#252525" lw 1.5 notitle, \
     5 with lines lc rgb "#969696" dt 3 notitle, -5 with lines lc rgb "#969696" dt 3 notitle, \
     15 with lines lc rgb "#bdbdbd" dt 2 notitle, -15 with lines lc rgb "#bdbdbd" dt 2 notitle, \
     for [i = 1:ng] csv every ::1 using (point(i) ? jitter(i) : NaN):(100 * column(c_err)) \
         with points pt 7 ps 1.1 lc rgb colour(i) notitle
unset multiplot

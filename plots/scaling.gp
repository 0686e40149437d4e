# scaling.gp: data-parallel weak scaling from scaling.csv (plots/scaling.sh):
# examples/s against devices (log-log), one line per model setting and TPU
# generation, each beside its ideal linear scaling from its smallest slice
# (dashed, same colour); below, the scaling efficiency against that ideal.
# Writes scaling.png in the working directory (.svg with fmt='svg',
# terminal.gp), where scaling.csv is; plots/ on gnuplot's loadpath
# (make -C plots).
stem = "scaling"; w = 1300; h = 860; termlw = 1.3
load "terminal.gp"
set datafile separator ","

csv = "scaling.csv"
# columns of scaling.csv
c_model = 1; c_gen = 2; c_dev = 4; c_batch = 5; c_eps = 7
models = "resnet50-32 resnet50-128 bert-large transformer-big"
gens = "v3 v4"
n = words(models) * words(gens)
model(i) = word(models, (i - 1) / words(gens) + 1)
gen(i) = word(gens, (i - 1) % words(gens) + 1)
name(m) = m eq "resnet50-32" || m eq "resnet50-128" ? "ResNet-50" : \
          m eq "bert-large" ? "BERT-large" : m eq "transformer-big" ? "Transformer-big" : m
unit(m) = m eq "bert-large" ? "seq. of 512" : m eq "transformer-big" ? "seq. of 256" : "images"
# v3 light, v4 dark, one hue per model setting
colour(i) = word("#6baed6 #08519c #74c476 #006d2c #fb6a4a #a50f15 #9e9ac8 #54278f", i)
sel(i) = strcol(c_model) eq model(i) && strcol(c_gen) eq gen(i)

# per line: smallest slice, its throughput, the batch per device
array dmin[n]; array base[n]; array per_dev[n]; array present[n]
emin = 100; emax = 100
do for [i = 1:n] {
    stats csv every ::1 using (sel(i) ? column(c_dev) : NaN) nooutput
    # stats leaves STATS_* undefined when no row matches
    present[i] = exists("STATS_records") && STATS_records > 0
    if (present[i]) {
        dmin[i] = STATS_min
        stats csv every ::1 using (sel(i) && column(c_dev) == dmin[i] ? column(c_eps) : NaN) nooutput
        base[i] = STATS_max
        stats csv every ::1 using (sel(i) ? column(c_batch) / column(c_dev) : NaN) nooutput
        per_dev[i] = STATS_max
        stats csv every ::1 using (sel(i) ? 100 * column(c_eps) / (base[i] * column(c_dev) / dmin[i]) : NaN) nooutput
        emin = STATS_min < emin ? STATS_min : emin
        emax = STATS_max > emax ? STATS_max : emax
    }
}
label(i) = !present[i] ? "" : sprintf("%s, %d %s/device, %s", name(model(i)), per_dev[i], unit(model(i)), gen(i))

set multiplot
set lmargin at screen 0.09
set rmargin at screen 0.64
set logscale x 2
set xrange [3:6000]
set xtics (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
set grid xtics ytics mytics lc rgb "#dddddd"
set key at screen 0.655, screen 0.93 left top Left reverse spacing 1.3 box lc rgb "#aaaaaa" samplen 3 \
    title "solid: podsim, dashed: ideal\n(linear from the smallest slice)"

# top: throughput
set tmargin at screen 0.93
set bmargin at screen 0.40
set title "Data-parallel weak scaling in podsim: fixed batch per device, bf16, timing only" font ",14"
set logscale y 10
set format y "%.0s%c"
set ylabel "throughput (examples/s)"
set format x ""
set xlabel ""
plot for [i = 1:n] csv every ::1 \
         using (column(c_dev)):(sel(i) ? column(c_eps) : NaN) \
         with linespoints lw 2 pt (gen(i) eq "v3" ? 7 : 9) ps 1.1 lc rgb colour(i) title label(i), \
     for [i = 1:n] csv every ::1 \
         using (column(c_dev)):(sel(i) ? base[i] * column(c_dev) / dmin[i] : NaN) \
         with lines dt 2 lw 1.5 lc rgb colour(i) notitle

# bottom: efficiency against the ideal line
unset title
unset key
set label 1 at screen 0.655, screen 0.36 left font ",10" \
    "efficiency = examples/s per device, relative to the\n" . \
    "same line's smallest slice (100% = linear scaling)\n\n" . \
    "wrap-around links (see podsim describe topology):\n" . \
    "  v3 (2-D): one axis at tpu-v3-1024, both at tpu-v3-2048\n" . \
    "  v4 (3-D): every axis from tpu-v4-128 (4x4x4) up"
set tmargin at screen 0.38
set bmargin at screen 0.08
unset logscale y
set format y "%g"
set ytics autofreq
set yrange [(emin < 80 ? floor(emin / 10) * 10 - 5 : 75) : (emax > 105 ? ceil(emax / 5) * 5 + 2 : 105)]
set ylabel "scaling efficiency (%)\nthroughput / ideal"
set format x "%g"
set xlabel "devices in the slice (v3: TensorCores, 2 per chip; v4: megacore chips, 2 TensorCores each)"
set arrow 1 from graph 0, first 100 to graph 1, first 100 nohead dt 2 lc rgb "#555555"
plot for [i = 1:n] csv every ::1 \
         using (column(c_dev)):(sel(i) ? 100 * column(c_eps) / (base[i] * column(c_dev) / dmin[i]) : NaN) \
         with linespoints lw 2 pt (gen(i) eq "v3" ? 7 : 9) ps 1.1 lc rgb colour(i) notitle
unset multiplot

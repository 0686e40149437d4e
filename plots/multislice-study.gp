# multislice-study.gp: the multislice study of multislice-study.sh, from
# multislice-study.csv (ResNet-50 and BERT-large data-parallel on 1..16
# slices of tpu-v5e-256 at four DCN NIC bandwidths) and
# multislice-generations.csv (the same models on 128 chips of v4, v5e, v5p,
# v6e).  Left: scaling efficiency (examples/s per chip against one slice's);
# middle: the exposed collective time per step; right: examples/s per chip by
# generation, relative to v4.  Writes outfile (default multislice-study.png
# in the working directory; .svg with fmt='svg', terminal.gp); run from
# plots/ or with it on gnuplot's loadpath.  csv and gen_csv may be given
# with -e; by default the files beside this script.
stem = "multislice-study"; w = 1500; h = 560; termlw = 1.3
load "terminal.gp"
set datafile separator ","
if (!exists("csv")) csv = "multislice-study.csv"
if (!exists("gen_csv")) gen_csv = "multislice-generations.csv"

# columns of multislice-study.csv
c_model = 1; c_slices = 2; c_gbps = 4; c_eps_chip = 8; c_coll = 10
models = "resnet50 bert-large"
bws = "25 50 100 200"
n = words(models) * words(bws)
model(i) = word(models, (i - 1) / words(bws) + 1)
bw(i) = word(bws, (i - 1) % words(bws) + 1)
name(m) = m eq "resnet50" ? "ResNet-50" : m eq "bert-large" ? "BERT-large" : m
# light (25 Gb/s) to dark (200 Gb/s), one hue per model
colour(i) = word("#fdae6b #fd8d3c #e6550d #a63603 #9ecae1 #6baed6 #3182bd #08519c", i)
sel(i) = strcol(c_model) eq model(i) && strcol(c_gbps) eq bw(i)
label(i) = sprintf("%s, %s Gb/s", name(model(i)), bw(i))

# one slice's examples/s per chip, per line
array base[n]
do for [i = 1:n] {
    stats csv every ::1 using (sel(i) && column(c_slices) == 1 ? column(c_eps_chip) : NaN) nooutput
    base[i] = exists("STATS_records") && STATS_records > 0 ? STATS_max : NaN
}

set multiplot layout 1, 3 title "Data-parallel training on slices of tpu-v5e-256 over the DCN (podsim; bf16, timing only, fixed batch per chip)" font ",13"
set grid xtics ytics lc rgb "#dddddd"
set logscale x 2
set xrange [0.8:20]
set xtics (1, 2, 4, 8, 16)
set xlabel "slices of tpu-v5e-256 (256 chips each)"

set title "throughput per chip against one slice"
set ylabel "scaling efficiency (%)"
set key bottom left font ",9" spacing 1.1
plot for [i = 1:n] csv every ::1 \
         using (column(c_slices)):(sel(i) ? 100 * column(c_eps_chip) / base[i] : NaN) \
         with linespoints lw 2 pt (model(i) eq "resnet50" ? 7 : 9) lc rgb colour(i) title label(i)

set title "exposed collective time per step"
set ylabel "ms per step (not hidden under backward)"
set logscale y 10
set key bottom right font ",9" spacing 1.1
plot for [i = 1:n] csv every ::1 \
         using (column(c_slices)):(sel(i) ? 1e3 * column(c_coll) : NaN) \
         with linespoints lw 2 pt (model(i) eq "resnet50" ? 7 : 9) lc rgb colour(i) title label(i)
unset logscale y

# generations: examples/s per chip relative to v4, one cluster per model
set title "128 chips, one slice: throughput per chip relative to v4"
unset logscale x
set xrange [-0.6:3.6]
set xtics ("v4" 0, "v5e" 1, "v5p" 2, "v6e" 3)
set xlabel "tpu-v4-256, tpu-v5e-128, tpu-v5p-256, tpu-v6e-128"
set ylabel "examples/s per chip / v4's"
set yrange [0:*]
# headroom above the tallest bar for the key and the value labels
set offsets 0, 0, graph 0.3, 0
set style fill solid 0.8 border -1
set boxwidth 0.35
set key top left font ",9"
g_model = 1; g_gen = 3; g_eps = 7
gx(g) = g eq "v4" ? 0 : g eq "v5e" ? 1 : g eq "v5p" ? 2 : g eq "v6e" ? 3 : NaN
stats gen_csv every ::1 using (strcol(g_model) eq "resnet50" && strcol(g_gen) eq "v4" ? column(g_eps) : NaN) nooutput
v4_r = STATS_max
stats gen_csv every ::1 using (strcol(g_model) eq "bert-large" && strcol(g_gen) eq "v4" ? column(g_eps) : NaN) nooutput
v4_b = STATS_max
plot gen_csv every ::1 using (gx(strcol(g_gen)) - 0.18):(strcol(g_model) eq "resnet50" ? column(g_eps) / v4_r : NaN) \
         with boxes lc rgb "#e6550d" title "ResNet-50, 128 images/chip", \
     gen_csv every ::1 using (gx(strcol(g_gen)) + 0.18):(strcol(g_model) eq "bert-large" ? column(g_eps) / v4_b : NaN) \
         with boxes lc rgb "#3182bd" title "BERT-large, 16 seq./chip", \
     gen_csv every ::1 using (gx(strcol(g_gen)) - 0.18):(strcol(g_model) eq "resnet50" ? column(g_eps) / v4_r : NaN):(sprintf("%.2f", column(g_eps) / v4_r)) \
         with labels offset 0, 0.7 font ",9" notitle, \
     gen_csv every ::1 using (gx(strcol(g_gen)) + 0.18):(strcol(g_model) eq "bert-large" ? column(g_eps) / v4_b : NaN):(sprintf("%.2f", column(g_eps) / v4_b)) \
         with labels offset 0, 0.7 font ",9" notitle
unset multiplot

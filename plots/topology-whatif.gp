# topology-whatif.gp: two topologies of the same chips side by side, from
# topology-whatif.csv (the `podsim sweep` of plots/Makefile: BERT-large
# data-parallel on the 256 chips of tpu-v4-512, a 4x8x8 3-D torus, and on
# the same chips wired as a 16x16 2-D torus, plots/tpu-v4-512-2d.json, at
# global batches of 1 to 16 sequences of 512 per chip).  Left, throughput
# against the global batch; right, each point's step as a bar, 3-D left and
# 2-D right of each batch: compute, the collective time the backward pass
# did not hide, and the rest (host loop), in ms.  A row is 2-D when its
# topology names the 2-d file; columns are read by their header names.
if (!exists("csv")) csv = "topology-whatif.csv"
stem = "topology-whatif"; w = 1250; h = 560
load "terminal.gp"
set datafile separator ","
set datafile columnheaders

two_d = 'strstrt(strcol("topology"), "2d") > 0'
is(k) = k == 2 ? @two_d : !(@two_d)
name(k) = k == 1 ? "3-D torus 4x8x8 (tpu-v4-512)" : "2-D torus 16x16 (what-if)"
colour(k) = word("#08519c #d95f02", k)
light(k) = word("#9ecae1 #fdae6b", k)
# global batch 256 * 2^i is at x = i
bx = 'log(column("global_batch") / 256.0) / log(2)'
stats csv using (@bx) nooutput
n = int(STATS_max + 0.5)

set multiplot layout 1,2 title \
    "What if TPU v4 were a 2-D torus? BERT-large data-parallel on 256 v4 chips (seq. 512, bf16)" font ",13"
set xrange [-0.6:n + 0.6]
set xtics ("256\n1/chip" 0, "512\n2/chip" 1, "1024\n4/chip" 2, "2048\n8/chip" 3, "4096\n16/chip" 4) nomirror out
set xlabel "global batch (sequences per step, per chip)" offset 0,-1
set grid ytics lc rgb "#dddddd"
set bmargin 6

set title "throughput"
set ylabel "examples/s (sequences of 512)"
set yrange [0:*]
set format y "%.0s%c"
set key top left Left reverse
plot for [k = 1:2] csv using (is(k) ? @bx : NaN):(column("examples_per_s")) \
         smooth unique with linespoints lw 2 pt 7 ps 1.2 lc rgb colour(k) title name(k)

set title "time per step: compute + collective (not hidden by backward)"
set ylabel "time per step (ms)"
set format y "%g"
set style fill solid 0.9 border rgb "#404040"
set key top left Left reverse
bw = 0.36
off(k) = (k - 1.5) * 0.38
step(k) = column("step_time_s") * 1e3
comp = 'column("breakdown.compute") * 1e3'
coll = 'column("breakdown.collective") * 1e3'
plot for [k = 1:2] csv using (is(k) ? @bx + off(k) : NaN):(step(k) / 2):(bw / 2):(step(k) / 2) \
         with boxxyerror fs solid 0.9 lc rgb "#bbbbbb" notitle, \
     for [k = 1:2] csv using (is(k) ? @bx + off(k) : NaN):((@comp + @coll) / 2):(bw / 2):((@comp + @coll) / 2) \
         with boxxyerror lc rgb colour(k) title name(k) . ": collective", \
     for [k = 1:2] csv using (is(k) ? @bx + off(k) : NaN):(@comp / 2):(bw / 2):(@comp / 2) \
         with boxxyerror lc rgb light(k) title name(k) . ": compute", \
     for [k = 1:2] csv using (is(k) ? @bx + off(k) : NaN):(step(k)):(sprintf("%.0f", step(k))) \
         with labels offset 0,0.6 font ",8" notitle
unset multiplot

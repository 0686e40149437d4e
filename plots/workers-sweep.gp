# workers-sweep.gp: step time and infeed stall against the host's input
# workers, from workers-sweep.csv, with the closed-form knee
# w* = batch x cost / compute time marked.
# Writes workers-sweep.png here (plots/Makefile copies it to ../docs/), or
# .svg with fmt='svg' (terminal.gp).
if (!exists("fmt")) fmt = "png"
stem = "workers-sweep"; w = 900; h = 520; outfile = stem . "." . fmt
load "terminal.gp"
set datafile separator ","
set title "ResNet-50 on tpu-v3-8, 5 ms of host CPU per image: input workers vs step time"
set xlabel "input pipeline workers on the host"
set ylabel "time per step (ms)"
set key top right
set grid
set yrange [0:*]
# the host needs 1024 x 5 ms / w per step; the cores need the compute-bound step
stats "workers-sweep.csv" every ::1 using 1:($2*1e3) nooutput
core = STATS_min_y
knee = 1024 * 5.0 / core
set arrow from knee, graph 0 to knee, graph 1 nohead dt 2 lc rgb "#666666"
set label sprintf("knee: %.0f workers", knee) at knee, graph 0.55 offset 1,0
plot "workers-sweep.csv" every ::1 using 1:($2*1e3) with linespoints lw 2 pt 7 lc rgb "#1b9e77" title "step time", \
     "" every ::1 using 1:($5*1e3) with linespoints lw 2 pt 5 lc rgb "#d95f02" title "infeed stall", \
     1024 * 5.0 / x with lines dt 3 lc rgb "#7570b3" title "host time per step, 1024 x 5 ms / workers"

# batch-sweep.gp: step time (compute + collective, stacked) and MXU
# utilization against global batch, from batch-sweep.csv.
# Writes batch-sweep.png here (plots/Makefile copies it to ../docs/), or
# .svg with fmt='svg' (terminal.gp).
if (!exists("fmt")) fmt = "png"
stem = "batch-sweep"; w = 900; h = 520; outfile = stem . "." . fmt
load "terminal.gp"
set datafile separator ","
set title "ResNet-50 on tpu-v3-8 (8 replicas, bf16): where a step goes"
set xlabel "global batch (examples per step; per core = batch / 8)"
set ylabel "time per step (ms)"
set y2label "MXU utilization (%)"
set ytics nomirror
set y2tics
set y2range [0:100]
set yrange [0:*]
set key top left
set style fill solid 0.6 border -1
set boxwidth 0.6 relative
set xtics rotate by 0
plot "batch-sweep.csv" every ::1 using 0:(($3+$4)*1e3):xtic(1) with boxes lc rgb "#d95f02" title "collective", \
     "" every ::1 using 0:($3*1e3) with boxes lc rgb "#1b9e77" title "compute", \
     "" every ::1 using 0:($8*100) axes x1y2 with linespoints lw 2 pt 7 lc rgb "#7570b3" title "MXU utilization"

# batch-sweep.gp: compute and exposed collective time per step, side by
# side on a log scale with the collective's share of the step, and MXU
# utilization against global batch, from batch-sweep.csv.
# Writes batch-sweep.png in the working directory (make docs-plots copies
# it to ../docs/), or
# .svg with fmt='svg' (terminal.gp).
if (!exists("fmt")) fmt = "png"
stem = "batch-sweep"; w = 900; h = 520; outfile = stem . "." . fmt
load "terminal.gp"
set datafile separator ","
set title "ResNet-50 on tpu-v3-8 (8 replicas, bf16): where a step goes"
set xlabel "global batch (examples per step; per core = batch / 8)"
set ylabel "time per step (ms, log scale)"
set y2label "MXU utilization (%)"
set ytics nomirror
set y2tics
set y2range [0:100]
# compute and the exposed collective side by side on a log scale: the
# gradients' all-reduce is 0.3 ms against 10..140 ms of compute, a sliver
# no linear stack can show; its share of the step is written above it
set logscale y
set yrange [0.1:1000]
set key top left
set style fill solid 0.6 border -1
set boxwidth 0.36 absolute
set xtics rotate by 0
plot "batch-sweep.csv" every ::1 using ($0 - 0.19):($3*1e3) with boxes lc rgb "#1b9e77" title "compute", \
     "" every ::1 using ($0 + 0.19):($4*1e3) with boxes lc rgb "#d95f02" title "collective (exposed)", \
     "" every ::1 using ($0 + 0.19):($4*1e3):(sprintf("%.2f ms\n%.1f%%", $4*1e3, 100*$4/$2)) \
        with labels offset 0,1.6 font ",9" notitle, \
     "" every ::1 using 0:($8*100):xtic(1) axes x1y2 with linespoints lw 2 pt 7 lc rgb "#7570b3" title "MXU utilization"

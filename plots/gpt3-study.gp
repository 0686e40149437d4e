# gpt3-study.gp: the GPT-3 175B layout study of gpt3-study.sh, from
# gpt3-study.csv (one row per tensor x fsdp x data mesh of tpu-v4-4096 that
# fits HBM, in the script's order: by tensor, then fsdp).  Left: MFU and HFU
# per layout; right: the step split into compute and the collective time
# each mesh axis leaves exposed (stacked; data, fsdp, tensor), in seconds.
# Writes outfile (default gpt3-study.png in the working directory; .svg with
# fmt='svg', terminal.gp); run from plots/ or with it on gnuplot's loadpath.
# csv may be given with -e; by default the file beside this script.
stem = "gpt3-study"; w = 1400; h = 560; termlw = 1.3
load "terminal.gp"
set datafile separator ","
if (!exists("csv")) csv = "gpt3-study.csv"

# columns of gpt3-study.csv
c_t = 1; c_f = 2; c_d = 3; c_step = 4; c_mfu = 5; c_hfu = 6; c_comp = 7
c_xd = 9; c_xf = 10; c_xt = 11
label = "sprintf(\"T%d F%d D%d\", column(c_t), column(c_f), column(c_d))"

set multiplot layout 1, 2 title "GPT-3 175B on tpu-v4-4096 (2048 chips), global batch 2048 x 2048 tokens, bf16, Adam, full remat (podsim)" font ",13"
set grid ytics lc rgb "#dddddd"
set style fill solid 0.85 border -1
set xtics rotate by -35 font ",9"
set xlabel "mesh: tensor T x fsdp F x data D"
set key top right font ",9"

set title "utilization per layout"
set ylabel "% of v4 peak (275 TFLOP/s per chip)"
set yrange [0:100]
set boxwidth 0.38
plot csv every ::1 using ($0 - 0.2):(100 * column(c_mfu)):xtic(@label) with boxes lc rgb "#3182bd" title "MFU (model FLOPs)", \
     csv every ::1 using ($0 + 0.2):(100 * column(c_hfu)) with boxes lc rgb "#9ecae1" title "HFU (with recomputation)", \
     csv every ::1 using ($0 - 0.2):(100 * column(c_mfu)):(sprintf("%.1f", 100 * column(c_mfu))) \
         with labels offset 0, 0.7 font ",9" notitle

set title "step time: compute and exposed collective time per mesh axis"
set ylabel "seconds per step"
set yrange [0:*]
set boxwidth 0.7
set offsets 0.5, 0.5, 0, 0
set key outside right top font ",9"
plot csv every ::1 using 0:(column(c_comp) + column(c_xd) + column(c_xf) + column(c_xt)):xtic(@label) \
         with boxes lc rgb "#fdae6b" title "tensor exposed", \
     csv every ::1 using 0:(column(c_comp) + column(c_xd) + column(c_xf)) with boxes lc rgb "#e6550d" title "fsdp exposed", \
     csv every ::1 using 0:(column(c_comp) + column(c_xd)) with boxes lc rgb "#756bb1" title "data exposed", \
     csv every ::1 using 0:(column(c_comp)) with boxes lc rgb "#74c476" title "compute", \
     csv every ::1 using 0:(column(c_step)):(sprintf("%.1f s", column(c_step))) \
         with labels offset 0, 0.7 font ",9" notitle
unset multiplot

# long-context.gp: the long-context study of long-context.sh, from
# long-context.csv (LLaMA-2 7B, one sequence per chip on tpu-v5p-64, 2048 to
# 32768 tokens; unfused or flash attention; rematerialization none, minimal
# or full).  Left: tokens/s per chip of the layouts that fit; right: HBM per
# device, the peak of those that fit and what the refused ones need, against
# the chip's 95 GiB.  Writes outfile (default long-context.png in the
# working directory; .svg with fmt='svg', terminal.gp); run from plots/ or
# with it on gnuplot's loadpath.  csv may be given with -e.
stem = "long-context"; w = 1300; h = 540; termlw = 1.3
load "terminal.gp"
set datafile separator ","
if (!exists("csv")) csv = "long-context.csv"

c_seq = 1; c_att = 2; c_remat = 3; c_fits = 4; c_hbm = 5; c_tps = 7
atts = "unfused flash"
remats = "none minimal full"
n = words(atts) * words(remats)
att(i) = word(atts, (i - 1) / words(remats) + 1)
remat(i) = word(remats, (i - 1) % words(remats) + 1)
sel(i) = strcol(c_att) eq att(i) && strcol(c_remat) eq remat(i)
label(i) = sprintf("%s attention, remat %s", att(i), remat(i))
colour(i) = word("#fdae6b #e6550d #a63603 #9ecae1 #3182bd #08519c", i)
dash(i) = att(i) eq "flash" ? 1 : 2

set multiplot layout 1, 2 title "LLaMA-2 7B, one sequence per chip, tpu-v5p-64 (fsdp 32; podsim, bf16, timing only)" font ",13"
set grid xtics ytics lc rgb "#dddddd"
set logscale x 2
set xrange [1700:40000]
set xtics ("2k" 2048, "4k" 4096, "8k" 8192, "16k" 16384, "32k" 32768)
set xlabel "sequence length (tokens)"

set title "throughput of the layouts that fit"
set ylabel "tokens/s per chip"
set yrange [0:*]
set key bottom left font ",9" spacing 1.1
plot for [i = 1:n] csv every ::1 \
         using (column(c_seq)):(sel(i) && column(c_fits) == 1 ? column(c_tps) : NaN) \
         with linespoints lw 2 dt dash(i) pt 7 lc rgb colour(i) title label(i)

set title "HBM per device: the peak, or what a refused layout needs"
set ylabel "GiB per device"
set logscale y 10
set yrange [1:5000]
set key top left font ",9" spacing 1.1
plot for [i = 1:n] csv every ::1 \
         using (column(c_seq)):(sel(i) ? column(c_hbm) : NaN) \
         with linespoints lw 2 dt dash(i) pt (i <= 3 ? 6 : 7) lc rgb colour(i) title label(i), \
     95 with lines lw 2 lc rgb "#cb181d" dt 3 title "95 GiB (v5p)"
unset multiplot

# terminal.gp: the output of every figure script, loaded after it sets
#   stem      the figure's name (default file <stem>.<fmt>, in the working directory)
#   w, h      its size in pixels
# and optionally font (",11"), termlw (1, scales every line) and outfile.
# fmt is "png" (the default) or "svg": `gnuplot -e "fmt='svg'" x.gp`, or
# `make plots FORMAT=svg`; with an outfile ending in .svg and no fmt, svg.
# PNG is drawn with pngcairo when gnuplot has it (the plain png terminal
# otherwise), SVG at the same size on a white background, so the two look
# alike.
if (!exists("fmt")) {
    fmt = exists("outfile") && strlen(outfile) > 4 && \
          outfile[strlen(outfile) - 3:] eq ".svg" ? "svg" : "png"
}
if (!exists("font")) font = ",11"
if (!exists("termlw")) termlw = 1
if (!exists("outfile")) outfile = stem . "." . fmt
if (fmt eq "svg") {
    set terminal svg size w, h enhanced font "Sans".font linewidth termlw background rgb "white"
} else {
    if (fmt ne "png") { print "terminal.gp: fmt must be png or svg, got ".fmt; exit status 1 }
    if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
        set terminal pngcairo size w, h font font linewidth termlw
    } else {
        set terminal png size w, h
    }
}
set output outfile
